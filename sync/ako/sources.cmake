# Strategy `ako`: partial gradient exchange (Ako SoCC'16).
target_sources(gradmesh_sync PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/accumulation_queue.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ako_finish.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ako_profile.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ako_receiver.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ako_rejoin.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ako_stage.cpp
  ${CMAKE_CURRENT_LIST_DIR}/final_exchange.cpp
  ${CMAKE_CURRENT_LIST_DIR}/handoff_ring.cpp
  ${CMAKE_CURRENT_LIST_DIR}/join_exchange.cpp
  ${CMAKE_CURRENT_LIST_DIR}/membership.cpp
  ${CMAKE_CURRENT_LIST_DIR}/options.cpp
  ${CMAKE_CURRENT_LIST_DIR}/partition_agreement.cpp
  ${CMAKE_CURRENT_LIST_DIR}/partition_count.cpp
  ${CMAKE_CURRENT_LIST_DIR}/payload_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/range_partition.cpp
  ${CMAKE_CURRENT_LIST_DIR}/round_receiver.cpp
  ${CMAKE_CURRENT_LIST_DIR}/round_sender.cpp
  ${CMAKE_CURRENT_LIST_DIR}/send_rate_meter.cpp
  ${CMAKE_CURRENT_LIST_DIR}/staging_delta.cpp
  ${CMAKE_CURRENT_LIST_DIR}/staleness_clocks.cpp)
