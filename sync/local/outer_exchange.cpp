#include "sync/local/outer_exchange.h"

#include <algorithm>
#include <utility>

#include "sync/compress/compressor.h"
#include "sync/plan_input.h"

namespace gradmesh::sync::local {

namespace {

/// The registered compressor `compression` names (none: nullptr). Throws ConfigError for a name
/// that is none: PowerSGD and other scheme methods have no outer form.
const compress::CompressorEntry* outer_compressor(const CompressionOptions& compression) {
  if (!compression.compresses()) return nullptr;
  const compress::CompressorEntry* entry = compress::find_compressor(compression.method);
  if (entry == nullptr) {
    throw ConfigError("sync.compression.method = \"" + compression.method +
                      "\" under sync.strategy = \"local\": the outer exchange compresses the "
                      "model's change as one buffer, with a registered compressor (" +
                      [] {
                        std::string names;
                        for (const std::string& name : compress::compressor_names())
                          names += (names.empty() ? "" : ", ") + name;
                        return names;
                      }() +
                      "); \"" + compression.method + "\" needs a layer's weight matrix");
  }
  return entry->traits.lossless ? nullptr : entry;
}

}  // namespace

OuterCost outer_exchange_cost(const topo::ClusterCost& cluster, std::size_t floats,
                              const CompressionOptions& compression) {
  const compress::CompressorEntry* entry = outer_compressor(compression);
  (void)topo::ring_allreduce_bytes(0, cluster.nodes);  // checks the node count
  if (cluster.nodes < 2 || floats == 0) return {};
  const double h = cluster.frame_overhead_bytes;
  const double m = static_cast<double>(floats);
  const topo::AllReduceCost ring = topo::ring_allreduce_cost(cluster.link, cluster.nodes, h);
  if (entry == nullptr) {
    return {ring.seconds(4.0 * m), topo::ring_allreduce_bytes(4.0 * m, cluster.nodes, h)};
  }
  if (entry->segment != nullptr) {
    const auto bytes = static_cast<double>(entry->segment->encoded_bytes(floats));
    return {
        ring.seconds(bytes) + m * (cluster.half_encode_seconds() + cluster.half_decode_seconds()),
        topo::ring_allreduce_bytes(bytes, cluster.nodes, h)};
  }
  const auto bytes =
      static_cast<double>(entry->encoded_bytes(floats, compressor_params(compression, 0, 0)));
  const double peers = static_cast<double>(cluster.nodes - 1);
  const double sent = peers * (bytes + h);
  const double step = m * cluster.step_seconds_per_float;
  const double codec = entry->cost.encode_steps * step +
                       static_cast<double>(cluster.nodes) * entry->cost.decode_steps * step;
  return {topo::phase_seconds(cluster.link_for(topo::Traffic::kAllToAll), peers, sent) + codec,
          sent, topo::Traffic::kAllToAll};
}

OuterCost quorum_exchange_cost(const topo::ClusterCost& cluster, std::size_t floats) {
  (void)topo::ring_allreduce_bytes(0, cluster.nodes);  // checks the node count
  if (cluster.nodes < 2 || floats == 0) return {};
  const double peers = static_cast<double>(cluster.nodes - 1);
  const double sent = peers * (4.0 * static_cast<double>(floats) + cluster.frame_overhead_bytes);
  return {2.0 * topo::phase_seconds(cluster.link_for(topo::Traffic::kStar), peers, sent), sent,
          topo::Traffic::kStar};
}

std::string outer_exchange_name(const CompressionOptions& compression) {
  const compress::CompressorEntry* entry = outer_compressor(compression);
  if (entry == nullptr) return "ring of floats";
  if (entry->segment != nullptr) return entry->name + " ring";
  return entry->name + " all-gather with error feedback";
}

OuterExchange::OuterExchange(LaneRouter& router, LaneId lane, std::uint32_t bucket,
                             std::size_t floats, const CompressionOptions& compression,
                             std::uint64_t seed, std::size_t rank, std::uint16_t gathered_kind)
    : router_(router),
      lane_(lane),
      bucket_(bucket),
      gathered_kind_(gathered_kind),
      floats_(floats) {
  GRADMESH_CHECK(gathered_kind >= kGatheredKind, "OuterExchange: a gathered kind >= 3");
  const compress::CompressorEntry* entry = outer_compressor(compression);
  if (entry == nullptr || entry->segment != nullptr) {
    ring_.emplace(router_, lane_, bucket_, floats_, 0, entry != nullptr ? entry->segment : nullptr);
    return;
  }
  codec_.emplace(entry->name, floats_, compressor_params(compression, seed, rank),
                 /*error_feedback=*/true);
  gather_ = std::make_unique<collective::AllGather>(router_, lane_, gathered_kind_,
                                                    codec_->encoded_bytes(), 2);
}

void OuterExchange::start(std::uint64_t round, std::span<float> delta) {
  if (ring_) {
    ring_->start(round, delta);
    return;
  }
  net::Payload payload = net::Payload::allocate(codec_->encoded_bytes());
  codec_->encode(delta, payload.mutable_bytes(), round);
  gather_->start(round, std::move(payload));
}

void OuterExchange::await(std::uint64_t round, engine::Completion done) {
  if (ring_) {
    ring_->await(round, std::move(done));
  } else {
    gather_->await(round, std::move(done));
  }
}

void OuterExchange::mean(std::uint64_t round, std::size_t nodes, std::span<float> out) {
  const float scale = 1.0f / static_cast<float>(nodes);
  if (ring_) {
    const std::span<const float> sum = ring_->result(round);
    for (std::size_t i = 0; i < floats_; ++i) out[i] = sum[i] * scale;
    return;
  }
  const std::vector<net::Payload> payloads = gather_->take(round);
  std::fill(out.begin(), out.end(), 0.0f);
  for (const net::Payload& p : payloads) codec_->decode_add(p.bytes(), out, round);
  for (float& v : out) v *= scale;
}

bool OuterExchange::owns(const net::Message& message) const noexcept {
  if (gather_) return message.kind == gathered_kind_;
  return message.kind < kGatheredKind && (message.key >> 32) == bucket_;
}

void OuterExchange::on_message(std::size_t from, net::Message&& message) {
  if (ring_) {
    ring_->on_message(from, std::move(message));
    return;
  }
  try {
    codec_->check(message.payload.bytes());
  } catch (const ProtocolError& e) {
    router_.reject(from, lane_, std::string("outer exchange: ") + e.what());
    // Every node waits for every encoding of a round: without this peer's the round would never
    // complete. The exchange fails naming it (the job stops, or rolls back without it).
    fail(PeerError(from, router_.address(from),
                   std::string("sent an outer encoding that fails its check (") + e.what() +
                       "): the round cannot complete without it"));
    return;
  }
  gather_->on_message(from, std::move(message));
}

void OuterExchange::fail(const PeerError& error) {
  if (ring_) {
    ring_->fail_all(std::make_exception_ptr(error));
  } else {
    gather_->fail(error);
  }
}

}  // namespace gradmesh::sync::local
