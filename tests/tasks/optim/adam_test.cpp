// Tests for tasks/optim/adam.h and Adam in the node's Optimizer (issue 29 item 3): the update
// against the papers' formulas in double, the first step's sign descent, AdamW's decoupled decay,
// the Optimizer's moments by offset, step_sum, the device path, exempt ranges and checkpoints.

#include "tasks/optim/adam.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "tasks/optim/optimizer.h"
#include "tests/tasks/emulated_device.h"

using namespace gradmesh::tasks;

namespace {

/// Kingma and Ba, Alg. 1 (with L2 in the gradient), or Loshchilov and Hutter, Alg. 2, in double.
void adam_double(std::vector<double>& w, const std::vector<double>& g, std::vector<double>& m,
                 std::vector<double>& v, int t, double lr, double wd, const AdamOptions& o) {
  for (std::size_t i = 0; i < w.size(); ++i) {
    double gi = g[i];
    if (o.decoupled) {
      w[i] -= lr * wd * w[i];
    } else {
      gi += wd * w[i];
    }
    m[i] = o.beta1 * m[i] + (1 - o.beta1) * gi;
    v[i] = o.beta2 * v[i] + (1 - o.beta2) * gi * gi;
    const double m_hat = m[i] / (1 - std::pow(double{o.beta1}, t));
    const double v_hat = v[i] / (1 - std::pow(double{o.beta2}, t));
    w[i] -= lr * m_hat / (std::sqrt(v_hat) + o.eps);
  }
}

}  // namespace

TEST_CASE("Adam and AdamW follow the papers' updates over several steps", "[tasks][optim]") {
  for (const bool decoupled : {false, true}) {
    INFO((decoupled ? "AdamW" : "Adam"));
    const AdamOptions o{0.9f, 0.999f, 1e-8f, decoupled};
    std::vector<float> w{0.5f, -1.0f, 2.0f, 0.0f}, m(4, 0.0f), v(4, 0.0f);
    std::vector<double> wd_(w.begin(), w.end()), md(4, 0.0), vd(4, 0.0);
    for (int t = 1; t <= 5; ++t) {
      const std::vector<float> g{0.1f * static_cast<float>(t), -0.3f, 0.02f, 1.5f};
      const std::vector<double> gd(g.begin(), g.end());
      adam_update(w.data(), g.data(), m.data(), v.data(), 4, o,
                  adam_step_scalars(o, static_cast<std::uint64_t>(t), 0.01f, 0.1f));
      adam_double(wd_, gd, md, vd, t, 0.01, 0.1, o);
    }
    for (std::size_t i = 0; i < 4; ++i) CHECK(w[i] == Approx(wd_[i]).epsilon(1e-5));
  }
  // The first step is lr sign(g) (m_hat = g, v_hat = g^2), whatever the gradient's size.
  const AdamOptions o;
  std::vector<float> w{1.0f, 1.0f}, m(2, 0.0f), v(2, 0.0f);
  const std::vector<float> g{1e-3f, -50.0f};
  adam_update(w.data(), g.data(), m.data(), v.data(), 2, o, adam_step_scalars(o, 1, 0.1f, 0.0f));
  CHECK(w[0] == Approx(0.9).epsilon(1e-5));
  CHECK(w[1] == Approx(1.1).epsilon(1e-5));
}

TEST_CASE("The Optimizer's Adam steps by offset, sums, exempts and checkpoints its moments",
          "[tasks][optim]") {
  const SgdOptions sgd{0.01f, 0.9f, 0.05f};
  const AdamOptions adam{0.9f, 0.999f, 1e-8f, true};
  Optimizer optimizer(sgd, 8, adam);
  REQUIRE(optimizer.adam());
  std::vector<float> w{1, 2, 3, 4}, g{0.5f, -1, 2, 0.25f}, g2{0.1f, 0.2f, -0.3f, 0.4f};
  std::vector<float> w_ref = w, m_ref(4, 0.0f), v_ref(4, 0.0f);
  for (std::uint64_t t = 1; t <= 3; ++t) {
    optimizer.set_step(t);
    optimizer.step(4, w, g);
    adam_update(w_ref.data(), g.data(), m_ref.data(), v_ref.data(), 4, adam,
                adam_step_scalars(adam, t, 0.01f, 0.05f));
  }
  CHECK(w == w_ref);
  CHECK(std::vector<float>(optimizer.velocity().begin() + 4, optimizer.velocity().end()) == m_ref);
  CHECK(optimizer.velocity()[0] == 0.0f);

  // step_sum: the mean of the gradients in the given order, then the step.
  Optimizer summing(sgd, 4, adam);
  std::vector<float> ws{1, 2, 3, 4}, scratch(4), ws_ref = ws, m2(4, 0.0f), v2(4, 0.0f);
  const std::span<const float> both[2] = {g, g2};
  summing.step_sum(0, ws, both, 0.5f, scratch);
  std::vector<float> mean(4);
  for (std::size_t i = 0; i < 4; ++i) mean[i] = (g[i] + g2[i]) * 0.5f;
  adam_update(ws_ref.data(), mean.data(), m2.data(), v2.data(), 4, adam,
              adam_step_scalars(adam, 1, 0.01f, 0.05f));
  CHECK(ws == ws_ref);

  // Exempt floats [1, 3): no decay there.
  Optimizer exempting(sgd, 4, adam);
  exempting.exempt_from_weight_decay({{1, 2}});
  std::vector<float> we{1, 2, 3, 4}, we_ref = we, m3(4, 0.0f), v3(4, 0.0f);
  exempting.step(0, we, g);
  adam_update(we_ref.data(), g.data(), m3.data(), v3.data(), 1, adam,
              adam_step_scalars(adam, 1, 0.01f, 0.05f));
  adam_update(we_ref.data() + 1, g.data() + 1, m3.data() + 1, v3.data() + 1, 2, adam,
              adam_step_scalars(adam, 1, 0.01f, 0.0f));
  adam_update(we_ref.data() + 3, g.data() + 3, m3.data() + 3, v3.data() + 3, 1, adam,
              adam_step_scalars(adam, 1, 0.01f, 0.05f));
  CHECK(we == we_ref);

  // Checkpoint: both moments; the restored optimizer's next step is the same bits.
  gradmesh::engine::StateWriter out;
  optimizer.save_state(out);
  Optimizer restored(sgd, 8, adam);
  gradmesh::engine::StateReader in(out.bytes(), "adam");
  restored.load_state(in);
  in.expect_end();
  std::vector<float> a = w, b = w;
  optimizer.set_step(4);
  restored.set_step(4);
  optimizer.step(4, a, g2);
  restored.step(4, b, g2);
  CHECK(a == b);

  CHECK_THROWS_AS(Optimizer(sgd, 4, AdamOptions{1.0f, 0.999f, 1e-8f, false}),
                  gradmesh::ConfigError);
  CHECK_THROWS_WITH(Optimizer(sgd, 4, AdamOptions{0.9f, 0.999f, 0.0f, false}),
                    Catch::Contains("optimizer.eps"));
}

TEST_CASE("Adam on a device range equals the host step, moments checkpointed through it",
          "[tasks][optim]") {
  testing::EmulatedDevice device;
  const SgdOptions sgd{0.01f, 0.9f, 0.01f};
  const AdamOptions adam;
  Optimizer on_device(sgd, 4, adam), on_host(sgd, 4, adam);
  on_device.keep_on_device(device, 0, 4);
  std::vector<float> w{1, 2, 3, 4}, g{0.5f, -1, 2, 0.25f}, w_host = w;
  auto dw = device.allocate<float>(4), dg = device.allocate<float>(4);
  device.copy_to_device(dw.data(), w.data(), 16);
  device.copy_to_device(dg.data(), g.data(), 16);
  for (std::uint64_t t = 1; t <= 3; ++t) {
    on_device.set_step(t);
    on_host.set_step(t);
    on_device.step_on_device(0, dw.span(), dg.span());
    on_host.step(0, w_host, g);
  }
  device.copy_to_host(w.data(), dw.data(), 16);
  CHECK(w == w_host);
  gradmesh::engine::StateWriter a, b;
  on_device.save_state(a);
  on_host.save_state(b);
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.bytes().data(), b.bytes().data(), a.size()) == 0);
}
