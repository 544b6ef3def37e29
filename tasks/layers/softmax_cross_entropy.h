#pragma once
// The classification loss at the top of the model.

#include <cstddef>
#include <cstdint>

namespace gradmesh::tasks {

/// Softmax followed by cross-entropy against integer labels, averaged over the batch. Not a Layer:
/// it has no output, it starts the backward pass. All functions are stateless and reentrant, do
/// not allocate, and are numerically stable (each row's max is subtracted before exp; sums in
/// double). Labels must be in [0, classes): a label outside throws gradmesh::ContractError.
class SoftmaxCrossEntropy {
 public:
  /// logits: batch x classes; labels: batch. Writes dlogits (batch x classes) =
  /// (softmax(logits) - onehot(labels)) / batch, the gradient of the mean loss, and returns the
  /// mean loss (nats). dlogits may alias logits.
  static float forward_backward(const float* logits, const std::int32_t* labels, std::size_t batch,
                                std::size_t classes, float* dlogits);

  /// The mean loss (nats) alone.
  static float loss(const float* logits, const std::int32_t* labels, std::size_t batch,
                    std::size_t classes);

  /// How many rows have argmax(logits) == label (ties: the first maximum wins).
  static std::size_t count_correct(const float* logits, const std::int32_t* labels,
                                   std::size_t batch, std::size_t classes);
};

}  // namespace gradmesh::tasks
