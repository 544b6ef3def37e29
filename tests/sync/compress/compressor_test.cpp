// The conformance suite every registered compressor passes (sync/compress/compressor.h; issue 56:
// "run over the registry, so a new compressor is tested by being registered"): sizes, the round
// trip D(C(p)) + error == p, decode_add, the error-feedback invariant, the stats, mask_sent,
// hostile bytes, the residual in checkpoints; and the registry's own contract.

#include "sync/compress/compressor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "apps/examples/custom_pipeline/scaled_int16.h"
#include "engine/checkpoint.h"
#include "engine/error.h"
#include "sync/compress/error_feedback.h"
#include "sync/compress/momentum_correction.h"
#include "tasks/random.h"

using namespace gradmesh::sync::compress;
using gradmesh::ConfigError;
using gradmesh::ContractError;
using gradmesh::ProtocolError;

namespace {

/// The example pipeline's own compressor (apps/examples/custom_pipeline/scaled_int16.h), registered
/// as its main() does, before anything reads the registry: the conformance suite below runs over
/// it like over the built-in ones.
const bool kExampleRegistered = [] {
  register_compressor(custom::scaled_int16_compressor());
  return true;
}();

/// n floats with a gradient's shape: a bell of sums of uniforms, a heavy tail on one in 50, and
/// a few exact zeros.
std::vector<float> gradient(std::size_t n, std::uint64_t seed) {
  gradmesh::tasks::SplitMix64 rng(seed);
  std::vector<float> out(n);
  for (float& v : out) {
    float x = rng.next_float() + rng.next_float() + rng.next_float() + rng.next_float() - 2.0f;
    if (rng.next_below(50) == 0) x *= 40.0f;
    if (rng.next_below(97) == 0) x = 0.0f;
    v = x * 1e-2f;
  }
  return out;
}

double norm2(const std::vector<float>& v) {
  double sum = 0;
  for (const float x : v) sum += static_cast<double>(x) * x;
  return sum;
}

/// The sizes every compressor is run at: one float, odd sizes, chunk boundaries and past them.
constexpr std::size_t kSizes[] = {1, 7, 64, 511, 512, 513, 4099};

CompressorParams params() {
  return CompressorParams{.ratio = 0.1, .seed = 11, .rank = 3, .bits = 4};
}

}  // namespace

TEST_CASE("the registry lists the built-in compressors and refuses a second of a name",
          "[compress][compressor]") {
  const std::vector<std::string> names = compressor_names();
  for (const char* name : {"none", "fp16", "bf16", "int8", "topk", "randomk", "sign", "qsgd"}) {
    CAPTURE(name);
    CHECK(std::find(names.begin(), names.end(), name) != names.end());
    REQUIRE(find_compressor(name) != nullptr);
    CHECK(find_compressor(name)->name == name);
    CHECK_FALSE(find_compressor(name)->summary.empty());
  }
  CHECK(names.front() == "none");
  CHECK(kExampleRegistered);
  CHECK(find_compressor("int16") != nullptr);  // the example's, registered at start
  CHECK(find_compressor("zip") == nullptr);
  CHECK_THROWS_AS(register_compressor(*find_compressor("fp16")), ContractError);
  CHECK_THROWS_AS(register_compressor(CompressorEntry{"", {}, nullptr, ""}), ContractError);
  try {
    (void)compressor_entry("zip", "sync.compression.method");
    FAIL("no error");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find("sync.compression.method") != std::string::npos);
    CHECK(what.find("\"zip\"") != std::string::npos);
    CHECK(what.find("qsgd") != std::string::npos);  // the known names
  }
  // Error feedback wraps every lossy compressor, never the identity.
  CHECK(dynamic_cast<ErrorFeedback*>(make_compressor("int8", 10, params(), true).get()));
  CHECK_FALSE(dynamic_cast<ErrorFeedback*>(make_compressor("int8", 10, params(), false).get()));
  CHECK_FALSE(dynamic_cast<ErrorFeedback*>(make_compressor("none", 10, params(), true).get()));
}

TEST_CASE("every registered compressor: sizes, round trip, decode_add, stats and hostile bytes",
          "[compress][compressor]") {
  for (const std::string& name : compressor_names()) {
    const CompressorEntry& entry = compressor_entry(name);
    for (const std::size_t n : kSizes) {
      CAPTURE(name, n);
      std::unique_ptr<Compressor> c = entry.make(n, params());
      REQUIRE(c != nullptr);
      CHECK(c->name() == name);
      CHECK(c->floats() == n);
      CHECK(c->kept() >= 1);
      CHECK(c->kept() <= n);
      if (entry.traits.dense) CHECK(c->kept() == n);
      const std::size_t bytes = c->encoded_bytes();
      CHECK(bytes > 0);
      CHECK(entry.encoded_bytes(n, params()) == bytes);  // the planner's size is the real one
      CHECK_FALSE(describe_compressor(entry, params()).empty());

      const std::vector<float> p = gradient(n, 100 + n);
      std::vector<std::byte> wire(bytes);
      std::vector<float> error(n, -1.0f);
      const EncodeStats stats = c->encode(p, wire, /*iteration=*/5, error.data());
      REQUIRE_NOTHROW(c->check(wire));

      // D(C(p)) + error == p: bit for bit where the compressor says its error is exact.
      std::vector<float> decoded(n, 123.0f);
      c->decode(wire, decoded, 5);
      for (std::size_t i = 0; i < n; ++i) {
        if (entry.traits.exact_error) {
          REQUIRE(decoded[i] + error[i] == p[i]);
        } else {
          REQUIRE(decoded[i] + error[i] == Approx(p[i]).margin(1e-6));
        }
        if (entry.traits.lossless) REQUIRE(decoded[i] == p[i]);
      }
      CHECK(stats.input_norm2 == Approx(norm2(p)).epsilon(1e-12));
      CHECK(stats.gradient_norm2 == stats.input_norm2);
      CHECK(stats.error_norm2 == Approx(norm2(error)).epsilon(1e-6).margin(1e-15));

      // The same encode without an error buffer writes the same bytes (a second instance: the
      // draws of an iteration are fixed), and in place over p gives the same error.
      std::unique_ptr<Compressor> again = entry.make(n, params());
      std::vector<std::byte> wire2(bytes);
      std::vector<float> in_place = p;
      again->encode(in_place, wire2, 5, in_place.data());
      CHECK(wire2 == wire);
      CHECK(in_place == error);

      // decode_add adds exactly what decode writes.
      std::vector<float> sum = gradient(n, 7);
      std::vector<float> expected = sum;
      for (std::size_t i = 0; i < n; ++i) expected[i] += decoded[i];
      c->decode_add(wire, sum, 5);
      CHECK(sum == expected);

      // mask_sent zeroes the entries sent: all of them for a dense compressor, kept() of them
      // for a sparsifier, and the decoded value is 0 wherever the mask kept a value.
      std::vector<float> mask(n, 1.0f);
      c->mask_sent(wire, mask, 5);
      const auto zeros = static_cast<std::size_t>(std::count(mask.begin(), mask.end(), 0.0f));
      CHECK(zeros == c->kept());
      for (std::size_t i = 0; i < n; ++i) {
        if (mask[i] != 0.0f) REQUIRE(decoded[i] == 0.0f);
      }

      // A wrong size is refused; so is a byte string that is no encoding, or decode survives it.
      std::vector<std::byte> longer(bytes + 1), shorter(bytes - 1);
      CHECK_THROWS_AS(c->check(longer), ProtocolError);
      CHECK_THROWS_AS(c->check(shorter), ProtocolError);
      gradmesh::tasks::SplitMix64 rng(n);
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<std::byte> hostile(bytes);
        for (std::byte& b : hostile) b = static_cast<std::byte>(rng.next_below(256));
        try {
          c->check(hostile);
        } catch (const ProtocolError&) {
          continue;  // refused: nothing else to see
        }
        std::vector<float> out(n);
        c->decode(hostile, out, 5);  // accepted bytes decode to some floats, never a crash
      }
    }
  }
}

TEST_CASE("every registered compressor with error feedback: sent plus residual is what was given",
          "[compress][compressor]") {
  for (const std::string& name : compressor_names()) {
    const CompressorEntry& entry = compressor_entry(name);
    for (const std::size_t n : {std::size_t{7}, std::size_t{1300}}) {
      CAPTURE(name, n);
      std::unique_ptr<Compressor> c = make_compressor(name, n, params(), true);
      auto* feedback = dynamic_cast<ErrorFeedback*>(c.get());
      REQUIRE((feedback != nullptr) == !entry.traits.lossless);
      std::vector<double> given(n, 0.0), sent(n, 0.0);
      std::vector<std::byte> wire(c->encoded_bytes());
      std::vector<float> decoded(n);
      double last_error = 0;
      for (std::uint64_t t = 0; t < 6; ++t) {
        const std::vector<float> g = gradient(n, 1000 * t + n);
        const EncodeStats stats = c->encode(g, wire, t, nullptr);
        CHECK(stats.gradient_norm2 == Approx(norm2(g)).epsilon(1e-12));
        c->decode(wire, decoded, t);
        for (std::size_t i = 0; i < n; ++i) {
          given[i] += g[i];
          sent[i] += decoded[i];
        }
        last_error = stats.error_norm2;
      }
      const std::span<const float> residual =
          feedback != nullptr ? feedback->residual() : std::span<const float>{};
      double residual2 = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double kept = feedback != nullptr ? residual[i] : 0.0;
        residual2 += kept * kept;
        // The sums are in double here, the compressors' arithmetic in float: equal within the
        // float rounding of six steps, exactly for the lossless one.
        REQUIRE(sent[i] + kept == Approx(given[i]).margin(1e-5));
      }
      if (feedback != nullptr) CHECK(last_error == Approx(residual2).epsilon(1e-6).margin(1e-15));

      // The residual survives a checkpoint bit for bit, and the next encode is the same.
      if (feedback == nullptr) continue;
      gradmesh::engine::StateWriter writer;
      feedback->save_state(writer);
      std::unique_ptr<Compressor> restored = make_compressor(name, n, params(), true);
      auto* restored_feedback = dynamic_cast<ErrorFeedback*>(restored.get());
      gradmesh::engine::StateReader reader(writer.bytes(), "residual");
      restored_feedback->load_state(reader);
      const std::vector<float> g = gradient(n, 77);
      std::vector<std::byte> a(c->encoded_bytes()), b(c->encoded_bytes());
      c->encode(g, a, 9, nullptr);
      restored->encode(g, b, 9, nullptr);
      CHECK(a == b);
      CHECK(std::equal(feedback->residual().begin(), feedback->residual().end(),
                       restored_feedback->residual().begin()));
    }
  }
}

TEST_CASE(
    "every registered compressor under DGC's momentum correction: u = m u + g, encoded, masked",
    "[compress][compressor]") {
  // The wrapper (momentum_correction.h) around each compressor with its error feedback gives the
  // bytes the same compressor gives for the velocity formed by hand, and leaves the velocity
  // zeroed where the encoding sent (all of it for a dense compressor), bit for bit.
  constexpr float kMomentum = 0.9f;
  const std::size_t n = 1300;
  for (const std::string& name : compressor_names()) {
    if (compressor_entry(name).traits.lossless) continue;
    CAPTURE(name);
    std::vector<float> velocity = gradient(n, 5);
    std::vector<float> expected = velocity;
    MomentumCorrection wrapped(make_compressor(name, n, params(), true), kMomentum, velocity);
    std::unique_ptr<Compressor> plain = make_compressor(name, n, params(), true);
    std::vector<std::byte> a(wrapped.encoded_bytes()), b(plain->encoded_bytes());
    for (std::uint64_t t = 0; t < 3; ++t) {
      const std::vector<float> g = gradient(n, 100 + t);
      for (std::size_t i = 0; i < n; ++i) expected[i] = kMomentum * expected[i] + g[i];
      const EncodeStats stats = wrapped.encode(g, a, t, nullptr);
      const EncodeStats reference = plain->encode(expected, b, t, nullptr);
      REQUIRE(a == b);
      CHECK(stats.input_norm2 == reference.input_norm2);
      plain->mask_sent(b, expected, t);
      REQUIRE(velocity == expected);
    }
    if (compressor_entry(name).traits.dense) {
      CHECK(std::all_of(velocity.begin(), velocity.end(), [](float v) { return v == 0.0f; }));
    } else {
      CHECK(std::count(velocity.begin(), velocity.end(), 0.0f) >=
            static_cast<std::ptrdiff_t>(wrapped.kept()));
    }
  }
  std::vector<float> short_velocity(3);
  CHECK_THROWS_AS(
      MomentumCorrection(make_compressor("topk", 4, params(), true), 0.9f, short_velocity),
      ContractError);
}

TEST_CASE("a compressor registered by its user is listed, built and wrapped like the built-in ones",
          "[compress][compressor]") {
  // The smallest useful compressor: the floats, halved on the wire, doubled back (exact).
  class Halving final : public Compressor {
   public:
    explicit Halving(std::size_t floats) : Compressor(floats) {}
    [[nodiscard]] std::string_view name() const noexcept override { return "test-halving"; }
    [[nodiscard]] std::size_t encoded_bytes() const noexcept override { return 4 * floats(); }
    EncodeStats encode(std::span<const float> in, std::span<std::byte> out, std::uint64_t,
                       float* error, double) override {
      double input2 = 0;
      for (std::size_t i = 0; i < in.size(); ++i) {
        const float half = in[i] * 0.5f;
        std::memcpy(out.data() + 4 * i, &half, 4);
        input2 += static_cast<double>(in[i]) * in[i];
        if (error != nullptr) error[i] = 0.0f;
      }
      return {input2, input2, 0.0};
    }
    void decode(std::span<const std::byte> in, std::span<float> out, std::uint64_t) const override {
      for (std::size_t i = 0; i < out.size(); ++i) {
        std::memcpy(&out[i], in.data() + 4 * i, 4);
        out[i] *= 2.0f;
      }
    }
    void decode_add(std::span<const std::byte> in, std::span<float> sum,
                    std::uint64_t) const override {
      for (std::size_t i = 0; i < sum.size(); ++i) {
        float v = 0;
        std::memcpy(&v, in.data() + 4 * i, 4);
        sum[i] += v * 2.0f;
      }
    }
  };
  if (find_compressor("test-halving") == nullptr) {
    register_compressor({"test-halving",
                         {.dense = true, .shared_indices = false, .exact_error = true},
                         [](std::size_t floats, const CompressorParams&) {
                           return std::unique_ptr<Compressor>(new Halving(floats));
                         },
                         "a test's own compressor",
                         [](std::size_t floats, const CompressorParams&) { return 4 * floats; }});
  }
  const std::vector<std::string> names = compressor_names();
  CHECK(names.back() == "test-halving");
  std::unique_ptr<Compressor> c = make_compressor("test-halving", 3, params(), true);
  CHECK(dynamic_cast<ErrorFeedback*>(c.get()) != nullptr);
  const std::vector<float> g{1.0f, -3.0f, 0.25f};
  std::vector<std::byte> wire(c->encoded_bytes());
  c->encode(g, wire, 0, nullptr);
  std::vector<float> back(3);
  c->decode(wire, back, 0);
  CHECK(back == g);
}
