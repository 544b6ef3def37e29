#pragma once
// One gradmesh node: load the job, join the peers, train, report (DESIGN.md, "Run a node").

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "apps/pipeline/pipeline.h"

namespace gradmesh::app {

/// Runs the node to the end of the job: gradmesh's own pipeline (apps/pipeline/pipeline.h) on
/// the data set of data.dataset / data.path (train and test, cut by data.train_limit and
/// data.test_limit, standardized with the training set's mean and stddev when data.normalize =
/// "standardize"), evaluated on the test set after every epoch. Returns the process exit status
/// (0 on success). Errors (bad config, unreachable or failing peers, bad data) are printed to
/// stderr naming the key, rank or path, and give a non-zero status: 2 for configuration errors,
/// 1 for the rest.
int run_node(const NodeOptions& options);

}  // namespace gradmesh::app
