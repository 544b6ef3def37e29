#pragma once
// An in-memory labelled data set, the input of a data-source task.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gradmesh::tasks {

/// A labelled data set held in memory. x: count x features floats, row-major; y: count class
/// labels, each in [0, classes). Plain value type; thread safety as std::vector (concurrent
/// reads are safe).
struct Dataset {
  std::size_t count = 0, features = 0, classes = 10;
  std::vector<float> x;
  std::vector<std::int32_t> y;
};

/// A training set and its held-out test set.
struct TrainTest {
  Dataset train, test;
};

/// Checks that `d` is consistent: x.size() == count * features, y.size() == count, every label in
/// [0, classes). Throws gradmesh::DataError saying which part is wrong (expected vs found).
void validate(const Dataset& d);

/// A copy of the first `n` examples of `d` (all of them if n >= d.count). Thread safety: reads d.
/// Never throws except std::bad_alloc.
Dataset take_first(const Dataset& d, std::size_t n);

}  // namespace gradmesh::tasks
