# Gradient compression (issue 28; docs/compression.md): the codecs with error feedback, PowerSGD's
# low-rank approximation of one gradient matrix, the PowerSGD, top-k and random-k schemes the
# planner may choose per layer ([sync.compression]: options, its cost model, the scheme).
target_sources(gradmesh_sync PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/builtin_compressors.cpp
  ${CMAKE_CURRENT_LIST_DIR}/codec.cpp
  ${CMAKE_CURRENT_LIST_DIR}/codec_profile.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compression_profile.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compressor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device_codec.cpp
  ${CMAKE_CURRENT_LIST_DIR}/error_feedback.cpp
  ${CMAKE_CURRENT_LIST_DIR}/momentum_correction.cpp
  ${CMAKE_CURRENT_LIST_DIR}/options.cpp
  ${CMAKE_CURRENT_LIST_DIR}/scheme_method.cpp
  # Scheme methods (scheme_method.h), each listed in scheme_method.cpp.
  ${CMAKE_CURRENT_LIST_DIR}/powersgd/powersgd.cpp
  ${CMAKE_CURRENT_LIST_DIR}/powersgd/powersgd_method.cpp
  ${CMAKE_CURRENT_LIST_DIR}/powersgd/powersgd_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/powersgd/powersgd_profile.cpp
  ${CMAKE_CURRENT_LIST_DIR}/powersgd/powersgd_scheme.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sparse_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sparse_scheme.cpp
  # One folder a compressor (compressor.h), each added to the registry in builtin_compressors.cpp.
  ${CMAKE_CURRENT_LIST_DIR}/half/half_block.cpp
  ${CMAKE_CURRENT_LIST_DIR}/half/half_compressor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/half/half_segment_codec.cpp
  ${CMAKE_CURRENT_LIST_DIR}/identity/identity_compressor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/int8/int8_compressor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/qsgd/qsgd_compressor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/randomk/randomk_compressor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sign/sign_compressor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/topk/topk_compressor.cpp)
