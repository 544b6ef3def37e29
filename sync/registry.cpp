// The strategy registry (STYLE.md practice 2): each strategy's name, the lanes it sends on, its
// factory and traits; and the per-layer schemes (sync/scheme.h): each one's planner model, lanes
// and factory. Adding a strategy or a scheme touches this file and its own folder, nothing else
// shared.

#include <algorithm>
#include <deque>
#include <functional>
#include <iterator>
#include <mutex>

#include "engine/error.h"
#include "sync/ako/ako_stage.h"
#include "sync/ako/messages.h"
#include "sync/ako/options.h"
#include "sync/ako/partition_count.h"
#include "sync/allreduce/allreduce_scheme.h"
#include "sync/allreduce/messages.h"
#include "sync/compress/options.h"
#include "sync/compress/powersgd/powersgd_model.h"
#include "sync/compress/powersgd/powersgd_scheme.h"
#include "sync/compress/sparse_model.h"
#include "sync/compress/sparse_scheme.h"
#include "sync/lane_router.h"
#include "sync/local/local_stage.h"
#include "sync/local/messages.h"
#include "sync/local/options.h"
#include "sync/plan_stage.h"
#include "sync/poseidon/messages.h"
#include "sync/poseidon/options.h"
#include "sync/poseidon/sfb_scheme.h"
#include "sync/probe/messages.h"
#include "sync/ps/messages.h"
#include "sync/ps/options.h"
#include "sync/ps/ps_scheme.h"
#include "sync/resume/resume_agreement.h"
#include "sync/scheme.h"
#include "sync/sync_stage.h"

namespace gradmesh::sync {

namespace {

using Factory = std::function<std::unique_ptr<SyncStage>(SyncContext)>;
/// A strategy's own check of its options before any connection (StartFacts); may be empty.
using Check = std::function<void(const SyncOptions&, const StartFacts&)>;

/// Lanes every job has, whatever its strategy (the start-up link probe, the resume agreement):
/// listed first, so the probe's id is 0 whatever strategies the registry holds.
constexpr std::string_view kCommonLanes[] = {probe::kLane, kResumeLane};

/// What a job of several nodes plans with when its strategy trains one (strategy_for_nodes).
constexpr std::string_view kDefaultStrategy = "ps";

struct Entry {
  std::string name;
  std::vector<std::string_view> lanes;  // the transport lanes it sends on
  Factory make;                         // empty: documented but not built yet
  StrategyTraits traits;
  Check check;
  OptionTable options;  // its own [sync.<name>] table (name "": none)
  // Whether its options make it go on without a failed peer by itself (traits.live_membership
  // aside); empty: never.
  std::function<bool(const OptionValues&)> live_with;
};

/// The plan's buckets as (first, last) layer ranges (its one bucketed scheme's).
std::vector<std::pair<std::size_t, std::size_t>> plan_buckets(const topo::Plan& plan) {
  std::vector<std::pair<std::size_t, std::size_t>> buckets;
  for (const topo::Bucket& g : plan.buckets) buckets.emplace_back(g.first, g.last);
  return buckets;
}

/// All-reduce and SFB in the segment format of each compressor that has one and stands in for
/// them (issue 28: fp16, bf16; issue 56: any registered compressor with a segment format).
std::vector<SchemeEntry> segment_schemes() {
  std::vector<SchemeEntry> entries;
  for (const std::string& method : methods_for(topo::kAllReduceScheme)) {
    const compress::CompressorEntry* compressor = compress::find_compressor(method);
    if (compressor == nullptr || compressor->segment == nullptr) continue;
    const collective::SegmentCodec* segment = compressor->segment;
    entries.push_back({allreduce_segment_scheme_model(method),
                       {allreduce::kHalfLane},
                       [segment](const SyncContext& ctx, LaneRouter& router, const topo::Plan& plan,
                                 const std::vector<std::size_t>&) -> std::unique_ptr<Scheme> {
                         return std::make_unique<AllReduceScheme>(ctx, router, plan_buckets(plan),
                                                                  segment);
                       },
                       {}});
  }
  for (const std::string& method : methods_for(topo::kSfbScheme)) {
    const collective::SegmentCodec* segment = compress::compressor_entry(method).segment;
    entries.push_back(
        {sfb_segment_scheme_model(method),
         {sfb::kHalfLane},
         [segment](const SyncContext& ctx, LaneRouter& router, const topo::Plan&,
                   const std::vector<std::size_t>& layers) -> std::unique_ptr<Scheme> {
           return std::make_unique<SfbScheme>(ctx, router, layers, segment);
         },
         {}});
  }
  return entries;
}

/// Compressed PS (issue 28: the methods standing in for PS, fp16, bf16, int8).
std::vector<SchemeEntry> coded_ps_schemes() {
  std::vector<SchemeEntry> entries;
  for (const std::string& method : methods_for(topo::kPsScheme)) {
    entries.push_back({ps_coded_scheme_model(method),
                       {ps::kCodedPushLane, ps::kCodedBroadcastLane},
                       [method](const SyncContext& ctx, LaneRouter& router, const topo::Plan& plan,
                                const std::vector<std::size_t>& layers) -> std::unique_ptr<Scheme> {
                         const auto start = static_cast<std::uint64_t>(
                             compression_options(ctx.options.values).start_iteration);
                         return std::make_unique<PsScheme>(ctx, router, layers,
                                                           plan.kv_chunk_floats, method, start);
                       },
                       {}});
  }
  return entries;
}

/// The compressors exchanged per layer with error feedback (issue 28: topk, randomk; issue 56:
/// sign, qsgd), one scheme each, id and lane the compressor's name. The model registered prices
/// the default ratio and bits; the plan's input carries the job's (add_compressed_schemes).
std::vector<SchemeEntry> sparse_schemes() {
  std::vector<SchemeEntry> entries;
  for (const std::string& method : gathered_methods()) {
    const compress::CompressorEntry& compressor = compress::compressor_entry(method);
    entries.push_back({sparse_scheme_model(method, compressor_params(CompressionOptions{}, 0, 0)),
                       {gathered_lane(compressor)},
                       [method](const SyncContext& ctx, LaneRouter& router, const topo::Plan&,
                                const std::vector<std::size_t>& layers) -> std::unique_ptr<Scheme> {
                         return std::make_unique<SparseScheme>(
                             ctx, router, layers, method, compression_options(ctx.options.values));
                       },
                       {}});
  }
  return entries;
}

/// `lanes` and then the lanes of the per-layer compressed schemes (gathered_methods).
std::vector<std::string_view> with_gathered_lanes(std::vector<std::string_view> lanes) {
  for (const std::string& method : gathered_methods()) {
    lanes.push_back(gathered_lane(compress::compressor_entry(method)));
  }
  return lanes;
}

// The per-layer schemes PlanStage executes: the planner's model, the stages, the factory.
const std::vector<SchemeEntry>& builtin_schemes() {
  static const std::vector<SchemeEntry> entries = [] {
    std::vector<SchemeEntry> all = {
        {topo::ps_scheme_model(),
         {ps::kPushLane, ps::kBroadcastLane},
         [](const SyncContext& ctx, LaneRouter& router, const topo::Plan& plan,
            const std::vector<std::size_t>& layers) -> std::unique_ptr<Scheme> {
           return std::make_unique<PsScheme>(ctx, router, layers, plan.kv_chunk_floats);
         },
         ps_option_table()},
        {topo::sfb_scheme_model(),
         {sfb::kLane},
         [](const SyncContext& ctx, LaneRouter& router, const topo::Plan&,
            const std::vector<std::size_t>& layers) -> std::unique_ptr<Scheme> {
           return std::make_unique<SfbScheme>(ctx, router, layers);
         },
         {}},
        {topo::allreduce_scheme_model(),
         {allreduce::kLane},
         [](const SyncContext& ctx, LaneRouter& router, const topo::Plan& plan,
            const std::vector<std::size_t>&) -> std::unique_ptr<Scheme> {
           return std::make_unique<AllReduceScheme>(ctx, router, plan_buckets(plan));
         },
         {}},
        {powersgd_scheme_model(static_cast<std::size_t>(CompressionOptions{}.rank)),
         {kPowerSgdLane},
         [](const SyncContext& ctx, LaneRouter& router, const topo::Plan&,
            const std::vector<std::size_t>& layers) -> std::unique_ptr<Scheme> {
           return std::make_unique<PowerSgdScheme>(ctx, router, layers,
                                                   compression_options(ctx.options.values));
         },
         compression_option_table()},
    };
    for (SchemeEntry& e : segment_schemes()) all.push_back(std::move(e));
    for (SchemeEntry& e : sparse_schemes()) all.push_back(std::move(e));
    for (SchemeEntry& e : coded_ps_schemes()) all.push_back(std::move(e));
    return all;
  }();
  return entries;
}

// The planned strategies: a plan stage over their schemes (ids, in the planner's tie order),
// and the compressed schemes sync.compression allows among them (add_compressed_schemes).
Factory planned(std::string_view name, std::vector<std::string> schemes,
                std::function<void(const SyncOptions&, topo::PlannerInput&)> adjust = {}) {
  return [name, schemes, adjust = std::move(adjust)](SyncContext c) {
    return make_plan_stage(std::move(c), name, schemes,
                           [adjust](const SyncOptions& o, topo::PlannerInput& input) {
                             if (adjust) adjust(o, input);
                             add_compressed_schemes(compression_options(o.values), input);
                           });
  };
}

const std::vector<Entry>& registry() {
  const std::string ps_id(topo::kPsScheme), sfb_id(topo::kSfbScheme), ar_id(topo::kAllReduceScheme);
  // Traits: {bsp, live_membership, max_nodes, schemes (ids, in the planner's tie order),
  // compresses_buffers, predicts_iteration, any_optimizer, rolls_back, resplit_by_replica}; then
  // the strategy's own check of its options before any connection, and its own option table.
  static const std::vector<Entry> entries = {
      {"none",
       {},
       // one node: the planner makes every layer local
       planned("none", {}),
       {false, false, 1, {}},
       {},
       {}},
      {"ps",
       {ps::kPushLane, ps::kBroadcastLane, ps::kCodedPushLane, ps::kCodedBroadcastLane},
       planned("ps", {ps_id}),
       {true, false, 0, {ps_id}, false, true, true, true},
       {},
       {}},
      {"poseidon",
       {ps::kPushLane, ps::kBroadcastLane, ps::kCodedPushLane, ps::kCodedBroadcastLane, sfb::kLane,
        sfb::kHalfLane},
       planned("poseidon", {ps_id, sfb_id},
               [](const SyncOptions& o, topo::PlannerInput& input) {
                 apply_poseidon_options(poseidon_options(o.values), input);
               }),
       {true, false, 0, {ps_id, sfb_id}, false, true, true, true},
       {},
       poseidon_option_table()},
      {"ako",
       {ako::kPartitionLane, ako::kControlLane, ako::kFullRoundLane, ako::kAverageLane},
       [](SyncContext c) -> std::unique_ptr<SyncStage> {
         return std::make_unique<AkoStage>(std::move(c));
       },
       {false, true, 0, {}, false, false, false},
       [](const SyncOptions& o, const StartFacts& facts) {
         // eq. 3's automatic p needs B: a rejoining node takes p from its donor, a probe measures
         // it; without either it must be configured (throws naming the keys).
         const AkoOptions ako = ako_options(o);
         if (facts.nodes > 1 && !facts.rejoin && !ako.partitions && !facts.probe)
           (void)ako::eq3_bandwidth(ako, o.planner.bandwidth);
       },
       ako_option_table()},
      {"allreduce",
       with_gathered_lanes({allreduce::kLane, allreduce::kHalfLane, kPowerSgdLane}),
       planned("allreduce", {ar_id}),
       {true, false, 0, {ar_id}, false, true, true, true},
       {},
       {}},
      {"local",
       {local::kLane},
       [](SyncContext c) -> std::unique_ptr<SyncStage> {
         return std::make_unique<LocalStage>(std::move(c));
       },
       // Replicas differ within a round: not BSP, but a failed peer is survived by a rollback
       // and a re-split gives each node a replica of its own (issue 57). The outer exchange
       // takes any registered compressor (sync/local/outer_exchange.h).
       {false, false, 0, {}, true, true, true, true, true},
       {},
       local_option_table(),
       // Quorum rounds drop a failed peer other than rank 0 (sync/local/quorum_rounds.h).
       [](const OptionValues& values) { return local_options(values).quorum.has_value(); }},
      {"auto",
       with_gathered_lanes({ps::kPushLane, ps::kBroadcastLane, sfb::kLane, sfb::kHalfLane,
                            allreduce::kLane, allreduce::kHalfLane, kPowerSgdLane,
                            ps::kCodedPushLane, ps::kCodedBroadcastLane}),
       planned("auto", {ps_id, ar_id, sfb_id}),
       {true, false, 0, {ps_id, ar_id, sfb_id}, false, true, true, true},
       {},
       {}},
  };
  return entries;
}

std::string known_names() {
  std::string out;
  for (const Entry& e : registry()) {
    if (!out.empty()) out += ", ";
    out += e.name;
  }
  return out;
}

}  // namespace

const std::vector<std::string>& lane_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out(std::begin(kCommonLanes), std::end(kCommonLanes));
    for (const Entry& e : registry()) {
      for (const std::string_view lane : e.lanes) {
        if (std::find(out.begin(), out.end(), lane) == out.end()) out.emplace_back(lane);
      }
    }
    return out;
  }();
  return names;
}

std::vector<std::string> strategy_names() {
  std::vector<std::string> names;
  for (const Entry& e : registry()) names.push_back(e.name);
  return names;
}

std::uint64_t SyncStage::join() {
  throw ConfigError("sync.strategy = \"" + std::string(name()) +
                    "\" cannot take a restarted node back from a live peer's state (ako can; a "
                    "BSP job with checkpoint.dir takes it back at a checkpoint boundary through "
                    "app::run_with_recovery: README \"When a peer fails\")");
}

namespace {

const Entry& known(std::string_view name) {
  for (const Entry& e : registry()) {
    if (e.name == name) return e;
  }
  throw ConfigError("sync.strategy = \"" + std::string(name) + "\": expected one of " +
                    known_names());
}

const Entry& entry(std::string_view name, std::size_t nodes) {
  const Entry& e = known(name);
  if (!e.make) {
    throw ConfigError(
        "sync.strategy = \"" + std::string(name) +
        "\": this strategy is not implemented yet in this build; available: " + known_names());
  }
  const std::size_t max_nodes = e.traits.max_nodes;
  if (max_nodes != 0 && nodes > max_nodes) {
    throw ConfigError("sync.strategy = \"" + std::string(name) + "\" trains " +
                      (max_nodes == 1 ? std::string("a single node")
                                      : "at most " + std::to_string(max_nodes) + " nodes") +
                      ", but the peer list has " + std::to_string(nodes) + " nodes: use " +
                      std::string(kDefaultStrategy) + " (or run one node)");
  }
  return e;
}

}  // namespace

const StrategyTraits& strategy_traits(std::string_view name) { return known(name).traits; }

bool goes_on_without_failed_peers(std::string_view name, const OptionValues& values) {
  const Entry& e = known(name);
  return e.traits.live_membership || (e.live_with && e.live_with(values));
}

std::string strategies_with(bool StrategyTraits::*trait) {
  std::string out;
  for (const Entry& e : registry()) {
    if (!(e.traits.*trait)) continue;
    if (!out.empty()) out += ", ";
    out += e.name;
  }
  return out;
}

std::string strategy_for_nodes(std::string_view name, std::size_t nodes) {
  const std::size_t max_nodes = strategy_traits(name).max_nodes;
  return max_nodes != 0 && nodes > max_nodes ? std::string(kDefaultStrategy) : std::string(name);
}

namespace {

/// A compression method stands in for one scheme (compression_base): a strategy that does not
/// plan it refuses the method, naming the strategies that can use it; one that compresses its own
/// buffers (StrategyTraits::compresses_buffers) takes any registered compressor.
void check_compression(std::string_view name, const StrategyTraits& traits, const SyncOptions& o) {
  const CompressionOptions compression = compression_options(o.values);
  const auto fits = [&](const StrategyTraits& strategy) {
    return compression_fits(compression.method, strategy.schemes) ||
           (strategy.compresses_buffers &&
            compress::find_compressor(compression.method) != nullptr);
  };
  if (fits(traits)) return;
  std::string can;
  for (const Entry& e : registry()) {
    if (!fits(e.traits)) continue;
    can += (can.empty() ? "" : ", ") + e.name;
  }
  std::string bases;
  const std::vector<std::string_view> all = compression_bases(compression.method);
  for (std::size_t i = 0; i < all.size(); ++i) {
    bases += (i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + std::string(all[i]);
  }
  throw ConfigError("sync.compression.method = \"" + compression.method +
                    "\" compresses the traffic of the " + bases + " scheme: sync.strategy = \"" +
                    std::string(name) + "\" plans no layer on it; it runs under " + can);
}

}  // namespace

void check_strategy(std::string_view name, const StartFacts& facts, const SyncOptions& options) {
  const Entry& e = entry(name, facts.nodes);
  check_compression(name, e.traits, options);
  if (e.check) e.check(options, facts);
}

std::unique_ptr<SyncStage> make_sync_stage(std::string_view name, SyncContext context) {
  const std::size_t nodes = context.nodes;
  return entry(name, nodes).make(std::move(context));
}

namespace {

std::mutex& added_schemes_mutex() {
  static std::mutex mutex;
  return mutex;
}

/// Schemes added by register_scheme() (a deque: references stay valid as it grows).
std::deque<SchemeEntry>& added_schemes() {
  static std::deque<SchemeEntry> entries;
  return entries;
}

const SchemeEntry* find_scheme(std::string_view id) {  // under added_schemes_mutex()
  for (const SchemeEntry& e : builtin_schemes()) {
    if (e.model.id == id) return &e;
  }
  for (const SchemeEntry& e : added_schemes()) {
    if (e.model.id == id) return &e;
  }
  return nullptr;
}

}  // namespace

const SchemeEntry& scheme_entry(std::string_view id) {
  const std::lock_guard lock(added_schemes_mutex());
  if (const SchemeEntry* e = find_scheme(id)) return *e;
  std::string known;
  for (const SchemeEntry& e : builtin_schemes()) known += (known.empty() ? "" : ", ") + e.model.id;
  for (const SchemeEntry& e : added_schemes()) known += ", " + e.model.id;
  throw ContractError("no per-layer scheme '" + std::string(id) + "' (known: " + known + ")");
}

std::vector<topo::SchemeModel> scheme_models(const std::vector<std::string>& ids) {
  std::vector<topo::SchemeModel> models;
  for (const std::string& id : ids) models.push_back(scheme_entry(id).model);
  return models;
}

namespace {

/// Option tables by name (a deque: keys stay where they are as it grows), filled from the
/// built-in strategies and schemes at first use, then from register_scheme() (under
/// added_schemes_mutex()).
std::deque<OptionTable>& tables() {
  static std::deque<OptionTable> out = [] {
    std::deque<OptionTable> t;
    auto add = [&t](const OptionTable& table) {
      if (table.name.empty()) return;
      GRADMESH_CHECK(std::none_of(t.begin(), t.end(),
                                  [&](const OptionTable& o) { return o.name == table.name; }),
                     "option table sync." + table.name + " declared twice");
      t.push_back(table);
    };
    for (const Entry& e : registry()) add(e.options);
    for (const SchemeEntry& e : builtin_schemes()) add(e.options);
    return t;
  }();
  return out;
}

}  // namespace

void register_scheme(SchemeEntry entry) {
  const std::string& id = entry.model.id;
  GRADMESH_CHECK(!id.empty() && id != topo::kLocalScheme,
                 "register_scheme: id '" + id + "' (not empty, not 'local')");
  GRADMESH_CHECK(static_cast<bool>(entry.model.cost) && static_cast<bool>(entry.make),
                 "register_scheme: scheme '" + id + "' without a cost function or factory");
  for (const std::string_view lane : entry.lanes) (void)lane_id(lane);  // declared lanes
  const std::lock_guard lock(added_schemes_mutex());
  GRADMESH_CHECK(find_scheme(id) == nullptr, "register_scheme: scheme '" + id + "' exists");
  if (!entry.options.name.empty()) {
    GRADMESH_CHECK(std::none_of(tables().begin(), tables().end(),
                                [&](const OptionTable& t) { return t.name == entry.options.name; }),
                   "register_scheme: option table sync." + entry.options.name + " exists");
    tables().push_back(entry.options);
  }
  added_schemes().push_back(std::move(entry));
}

std::vector<OptionTable> option_tables() {
  const std::lock_guard lock(added_schemes_mutex());
  return {tables().begin(), tables().end()};
}

std::size_t option_table_count() {
  const std::lock_guard lock(added_schemes_mutex());
  return tables().size();
}

const OptionKey* find_option_key(std::string_view key) {
  const std::size_t dot = key.find('.');
  if (dot == std::string_view::npos) return nullptr;
  const std::lock_guard lock(added_schemes_mutex());
  for (const OptionTable& table : tables()) {
    if (table.name != key.substr(0, dot)) continue;
    for (const OptionKey& k : table.keys) {
      if (k.name == key.substr(dot + 1)) return &k;
    }
  }
  return nullptr;
}

}  // namespace gradmesh::sync
