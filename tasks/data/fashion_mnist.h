#pragma once
// Fashion-MNIST (Xiao, Rasul, Vollgraf 2017): 60,000 training and 10,000 test 28 x 28 grey images
// of 10 clothing classes, in the IDX format of MNIST.

#include <filesystem>

#include "tasks/data/dataset.h"

namespace gradmesh::tasks {

/// Where the Debian package dataset-fashion-mnist installs the files.
inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";

/// The shape of one Fashion-MNIST image: 1 channel x 28 x 28 pixels.
inline constexpr Shape kFashionMnistShape{1, 28, 28};

/// Loads Fashion-MNIST from `dir`: train-images-idx3-ubyte, train-labels-idx1-ubyte,
/// t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each either gzipped (".gz", preferred) or not.
/// Result: train 60,000 x 784 and test 10,000 x 784 floats in [0, 1], classes 10, shape
/// 1 x 28 x 28 (kFashionMnistShape; the IDX header's rows x cols).
/// Thread safety: reentrant. Throws gradmesh::DataError naming the path if the directory or a file
/// is missing (the message says to install the Debian package dataset-fashion-mnist), if a file
/// is malformed (see read_idx_images), or if image and label counts differ.
TrainTest load_fashion_mnist(const std::filesystem::path& dir);

}  // namespace gradmesh::tasks
