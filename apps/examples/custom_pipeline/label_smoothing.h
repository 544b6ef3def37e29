#pragma once
// A user-defined loss: cross-entropy against smoothed labels (Szegedy et al., "Rethinking the
// Inception Architecture for Computer Vision", CVPR'16, sec. 7): the target of a sample of class y
// is q = (1 - eps) onehot(y) + eps / K over the K classes, and the loss -sum_k q_k log softmax_k.
// It shows the public loss interface (tasks/layers/loss.h) and how a loss kind is registered so
// that a job config can name it as the last entry: model.layers = [..., "label_smoothing:0.1"].
// With eps = 0 it is the built-in softmax_cross_entropy.
//
// Also here: top_k_accuracy, a metric a user's evaluation adds beside loss and accuracy.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "engine/error.h"
#include "tasks/layers/loss.h"

namespace custom {

class LabelSmoothing final : public gradmesh::tasks::Loss {
 public:
  /// For `classes` outputs, with smoothing eps in [0, 1).
  LabelSmoothing(std::size_t classes, double eps) : classes_(classes), eps_(eps) {}

  /// Writes dlogits = (softmax(z) - q) / batch, the gradient of the mean loss; returns the mean.
  float forward_backward(std::span<const float> logits, std::span<const std::int32_t> labels,
                         std::size_t classes, std::span<float> dlogits) override {
    return run(logits, labels, classes, dlogits.data());
  }

  float loss(std::span<const float> logits, std::span<const std::int32_t> labels,
             std::size_t classes) override {
    return run(logits, labels, classes, nullptr);
  }

  /// The factory for tasks::register_loss: "label_smoothing" (eps 0.1) or
  /// "label_smoothing:<eps>".
  static std::unique_ptr<Loss> make(const gradmesh::tasks::LayerSpec& spec, std::size_t classes) {
    double eps = 0.1;
    if (!spec.args.empty()) {
      const char* end = spec.args.data() + spec.args.size();
      const auto [ptr, ec] = std::from_chars(spec.args.data(), end, eps);
      if (ec != std::errc() || ptr != end || !std::isfinite(eps) || eps < 0.0 || eps >= 1.0) {
        throw gradmesh::ConfigError(
            "expected 'label_smoothing[:<eps>]' with 0 <= eps < 1, got eps '" + spec.args + "'");
      }
    }
    return std::make_unique<LabelSmoothing>(classes, eps);
  }

 private:
  /// The mean loss; with dlogits, its gradient too. Each row's maximum is subtracted before exp
  /// (stable); sums in double.
  float run(std::span<const float> logits, std::span<const std::int32_t> labels,
            std::size_t classes, float* dlogits) const {
    const std::size_t batch = labels.size();
    const double off = eps_ / static_cast<double>(classes_);
    double total = 0.0;
    for (std::size_t i = 0; i < batch; ++i) {
      const float* z = logits.data() + i * classes;
      const float top = *std::max_element(z, z + classes);
      double sum = 0.0;
      for (std::size_t k = 0; k < classes; ++k) sum += std::exp(static_cast<double>(z[k] - top));
      const double log_sum = std::log(sum);
      const auto y = static_cast<std::size_t>(labels[i]);
      for (std::size_t k = 0; k < classes; ++k) {
        const double log_p = static_cast<double>(z[k] - top) - log_sum;
        const double q = off + (k == y ? 1.0 - eps_ : 0.0);
        total -= q * log_p;
        if (dlogits != nullptr) {
          dlogits[i * classes + k] =
              static_cast<float>((std::exp(log_p) - q) / static_cast<double>(batch));
        }
      }
    }
    return static_cast<float>(total / static_cast<double>(batch));
  }

  std::size_t classes_;
  double eps_;
};

/// The fraction of rows of `logits` (count x classes, count = labels.size()) whose label is among
/// the k largest logits (ties: a logit equal to the label's counts against it only if it comes
/// first), in [0, 1]; 0 for no rows.
inline double top_k_accuracy(std::span<const float> logits, std::span<const std::int32_t> labels,
                             std::size_t classes, std::size_t k) {
  std::size_t hits = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const float* z = logits.data() + i * classes;
    const auto y = static_cast<std::size_t>(labels[i]);
    std::size_t above = 0;  // classes ranked before the label
    for (std::size_t c = 0; c < classes; ++c) above += (z[c] > z[y] || (z[c] == z[y] && c < y));
    hits += above < k;
  }
  return labels.empty() ? 0.0 : static_cast<double>(hits) / static_cast<double>(labels.size());
}

}  // namespace custom
