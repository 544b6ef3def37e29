#include "engine/checkpoint.h"

#include <bit>
#include <cstring>

#include "engine/error.h"

namespace gradmesh::engine {

static_assert(std::endian::native == std::endian::little,
              "states are little-endian bytes; a big-endian host needs byte swaps here");

// ---- StateWriter ----

void StateWriter::write_raw(const void* data, std::size_t size) {
  const auto* p = static_cast<const std::byte*>(data);
  data_->insert(data_->end(), p, p + size);
}

void StateWriter::patch_u64(std::size_t at, std::uint64_t value) {
  GRADMESH_CHECK_LE(at + sizeof value, data_->size(), "StateWriter::patch_u64 past the end");
  std::memcpy(data_->data() + at, &value, sizeof value);
}

void StateWriter::write_u64(std::uint64_t value) { write_raw(&value, sizeof value); }
void StateWriter::write_f64(double value) { write_raw(&value, sizeof value); }

void StateWriter::write_floats(std::span<const float> values) {
  write_u64(values.size());
  write_raw(values.data(), values.size_bytes());
}

void StateWriter::write_u64s(std::span<const std::uint64_t> values) {
  write_u64(values.size());
  write_raw(values.data(), values.size_bytes());
}

void StateWriter::write_f64s(std::span<const double> values) {
  write_u64(values.size());
  write_raw(values.data(), values.size_bytes());
}

void StateWriter::write_string(std::string_view text) {
  write_u64(text.size());
  write_raw(text.data(), text.size());
}

// ---- StateReader ----

StateReader::StateReader(std::span<const std::byte> bytes, std::string source)
    : bytes_(bytes), source_(std::move(source)) {}

std::span<const std::byte> StateReader::take(std::size_t size, const char* what) {
  if (size > bytes_.size() - at_) {
    throw CheckpointError(source_ + ": truncated: " + std::to_string(size) + " bytes of " + what +
                          " expected at byte " + std::to_string(at_) + ", " +
                          std::to_string(bytes_.size() - at_) + " left");
  }
  const auto out = bytes_.subspan(at_, size);
  at_ += size;
  return out;
}

std::uint64_t StateReader::read_u64() {
  std::uint64_t v = 0;
  std::memcpy(&v, take(sizeof v, "an integer").data(), sizeof v);
  return v;
}

double StateReader::read_f64() {
  double v = 0;
  std::memcpy(&v, take(sizeof v, "a number").data(), sizeof v);
  return v;
}

std::uint64_t StateReader::read_count(std::size_t element_size, const char* what) {
  const std::uint64_t count = read_u64();
  if (count > (bytes_.size() - at_) / element_size) {
    throw CheckpointError(source_ + ": truncated: " + std::to_string(count) + " " + what +
                          " announced at byte " + std::to_string(at_) + ", " +
                          std::to_string(bytes_.size() - at_) + " bytes left");
  }
  return count;
}

void StateReader::read_floats(std::span<float> out) {
  const std::uint64_t count = read_u64();
  if (count != out.size()) {
    throw CheckpointError(source_ + ": holds " + std::to_string(count) + " floats, this job has " +
                          std::to_string(out.size()));
  }
  const auto bytes = take(out.size_bytes(), "floats");
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
}

std::vector<float> StateReader::read_float_vector() {
  std::vector<float> out(read_count(sizeof(float), "floats"));
  const auto bytes = take(out.size() * sizeof(float), "floats");
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<std::uint64_t> StateReader::read_u64s() {
  std::vector<std::uint64_t> out(read_count(sizeof(std::uint64_t), "integers"));
  const auto bytes = take(out.size() * sizeof(std::uint64_t), "integers");
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<double> StateReader::read_f64s() {
  std::vector<double> out(read_count(sizeof(double), "numbers"));
  const auto bytes = take(out.size() * sizeof(double), "numbers");
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::string StateReader::read_string() {
  const std::uint64_t size = read_count(1, "characters");
  const auto bytes = take(size, "a string");
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

void StateReader::expect_end() const {
  if (at_ != bytes_.size()) {
    throw CheckpointError(source_ + ": " + std::to_string(bytes_.size() - at_) +
                          " bytes left unread after byte " + std::to_string(at_) +
                          " (saved by another version or for another job shape?)");
  }
}

}  // namespace gradmesh::engine
