// Tests for tasks/optim/optimizer.h: one velocity per parameter, addressed by model offset.

#include "tasks/optim/optimizer.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "engine/error.h"
#include "tests/tasks/emulated_device.h"

using namespace gradmesh::tasks;

TEST_CASE("Optimizer: steps at an offset use that slice of the velocity and equal Sgd") {
  const SgdOptions o{0.1f, 0.9f, 0.01f};
  Optimizer optimizer(o, 6);
  std::vector<float> w{1, 2, 3}, g{0.5f, -1, 2};
  std::vector<float> w_ref = w, v_ref(3, 0.0f);
  const Sgd sgd(o);
  for (int step = 0; step < 3; ++step) {
    optimizer.step(3, w, g);
    sgd.step(w_ref, g, v_ref);
  }
  CHECK(w == w_ref);
  const auto v = optimizer.velocity();
  CHECK(v[0] == 0.0f);  // the slice before the offset is untouched
  CHECK(std::vector<float>(v.begin() + 3, v.end()) == v_ref);
}

TEST_CASE("Optimizer: set_lr changes the rate of the steps that follow, plain steps too") {
  const SgdOptions o{0.1f, 0.9f, 0.0f};
  Optimizer optimizer(o, 3);
  CHECK(optimizer.lr() == 0.1f);
  optimizer.set_lr(0.025f);
  CHECK(optimizer.lr() == 0.025f);
  CHECK(optimizer.options().lr == 0.025f);
  CHECK(optimizer.options().momentum == 0.9f);
  std::vector<float> w{1, 2, 3}, g{0.5f, -1, 2};
  std::vector<float> w_ref = w, v_ref(3, 0.0f);
  optimizer.step(0, w, g);
  Sgd(SgdOptions{0.025f, 0.9f, 0.0f}).step(w_ref, g, v_ref);
  CHECK(w == w_ref);
  std::vector<float> p{1, 1}, pg{1, -2};
  optimizer.step_plain(p, pg);
  CHECK(p == std::vector<float>{1 - 0.025f * 1, 1 - 0.025f * -2});
  CHECK_THROWS_AS(optimizer.set_lr(-1.0f), gradmesh::ContractError);
  CHECK_THROWS_AS(optimizer.set_lr(NAN), gradmesh::ContractError);
  CHECK(optimizer.lr() == 0.025f);  // a refused rate leaves the old one
}

TEST_CASE("Optimizer: step_sum is the scaled sum, stepped with momentum") {
  Optimizer optimizer({1.0f, 0.0f, 0.0f}, 2);
  std::vector<float> w{0, 0}, a{1, 2}, b{3, 4}, scratch(2);
  const std::vector<std::span<const float>> grads{a, b};
  optimizer.step_sum(0, w, grads, 0.5f, scratch);
  CHECK(scratch == std::vector<float>{2, 3});
  CHECK(w == std::vector<float>{-2, -3});
}

TEST_CASE("Optimizer: step_plain folds weight decay into the gradient and keeps no velocity") {
  Optimizer optimizer({0.5f, 0.9f, 0.1f}, 2);
  std::vector<float> w{1, 2}, g{1, 1};
  optimizer.step_plain(w, g);
  CHECK(g[0] == Approx(1.1f));
  CHECK(w[0] == Approx(1 - 0.5f * 1.1f));
  CHECK(optimizer.velocity()[0] == 0.0f);
}

TEST_CASE("Optimizer: ranges outside the model and bad options are errors") {
  Optimizer optimizer({0.1f, 0.0f, 0.0f}, 2);
  std::vector<float> w{1, 2}, g{1, 1};
  CHECK_THROWS_AS(optimizer.step(1, w, g), gradmesh::ContractError);
  CHECK_THROWS_AS(Optimizer({0.1f, 1.5f, 0.0f}, 2), gradmesh::ConfigError);
}

TEST_CASE(
    "Optimizer: a range kept on the device steps there with its own velocity, as on the host") {
  const SgdOptions o{0.1f, 0.9f, 1e-3f};
  Optimizer host(o, 8), on_device(o, 8);
  testing::EmulatedDevice device;
  on_device.keep_on_device(device, 2, 5);  // a "layer" at floats [2, 7)
  std::vector<float> w = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f, -2.0f, 0.125f};
  Buffer<float> w_device = device.allocate<float>(5), g_device = device.allocate<float>(5);
  device.copy_to_device(w_device.data(), w.data() + 2, 5 * sizeof(float));
  for (int step = 0; step < 3; ++step) {
    std::vector<float> g(5);
    for (std::size_t i = 0; i < g.size(); ++i) {
      g[i] = 0.1f * static_cast<float>(i) - 0.2f * static_cast<float>(step);
    }
    device.copy_to_device(g_device.data(), g.data(), g.size() * sizeof(float));
    host.step(2, std::span<float>(w).subspan(2, 5), g);
    on_device.step_on_device(2, w_device.span(), g_device.span());
  }
  std::vector<float> back(5);
  device.copy_to_host(back.data(), w_device.data(), back.size() * sizeof(float));
  CHECK(std::memcmp(back.data(), w.data() + 2, back.size() * sizeof(float)) == 0);

  // One velocity per parameter: the host may not step the range, nor may a second device range
  // overlap it; the floats outside it still step on the host.
  std::vector<float> g(8, 1.0f);
  CHECK_THROWS_AS(on_device.step(0, std::span<float>(w).first(3), std::span(g).first(3)),
                  gradmesh::ContractError);
  CHECK_NOTHROW(on_device.step(0, std::span<float>(w).first(2), std::span(g).first(2)));
  CHECK_NOTHROW(on_device.step(7, std::span<float>(w).subspan(7), std::span(g).subspan(7)));
  CHECK_THROWS_AS(on_device.keep_on_device(device, 6, 2), gradmesh::ContractError);
  CHECK_THROWS_AS(on_device.step_on_device(3, w_device.span().first(4), g_device.span().first(4)),
                  gradmesh::ContractError);
  CHECK_THROWS_AS(on_device.step_on_device(2, w_device.span().first(4), g_device.span().first(4)),
                  gradmesh::ContractError);
}

TEST_CASE(
    "Optimizer: a checkpoint restores the velocity, device ranges included, and the steps "
    "after it are bitwise those of the uninterrupted optimizer") {
  const SgdOptions o{0.1f, 0.9f, 1e-3f};
  testing::EmulatedDevice device;
  Optimizer original(o, 6);
  original.keep_on_device(device, 3, 3);
  std::vector<float> w{1, 2, 3, 4, 5, 6}, g{0.5f, -1, 2, 0.25f, -0.5f, 1};
  Buffer<float> w_device = device.allocate<float>(3), g_device = device.allocate<float>(3);
  device.copy_to_device(w_device.data(), w.data() + 3, 3 * sizeof(float));
  device.copy_to_device(g_device.data(), g.data() + 3, 3 * sizeof(float));
  const auto step = [&](Optimizer& opt, std::vector<float>& weights, Buffer<float>& wd) {
    opt.step(0, std::span<float>(weights).first(3), std::span<const float>(g).first(3));
    opt.step_on_device(3, wd.span(), g_device.span());
  };
  step(original, w, w_device);
  step(original, w, w_device);

  gradmesh::engine::StateWriter out;
  original.save_state(out);
  Optimizer resumed(o, 6);
  resumed.keep_on_device(device, 3, 3);
  gradmesh::engine::StateReader in(out.bytes(), "test");
  resumed.load_state(in);
  in.expect_end();
  std::vector<float> w2 = w;
  Buffer<float> w2_device = device.allocate<float>(3);
  device.copy(w2_device.data(), w_device.data(), 3 * sizeof(float));
  step(original, w, w_device);
  step(resumed, w2, w2_device);
  CHECK(std::memcmp(w.data(), w2.data(), 3 * sizeof(float)) == 0);
  std::vector<float> a(3), b(3);
  device.copy_to_host(a.data(), w_device.data(), 3 * sizeof(float));
  device.copy_to_host(b.data(), w2_device.data(), 3 * sizeof(float));
  CHECK(std::memcmp(a.data(), b.data(), 3 * sizeof(float)) == 0);

  Optimizer smaller(o, 5);
  gradmesh::engine::StateReader again(out.bytes(), "ckpt, section 'optimizer'");
  CHECK_THROWS_WITH(smaller.load_state(again),
                    Catch::Contains("section 'optimizer'") && Catch::Contains("holds 6 floats"));
}

TEST_CASE("Optimizer: exempt ranges step without weight decay, the rest with it") {
  // Floats 0..9, [2, 5) and [7, 8) exempt (a layer's bias, batch normalization's gamma and beta).
  const SgdOptions o{0.1f, 0.9f, 0.05f};
  Optimizer optimizer(o, 10);
  optimizer.exempt_from_weight_decay({{2, 3}, {7, 1}});
  std::vector<std::tuple<std::size_t, std::size_t, float>> segments;
  optimizer.for_each_decay_segment(
      1, 8, [&](std::size_t b, std::size_t e, float decay) { segments.emplace_back(b, e, decay); });
  CHECK(segments == std::vector<std::tuple<std::size_t, std::size_t, float>>{
                        {0, 1, 0.05f}, {1, 4, 0.0f}, {4, 6, 0.05f}, {6, 7, 0.0f}, {7, 8, 0.05f}});
  // step and step_sum over [1, 9) equal Sgd with the decay per float: without it on the exempt.
  std::vector<float> w(8), g(8), g2(8), scratch(8);
  for (std::size_t i = 0; i < 8; ++i) {
    w[i] = 0.5f + 0.25f * static_cast<float>(i);
    g[i] = 0.1f * static_cast<float>(i) - 0.3f;
    g2[i] = 0.2f - 0.05f * static_cast<float>(i);
  }
  std::vector<float> w_sum = w;
  const Sgd decayed(o), undecayed({0.1f, 0.9f, 0.0f});
  std::vector<float> w_ref = w, v_ref(8, 0.0f), w_sum_ref = w, v_sum_ref(8, 0.0f);
  const std::span<const float> both[2] = {g, g2};
  Optimizer summing(o, 10);
  summing.exempt_from_weight_decay({{2, 3}, {7, 1}});
  for (int step = 0; step < 3; ++step) {
    optimizer.step(1, w, g);
    summing.step_sum(1, w_sum, both, 0.5f, scratch);
    for (std::size_t i = 0; i < 8; ++i) {
      const std::size_t at = 1 + i;
      const bool exempt = (at >= 2 && at < 5) || at == 7;
      const Sgd& sgd = exempt ? undecayed : decayed;
      sgd.step(std::span(w_ref).subspan(i, 1), std::span<const float>(g).subspan(i, 1),
               std::span(v_ref).subspan(i, 1));
      const std::span<const float> one[2] = {std::span<const float>(g).subspan(i, 1),
                                             std::span<const float>(g2).subspan(i, 1)};
      float sum_scratch = 0;
      sgd.step_sum(std::span(w_sum_ref).subspan(i, 1), one, 0.5f,
                   std::span(v_sum_ref).subspan(i, 1), std::span(&sum_scratch, 1));
    }
  }
  CHECK(w == w_ref);
  CHECK(w_sum == w_sum_ref);
  // Nothing exempt: one segment with the decay. Bad ranges are refused.
  Optimizer plain(o, 4);
  int calls = 0;
  plain.for_each_decay_segment(0, 4, [&](std::size_t b, std::size_t e, float decay) {
    ++calls;
    CHECK((b == 0 && e == 4 && decay == 0.05f));
  });
  CHECK(calls == 1);
  CHECK_THROWS_AS(plain.exempt_from_weight_decay({{2, 1}, {1, 1}}), gradmesh::ContractError);
  CHECK_THROWS_AS(plain.exempt_from_weight_decay({{3, 2}}), gradmesh::ContractError);
}
