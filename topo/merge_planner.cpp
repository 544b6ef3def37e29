#include "topo/merge_planner.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>

#include "topo/input_check.h"

namespace gradmesh::topo {

namespace {

enum class Kind : unsigned char { kLocal, kAllReduce, kFixed };

Kind kind_of(const WfbpLayer& layer) {
  if (layer.allreduce_bytes > 0) return Kind::kAllReduce;
  if (layer.comm_seconds > 0 || layer.after_comm_seconds > 0) return Kind::kFixed;
  return Kind::kLocal;
}

void check_layers(double forward_seconds, std::span<const WfbpLayer> layers, AllReduceCost cost) {
  detail::require(detail::finite_non_negative(forward_seconds), "t_f (seconds)", forward_seconds,
                  "a finite number >= 0");
  detail::require(detail::finite_non_negative(cost.a), "all-reduce start-up a (seconds)", cost.a,
                  "a finite number >= 0");
  detail::require(detail::finite_non_negative(cost.b), "all-reduce b (seconds/byte)", cost.b,
                  "a finite number >= 0");
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const WfbpLayer& layer = layers[l];
    const std::string name = "layer " + std::to_string(l) + " ";
    detail::require(detail::finite_non_negative(layer.backward_seconds), name + "t_b (seconds)",
                    layer.backward_seconds, "a finite number >= 0");
    detail::require(detail::finite_non_negative(layer.allreduce_bytes), name + "all-reduce bytes",
                    layer.allreduce_bytes, "a finite number >= 0");
    detail::require(detail::finite_non_negative(layer.comm_seconds),
                    name + "communication (seconds)", layer.comm_seconds, "a finite number >= 0");
    detail::require(detail::finite_non_negative(layer.after_comm_seconds),
                    name + "work after communication (seconds)", layer.after_comm_seconds,
                    "a finite number >= 0");
    detail::require(detail::finite_non_negative(layer.transport_seconds),
                    name + "transport work (seconds)", layer.transport_seconds,
                    "a finite number >= 0");
    detail::require(layer.allreduce_bytes == 0 || layer.comm_seconds == 0,
                    name + "all-reduce bytes", layer.allreduce_bytes,
                    "0 for a layer with its own communication time (PS, SFB)");
  }
}

/// The next non-local layer below `l`, if it and `l` are all-reduce layers.
std::optional<std::size_t> merge_partner(std::span<const WfbpLayer> layers, std::size_t l) {
  if (kind_of(layers[l]) != Kind::kAllReduce) return std::nullopt;
  for (std::size_t j = l; j-- > 0;) {
    const Kind kind = kind_of(layers[j]);
    if (kind == Kind::kLocal) continue;
    if (kind == Kind::kAllReduce) return j;
    return std::nullopt;
  }
  return std::nullopt;
}

/// One communication on the link: a fixed layer's, or a bucket's (at the layer that closes it).
struct LinkJob {
  std::size_t layer = 0;  // its priority: the lowest layer first
  double ready = 0;       // when its gradient is ready, seconds
  double work = 0;        // its time alone on the link, seconds
  double after = 0;       // work on the compute released when it has ended, seconds
  std::size_t traffic_class = 0;
};

void check_sharing(std::span<const WfbpLayer> layers, const LinkSharing& sharing) {
  if (sharing.class_weights.empty()) return;
  for (std::size_t c = 0; c < sharing.class_weights.size(); ++c) {
    const double w = sharing.class_weights[c];
    detail::require(std::isfinite(w) && w > 0, "traffic class " + std::to_string(c) + " weight", w,
                    "a finite number > 0");
  }
  for (std::size_t l = 0; l < layers.size(); ++l) {
    detail::require(layers[l].traffic_class < sharing.class_weights.size(),
                    "layer " + std::to_string(l) + " traffic class", layers[l].traffic_class,
                    "< " + std::to_string(sharing.class_weights.size()) + " (the class weights)");
  }
}

/// Serves `jobs` on a link shared by class weights (a fluid: each busy class gets its weight's
/// share, all of it to its lowest ready layer) and sets `start` (first service) and `end` per job.
void share_link(const std::vector<LinkJob>& jobs, std::span<const double> weights,
                std::vector<double>& start, std::vector<double>& end) {
  constexpr double kUnset = -1;
  const std::size_t count = jobs.size();
  start.assign(count, kUnset);
  end.assign(count, kUnset);
  std::vector<double> left(count);
  for (std::size_t j = 0; j < count; ++j) left[j] = jobs[j].work;
  std::vector<std::size_t> head(weights.size());
  constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  double now = 0;
  for (std::size_t done = 0; done < count;) {
    std::fill(head.begin(), head.end(), kNone);
    double next_ready = std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < count; ++j) {
      if (end[j] != kUnset) continue;
      if (jobs[j].ready > now) {
        next_ready = std::min(next_ready, jobs[j].ready);
        continue;
      }
      std::size_t& h = head[jobs[j].traffic_class];
      if (h == kNone || jobs[j].layer < jobs[h].layer) h = j;
    }
    double busy_weight = 0;
    for (std::size_t c = 0; c < weights.size(); ++c) {
      if (head[c] != kNone) busy_weight += weights[c];
    }
    if (busy_weight == 0) {  // idle until the next gradient is ready
      now = next_ready;
      continue;
    }
    // The next event: a head's end, or a gradient ready (which may change a head).
    double step = next_ready - now;
    std::size_t first_done = kNone;
    for (std::size_t c = 0; c < weights.size(); ++c) {
      const std::size_t h = head[c];
      if (h == kNone) continue;
      if (start[h] == kUnset) start[h] = now;
      const double needs = left[h] * busy_weight / weights[c];
      if (needs <= step) {
        step = needs;
        first_done = h;
      }
    }
    const bool reaches_ready = first_done == kNone;
    for (std::size_t c = 0; c < weights.size(); ++c) {
      const std::size_t h = head[c];
      if (h == kNone) continue;
      left[h] -= step * weights[c] / busy_weight;
      // The head that set the step ends exactly; another within rounding of it ends with it.
      if (h == first_done || left[h] <= 1e-12 * std::max(1.0, jobs[h].work)) left[h] = 0;
    }
    now = reaches_ready ? next_ready : now + step;
    for (std::size_t c = 0; c < weights.size(); ++c) {
      const std::size_t h = head[c];
      if (h != kNone && left[h] == 0) {
        end[h] = now;
        ++done;
      }
    }
  }
}

/// The timeline for a merged mask (merged[l]: layer l is a merged-gradient layer), inputs checked.
WfbpTimeline timeline_of(double forward_seconds, std::span<const WfbpLayer> layers,
                         AllReduceCost cost, const std::vector<bool>& merged,
                         const LinkSharing& sharing = {}) {
  const std::size_t count = layers.size();
  WfbpTimeline t;
  t.backward_start.assign(count, 0.0);
  t.comm_start.assign(count, 0.0);
  t.comm_seconds.assign(count, 0.0);
  t.comm_end.assign(count, 0.0);
  t.iteration_seconds = forward_seconds;
  if (count == 0) return t;
  t.backward_start[count - 1] = forward_seconds;  // eq. 6
  for (std::size_t l = count - 1; l-- > 0;) {
    t.backward_start[l] = t.backward_start[l + 1] + layers[l + 1].backward_seconds;
  }
  t.iteration_seconds = t.backward_start[0] + layers[0].backward_seconds;
  // The link's communications, in backward order (first come first served: eq. 7).
  std::vector<LinkJob> jobs;
  double pending_bytes = 0;  // the open bucket's p (eq. 16)
  double pending_after = 0;  // the open bucket's work after communication
  for (std::size_t l = count; l-- > 0;) {
    const WfbpLayer& layer = layers[l];
    const double ready = t.backward_start[l] + layer.backward_seconds;
    t.comm_start[l] = l + 1 == count
                          ? ready
                          : std::max(t.comm_start[l + 1] + t.comm_seconds[l + 1], ready);  // eq. 7
    switch (kind_of(layer)) {
      case Kind::kAllReduce:
        pending_bytes += layer.allreduce_bytes;
        pending_after += layer.after_comm_seconds;
        if (!merged[l]) {
          t.comm_seconds[l] = cost.seconds(pending_bytes);  // eq. 17
          // the whole bucket's work, when the bucket has been reduced
          jobs.push_back({l, ready, t.comm_seconds[l], pending_after, layer.traffic_class});
          pending_bytes = 0;
          pending_after = 0;
        }  // else eq. 14: t_c = 0
        break;
      case Kind::kFixed:
        t.comm_seconds[l] = layer.comm_seconds;
        jobs.push_back(
            {l, ready, layer.comm_seconds, layer.after_comm_seconds, layer.traffic_class});
        break;
      case Kind::kLocal:
        break;
    }
    t.comm_end[l] = t.comm_start[l] + t.comm_seconds[l];
  }
  if (!sharing.class_weights.empty()) {
    for (std::size_t l = 0; l < count; ++l) {
      t.comm_start[l] = t.backward_start[l] + layers[l].backward_seconds;
      t.comm_end[l] = t.comm_start[l];
    }
    std::vector<double> start;
    std::vector<double> end;
    share_link(jobs, sharing.class_weights, start, end);
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      t.comm_start[jobs[j].layer] = start[j];
      t.comm_end[jobs[j].layer] = end[j];
    }
  }
  // The node's compute is free for work after communication (SFB rebuilds, optimizer steps) once
  // the backward pass and the transport's work on the layers' bytes have ended (the cores that
  // compute also copy every byte sent and received); such work then runs one piece at a time, in
  // the order the link delivered it.
  double compute_free = t.iteration_seconds;
  for (const WfbpLayer& layer : layers) compute_free += layer.transport_seconds;
  t.iteration_seconds = compute_free;
  std::stable_sort(jobs.begin(), jobs.end(), [&](const LinkJob& a, const LinkJob& b) {
    return t.comm_end[a.layer] < t.comm_end[b.layer];
  });
  for (const LinkJob& job : jobs) {
    const double comm_end = t.comm_end[job.layer];
    if (job.after > 0) compute_free = std::max(compute_free, comm_end) + job.after;
    t.iteration_seconds = std::max({t.iteration_seconds, comm_end, compute_free});
  }
  return t;
}

std::vector<bool> merged_mask(std::span<const WfbpLayer> layers,
                              std::span<const std::size_t> merged) {
  std::vector<bool> mask(layers.size(), false);
  for (std::size_t l : merged) {
    detail::require(l < layers.size(), "merged-gradient layer", l,
                    "< L = " + std::to_string(layers.size()));
    detail::require(merge_partner(layers, l).has_value(), "merged-gradient layer", l,
                    "an all-reduce layer with an all-reduce layer below it and no PS or SFB "
                    "layer between");
    mask[l] = true;
  }
  return mask;
}

}  // namespace

WfbpTimeline wfbp_timeline(double forward_seconds, std::span<const WfbpLayer> layers,
                           AllReduceCost cost, std::span<const std::size_t> merged,
                           const LinkSharing& sharing) {
  check_layers(forward_seconds, layers, cost);
  check_sharing(layers, sharing);
  return timeline_of(forward_seconds, layers, cost, merged_mask(layers, merged), sharing);
}

double wfbp_iteration_seconds(double forward_seconds, std::span<const WfbpLayer> layers,
                              AllReduceCost cost, std::span<const std::size_t> merged,
                              const LinkSharing& sharing) {
  return wfbp_timeline(forward_seconds, layers, cost, merged, sharing).iteration_seconds;
}

std::vector<std::size_t> mg_wfbp_merge_set(double forward_seconds,
                                           std::span<const WfbpLayer> layers, AllReduceCost cost) {
  check_layers(forward_seconds, layers, cost);
  std::vector<bool> mask(layers.size(), false);
  std::vector<std::size_t> merged;
  // Lines 1-11: t_c, t_b, tau_b and tau_c with no merges.
  WfbpTimeline t = timeline_of(forward_seconds, layers, cost, mask);
  // Lines 12-16: from layer L down to 2 (here L-1 down to 1).
  for (std::size_t l = layers.size(); l-- > 1;) {
    const std::optional<std::size_t> partner = merge_partner(layers, l);
    if (!partner) continue;
    // The paper's tau_b^(l-2): when the partner's backward ends.
    const double partner_ready = t.backward_start[*partner] + layers[*partner].backward_seconds;
    if (partner_ready - t.comm_start[l] < cost.a) {
      mask[l] = true;  // MERGE: t_c[l] = 0, p[l-1] += p[l], t_c[l-1] = T_ar(p[l-1])
      merged.push_back(l);
      t = timeline_of(forward_seconds, layers, cost, mask);  // CALCULATECOMMSTART
    }
  }
  return merged;
}

std::vector<std::size_t> optimal_merge_set(double forward_seconds,
                                           std::span<const WfbpLayer> layers, AllReduceCost cost) {
  check_layers(forward_seconds, layers, cost);
  const std::size_t count = layers.size();
  // Sites: the non-local layers in backward order (descending index).
  std::vector<std::size_t> sites;
  for (std::size_t l = count; l-- > 0;) {
    if (kind_of(layers[l]) != Kind::kLocal) sites.push_back(l);
  }
  if (sites.empty()) return {};
  std::vector<double> ready(count, 0.0);
  double backward_start = forward_seconds;
  for (std::size_t l = count; l-- > 0;) {
    ready[l] = backward_start + layers[l].backward_seconds;
    backward_start = ready[l];
  }
  constexpr double kNever = -std::numeric_limits<double>::infinity();
  // free_after[k]: least time the link is free once the bucket (or fixed layer) ending at site k
  // has been sent; top[k]: the first site of that bucket.
  std::vector<double> free_after(sites.size(), 0.0);
  std::vector<std::size_t> top(sites.size(), 0);
  for (std::size_t k = 0; k < sites.size(); ++k) {
    const WfbpLayer& layer = layers[sites[k]];
    if (kind_of(layer) == Kind::kFixed) {
      const double before = k == 0 ? kNever : free_after[k - 1];
      free_after[k] = std::max(before, ready[sites[k]]) + layer.comm_seconds;
      top[k] = k;
      continue;
    }
    double bytes = 0;
    double best = std::numeric_limits<double>::infinity();
    for (std::size_t i = k + 1; i-- > 0;) {
      if (kind_of(layers[sites[i]]) != Kind::kAllReduce) break;
      bytes += layers[sites[i]].allreduce_bytes;
      const double before = i == 0 ? kNever : free_after[i - 1];
      const double done = std::max(before, ready[sites[k]]) + cost.seconds(bytes);
      if (done < best) {
        best = done;
        top[k] = i;
      }
    }
    free_after[k] = best;
  }
  std::vector<std::size_t> merged;
  for (std::size_t k = sites.size(); k-- > 0;) {
    for (std::size_t i = top[k]; i < k; ++i) merged.push_back(sites[i]);
    k = top[k];
  }
  std::sort(merged.begin(), merged.end(), std::greater<>());
  return merged;
}

}  // namespace gradmesh::topo
