# Resuming from checkpoints: the start-up agreement on the iteration, on lane "resume".
target_sources(gradmesh_sync PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/resume_agreement.cpp)
