#pragma once
// An in-memory labelled data set, the input of a data-source task.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tasks/shape.h"

namespace gradmesh::tasks {

/// A labelled data set held in memory. x: count x features floats, row-major; y: count class
/// labels, each in [0, classes). shape: the layout of one example's features, C x H x W with
/// C H W = features (images: 1 x 28 x 28 for Fashion-MNIST), or unset (size 0) for plain feature
/// vectors. Plain value type; thread safety as std::vector (concurrent reads are safe).
struct Dataset {
  std::size_t count = 0, features = 0, classes = 10;
  std::vector<float> x;
  std::vector<std::int32_t> y;
  Shape shape{};
};

/// The shape of one example of `d`: d.shape when set, else features x 1 x 1. Never throws.
[[nodiscard]] Shape sample_shape(const Dataset& d) noexcept;

/// A training set and its held-out test set.
struct TrainTest {
  Dataset train, test;
};

/// Checks that `d` is consistent: x.size() == count * features, y.size() == count, every label in
/// [0, classes), and shape unset or of `features` floats. Throws gradmesh::DataError saying which
/// part is wrong (expected vs found).
void validate(const Dataset& d);

/// A copy of the first `n` examples of `d` (all of them if n >= d.count). Thread safety: reads d.
/// Never throws except std::bad_alloc.
Dataset take_first(const Dataset& d, std::size_t n);

/// Examples [begin, begin + n) of `d` (clamped to its count), as a new data set of d's shape and
/// classes: a node's share of a test set (apps/pipeline: Pipeline::set_test_set).
[[nodiscard]] Dataset take_range(const Dataset& d, std::size_t begin, std::size_t n);

/// One scale for every input feature: x' = (x - mean) / stddev.
struct Standardization {
  float mean = 0.0f;    ///< the training set's mean feature value
  float stddev = 1.0f;  ///< the training set's (population) standard deviation, > 0
};

/// The mean and standard deviation of every feature of every example of `d` together, summed in
/// double. One pair for the whole input, not one per feature: the pixels of a grayscale image
/// share one scale (Fashion-MNIST: mean 0.286, stddev 0.353). Fit on the training set and apply
/// to the training and the test set alike (LeCun, Bottou, Orr and Mueller, "Efficient
/// BackProp", 1998, sec. 4.3: inputs of zero mean and equal variance speed SGD up). Thread
/// safety: reads d. Throws gradmesh::DataError when d holds no features or they are all equal
/// (a standard deviation of 0).
[[nodiscard]] Standardization fit_standardization(const Dataset& d);

/// d.x <- (d.x - s.mean) / s.stddev, in place, every float. Thread safety: writes d. Never
/// throws.
void standardize(Dataset& d, const Standardization& s) noexcept;

}  // namespace gradmesh::tasks
