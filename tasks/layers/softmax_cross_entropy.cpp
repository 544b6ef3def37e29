#include "tasks/layers/softmax_cross_entropy.h"

#include <cmath>
#include <string>

#include "engine/error.h"

namespace gradmesh::tasks {
namespace {

void check_label(std::int32_t label, std::size_t classes) {
  GRADMESH_CHECK(label >= 0 && static_cast<std::size_t>(label) < classes,
                 "softmax_cross_entropy: label " + std::to_string(label) + " outside [0, " +
                     std::to_string(classes) + ")");
}

float row_max(const float* row, std::size_t classes) {
  float m = row[0];
  for (std::size_t c = 1; c < classes; ++c) m = row[c] > m ? row[c] : m;
  return m;
}

}  // namespace

float SoftmaxCrossEntropy::forward_backward(const float* logits, const std::int32_t* labels,
                                            std::size_t batch, std::size_t classes,
                                            float* dlogits) {
  if (batch == 0 || classes == 0) return 0.0f;
  double total = 0.0;
  const double inv_batch = 1.0 / static_cast<double>(batch);
  for (std::size_t k = 0; k < batch; ++k) {
    const float* row = logits + k * classes;
    float* drow = dlogits + k * classes;
    const std::int32_t label = labels[k];
    check_label(label, classes);
    const float m = row_max(row, classes);
    const double z_label = static_cast<double>(row[label]) - m;  // read before drow may alias
    double sum = 0.0;
    for (std::size_t c = 0; c < classes; ++c) {
      const double e = std::exp(static_cast<double>(row[c]) - m);
      drow[c] = static_cast<float>(e);
      sum += e;
    }
    total += std::log(sum) - z_label;
    const double scale = inv_batch / sum;
    for (std::size_t c = 0; c < classes; ++c) {
      drow[c] = static_cast<float>(static_cast<double>(drow[c]) * scale);
    }
    drow[label] -= static_cast<float>(inv_batch);
  }
  return static_cast<float>(total * inv_batch);
}

float SoftmaxCrossEntropy::loss(const float* logits, const std::int32_t* labels, std::size_t batch,
                                std::size_t classes) {
  if (batch == 0 || classes == 0) return 0.0f;
  double total = 0.0;
  for (std::size_t k = 0; k < batch; ++k) {
    const float* row = logits + k * classes;
    check_label(labels[k], classes);
    const float m = row_max(row, classes);
    double sum = 0.0;
    for (std::size_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(row[c]) - m);
    total += std::log(sum) - (static_cast<double>(row[labels[k]]) - m);
  }
  return static_cast<float>(total / static_cast<double>(batch));
}

std::size_t SoftmaxCrossEntropy::count_correct(const float* logits, const std::int32_t* labels,
                                               std::size_t batch, std::size_t classes) {
  std::size_t correct = 0;
  for (std::size_t k = 0; k < batch && classes > 0; ++k) {
    const float* row = logits + k * classes;
    std::size_t best = 0;
    for (std::size_t c = 1; c < classes; ++c) {
      if (row[c] > row[best]) best = c;
    }
    if (labels[k] >= 0 && static_cast<std::size_t>(labels[k]) == best) ++correct;
  }
  return correct;
}

}  // namespace gradmesh::tasks
