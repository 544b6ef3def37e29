#include "topo/scheme_model.h"

#include "topo/planner.h"

namespace gradmesh::topo {

SchemeModel ps_scheme_model() {
  SchemeModel m;
  m.id = kPsScheme;
  m.cost = [](const SchemeCostInput& in, const LayerProfile& layer) {
    return ps_cost(in.cluster, layer.parameters, in.kv_chunk_floats);
  };
  m.lanes = {{std::string(kLaneKvPush), 0.5}, {std::string(kLaneKvBroadcast), 0.5}};
  m.chunked = true;
  m.traffic = Traffic::kAllToAll;
  return m;
}

SchemeModel sfb_scheme_model() {
  SchemeModel m;
  m.id = kSfbScheme;
  m.fits = [](const LayerProfile& layer) { return layer.sufficient_factors; };
  m.cost = [](const SchemeCostInput& in, const LayerProfile& layer) {
    return sfb_cost(in.cluster, in.batch, layer.rows, layer.cols);
  };
  m.lanes = {{std::string(kLaneSfBroadcast), 1.0}};
  m.skips_parameter_gradients = true;
  m.traffic = Traffic::kAllToAll;
  return m;
}

SchemeModel allreduce_scheme_model() {
  SchemeModel m;
  m.id = kAllReduceScheme;
  m.cost = [](const SchemeCostInput& in, const LayerProfile& layer) {
    return allreduce_cost(in.cluster, layer.parameters);
  };
  m.lanes = {{std::string(kLaneAllReduce), 1.0}};
  m.bucketed = true;
  return m;
}

}  // namespace gradmesh::topo
