// Tests for engine/checkpoint.h: a state's typed bytes, written by StateWriter and read back by
// StateReader, and the reader's refusals (the file that holds states: tests/apps/recovery/).

#include "engine/checkpoint.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/error.h"

using gradmesh::CheckpointError;
using namespace gradmesh::engine;

TEST_CASE("a state's values read back in order, bit for bit", "[engine][checkpoint]") {
  StateWriter out;
  const std::vector<float> weights{1.5f, -0.0f, 3.25e-8f};
  const std::vector<std::uint64_t> clocks{0, 7, UINT64_MAX};
  const std::vector<double> times{0.1, -2.5};
  out.write_u64(42);
  out.write_f64(0.625);
  out.write_floats(weights);
  out.write_u64s(clocks);
  out.write_f64s(times);
  out.write_string("kv_push");
  const std::size_t at = out.size();
  out.write_u64(0);
  out.patch_u64(at, 99);

  StateReader in(out.bytes(), "test state");
  CHECK(in.read_u64() == 42);
  CHECK(in.read_f64() == 0.625);
  std::vector<float> back(3);
  in.read_floats(back);
  CHECK(back == weights);
  CHECK(std::signbit(back[1]));
  CHECK(in.read_u64s() == clocks);
  CHECK(in.read_f64s() == times);
  CHECK(in.read_string() == "kv_push");
  CHECK(in.read_u64() == 99);
  CHECK_NOTHROW(in.expect_end());
}

TEST_CASE("a state shorter, longer or of another size than expected is refused naming the source",
          "[engine][checkpoint]") {
  StateWriter out;
  out.write_floats(std::vector<float>(4, 1.0f));
  out.write_u64(5);

  StateReader too_few(out.bytes(), "model section");
  std::vector<float> three(3);
  CHECK_THROWS_AS(too_few.read_floats(three), CheckpointError);
  StateReader other(out.bytes(), "model section");
  CHECK_THROWS_WITH(other.read_floats(three), Catch::Contains("model section"));

  StateReader left_over(out.bytes(), "cursor");
  std::vector<float> four(4);
  left_over.read_floats(four);
  CHECK_THROWS_WITH(left_over.expect_end(),
                    Catch::Contains("cursor") && Catch::Contains("8 bytes left unread"));
  (void)left_over.read_u64();
  CHECK_THROWS_AS(left_over.read_u64(), CheckpointError);  // truncated: nothing left
}

TEST_CASE("a writer appends to the caller's buffer and clear() keeps its memory",
          "[engine][checkpoint]") {
  std::vector<std::byte> buffer;
  StateWriter out(buffer);
  out.write_u64(1);
  CHECK(buffer.size() == 8);
  const std::size_t capacity = buffer.capacity();
  out.clear();
  CHECK(buffer.empty());
  CHECK(buffer.capacity() == capacity);
}
