#pragma once
// The 16-bit wire of ring all-reduce segments (issue 28, fp16 on all-reduce buckets), as the
// collectives take it (collective::SegmentCodec, issue 56).

#include "sync/collective/segment_codec.h"
#include "tasks/backend.h"

namespace gradmesh::sync::compress {

/// The segment format of `format` for a ring all-reduce and SFB's factors (the fp16 and bf16
/// registry entries' CompressorEntry::segment): a process-wide object (never freed) that sends
/// each segment as its f32 power-of-two scale (half_block_scale: fp16's largest magnitude in
/// [2^14, 2^15), so nothing saturates) then its floats in 16 bits: 4 + 2 s bytes for s floats,
/// each rounded to nearest even (at most 2^-11 relative for fp16, 2^-8 for bf16). Thread-safe.
[[nodiscard]] const collective::SegmentCodec& half_segment_codec(tasks::HalfFormat format);

}  // namespace gradmesh::sync::compress
