#include "apps/recovery/checkpoint_writer.h"

#include <chrono>
#include <utility>

#include <spdlog/spdlog.h>

namespace gradmesh::app {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

CheckpointWriter::CheckpointWriter(CheckpointStore store, CheckpointHeader header)
    : store_(std::move(store)), header_(std::move(header)) {}

CheckpointWriter::~CheckpointWriter() {
  if (write_.valid()) write_.wait();
}

CheckpointWriter::Saved CheckpointWriter::save(std::uint64_t iteration, CheckpointSet& sections) {
  const auto begin = Clock::now();
  const double previous = finish();  // the previous file is on disk before its buffer is reused
  header_.iteration = iteration;
  sections.save(header_, file_);
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  spdlog::info(
      "checkpoint of iteration {}: {:.2f} MB of state saved in {:.1f} ms (with any wait for "
      "the previous write); writing it in the background",
      iteration, static_cast<double>(file_.size()) / 1e6, seconds * 1e3);
  // The write (temporary file, fsync, rename) runs beside the next iterations; the state is
  // already a copy, so training goes on at once.
  writing_ = iteration;
  write_ = std::async(std::launch::async, [this, iteration] {
    const auto start = Clock::now();
    store_.save(iteration, file_);
    return std::chrono::duration<double>(Clock::now() - start).count();
  });
  return Saved{file_.size(), seconds, previous};
}

double CheckpointWriter::finish() {
  if (!write_.valid()) return 0;
  const double seconds = write_.get();  // rethrows the write's CheckpointError
  spdlog::info("checkpoint of iteration {} written in {:.1f} ms ({})", writing_, seconds * 1e3,
               store_.path(writing_).string());
  return seconds;
}

}  // namespace gradmesh::app
