target_sources(gradmesh_sync PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/options.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sfb_scheme.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sf_rebuild.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sfb_layer.cpp)
