# Strategy `allreduce`: ring all-reduce on merged buckets (MG-WFBP).
target_sources(gradmesh_sync PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/allreduce_scheme.cpp)
