#include "sync/compress/builtin_compressors.h"

#include "sync/compress/half/half_compressor.h"
#include "sync/compress/identity/identity_compressor.h"
#include "sync/compress/int8/int8_compressor.h"
#include "sync/compress/qsgd/qsgd_compressor.h"
#include "sync/compress/randomk/randomk_compressor.h"
#include "sync/compress/sign/sign_compressor.h"
#include "sync/compress/topk/topk_compressor.h"

namespace gradmesh::sync::compress {

std::vector<CompressorEntry> builtin_compressors() {
  return {identity_compressor(), fp16_compressor(),    bf16_compressor(), int8_compressor(),
          topk_compressor(),     randomk_compressor(), sign_compressor(), qsgd_compressor()};
}

}  // namespace gradmesh::sync::compress
