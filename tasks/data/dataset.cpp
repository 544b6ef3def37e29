#include "tasks/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/error.h"

namespace gradmesh::tasks {

Shape sample_shape(const Dataset& d) noexcept {
  return d.shape.size() != 0 ? d.shape : Shape::flat(d.features);
}

void validate(const Dataset& d) {
  if (d.shape.size() != 0 && d.shape.size() != d.features) {
    throw DataError("data set: expected an example shape of " + std::to_string(d.features) +
                    " features, found " + to_string(d.shape));
  }
  if (d.x.size() != d.count * d.features) {
    throw DataError("data set: expected " + std::to_string(d.count) + " x " +
                    std::to_string(d.features) + " = " + std::to_string(d.count * d.features) +
                    " features, found " + std::to_string(d.x.size()));
  }
  if (d.y.size() != d.count) {
    throw DataError("data set: expected " + std::to_string(d.count) + " labels, found " +
                    std::to_string(d.y.size()));
  }
  for (std::size_t i = 0; i < d.count; ++i) {
    if (d.y[i] < 0 || static_cast<std::size_t>(d.y[i]) >= d.classes) {
      throw DataError("data set: example " + std::to_string(i) + ": expected a label in [0, " +
                      std::to_string(d.classes) + "), found " + std::to_string(d.y[i]));
    }
  }
}

Dataset take_first(const Dataset& d, std::size_t n) { return take_range(d, 0, n); }

Dataset take_range(const Dataset& d, std::size_t begin, std::size_t n) {
  Dataset out;
  begin = std::min(begin, d.count);
  out.count = std::min(n, d.count - begin);
  out.features = d.features;
  out.classes = d.classes;
  out.shape = d.shape;
  const auto x0 = static_cast<std::ptrdiff_t>(begin * d.features);
  const auto nx = static_cast<std::ptrdiff_t>(out.count * d.features);
  out.x.assign(d.x.begin() + x0, d.x.begin() + x0 + nx);
  const auto y0 = static_cast<std::ptrdiff_t>(begin);
  out.y.assign(d.y.begin() + y0, d.y.begin() + y0 + static_cast<std::ptrdiff_t>(out.count));
  return out;
}

Standardization fit_standardization(const Dataset& d) {
  if (d.x.empty()) throw DataError("data set: cannot standardize an empty data set");
  double sum = 0.0, sum_sq = 0.0;
  for (const float v : d.x) {
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const auto n = static_cast<double>(d.x.size());
  const double mean = sum / n;
  const double variance = std::max(0.0, sum_sq / n - mean * mean);
  const double stddev = std::sqrt(variance);
  if (!(stddev > 1e-12)) {
    throw DataError("data set: cannot standardize: every feature equals " + std::to_string(mean));
  }
  return Standardization{static_cast<float>(mean), static_cast<float>(stddev)};
}

void standardize(Dataset& d, const Standardization& s) noexcept {
  const float scale = 1.0f / s.stddev;
  for (float& v : d.x) v = (v - s.mean) * scale;
}

}  // namespace gradmesh::tasks
