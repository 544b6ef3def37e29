# Strategy local: local SGD with an outer optimizer (DiLoCo; issue 57).
target_sources(gradmesh_sync PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/local_checkpoint.cpp
  ${CMAKE_CURRENT_LIST_DIR}/local_stage.cpp
  ${CMAKE_CURRENT_LIST_DIR}/options.cpp
  ${CMAKE_CURRENT_LIST_DIR}/outer_exchange.cpp
  ${CMAKE_CURRENT_LIST_DIR}/outer_optimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quorum_rounds.cpp
  ${CMAKE_CURRENT_LIST_DIR}/schedule.cpp)
