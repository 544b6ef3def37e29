#pragma once
// How a collective's segments cross the wire (issue 56, item 2: the collectives take a wire
// format object, so collective/ needs nothing of compress/; compress/ provides the formats).

#include <cstddef>
#include <span>
#include <string_view>

namespace gradmesh::sync::collective {

/// An encoding of one segment of floats for a collective that sums what it receives (a ring
/// all-reduce's reduce-scatter adds each decoded segment in fp32 and encodes the partial sum it
/// passes on; its all-gather forwards the owner's bytes unchanged). Stateless: no error feedback
/// (a collective carries nothing from one round to the next), so one object serves every bucket.
/// A collective given none sends the floats themselves (4 bytes a float, no copy).
///
/// Thread safety: every method is const and reentrant. Errors: decode and decode_add trust their
/// input's size (the collective checks encoded_bytes on arrival and rejects the message first).
class SegmentCodec {
 public:
  SegmentCodec() = default;
  SegmentCodec(const SegmentCodec&) = delete;
  SegmentCodec& operator=(const SegmentCodec&) = delete;
  virtual ~SegmentCodec() = default;
  /// The format's name in errors and plans ("fp16").
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  /// Bytes of one encoded segment of `floats` floats: exact, the same for every encoding of
  /// that many (a receiver checks it).
  [[nodiscard]] virtual std::size_t encoded_bytes(std::size_t floats) const noexcept = 0;
  /// Writes C(values) to `out` (encoded_bytes(values.size()) bytes, any alignment) and, when
  /// `decoded` is non-empty (values.size() floats), D(C(values)) there: what every receiver
  /// will decode.
  virtual void encode(std::span<const float> values, std::byte* out,
                      std::span<float> decoded) const = 0;
  /// out = D(in), out.size() floats from encoded_bytes(out.size()) bytes at `in`.
  virtual void decode(const std::byte* in, std::span<float> out) const = 0;
  /// sum += D(in), in fp32.
  virtual void decode_add(const std::byte* in, std::span<float> sum) const = 0;
};

}  // namespace gradmesh::sync::collective
