# Start-up measurements common to every strategy: the link probe (alpha, B), profile exchange and
# barriers, on lane "probe".
target_sources(gradmesh_sync PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/link_probe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/link_probe_bulk.cpp
  ${CMAKE_CURRENT_LIST_DIR}/node_profile.cpp)
