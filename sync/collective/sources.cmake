# Collectives over the transport on any buffer (barrier, all-gather, ring all-reduce) and the one
# completion/error latch: used by the probe, the resume agreement, Ako's final average, allreduce.
target_sources(gradmesh_sync PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/all_gather.cpp
  ${CMAKE_CURRENT_LIST_DIR}/latch.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ring_allreduce.cpp)
