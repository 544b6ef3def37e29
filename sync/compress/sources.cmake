# Gradient compressors (issue 28; docs/compression.md): the codecs with error feedback that the
# compressed schemes encode each layer's gradient with.
target_sources(gradmesh_sync PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/codec.cpp)
