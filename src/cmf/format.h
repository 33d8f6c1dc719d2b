// CMF v2 envelope, feature bits and the binary tensor directory (spec §1, §3; FORMAT-NOTES §1.2–1.6).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "quant/dtype.h"

namespace cortiq::cmf {

inline constexpr std::array<uint8_t, 4> kMagic = {0x43, 0x4D, 0x46, 0x01};  // "CMF\x01"
inline constexpr uint32_t kVersion = 2;
inline constexpr uint64_t kEnvelopeSize = 128;
inline constexpr uint64_t kDataAlign = 4096;       ///< data_off alignment (bytes)
inline constexpr uint64_t kTensorAlign = 64;       ///< minimum payload alignment inside the blob
inline constexpr uint64_t kBigTensorAlign = 4096;  ///< alignment of payloads >= kBigTensorBytes
inline constexpr uint64_t kBigTensorBytes = 16384;
inline constexpr uint64_t kDirRecordSize = 56;
inline constexpr unsigned kMaxDims = 6;

/// required_features bits (spec §1.1, FORMAT-NOTES §1.3).
namespace feature {
inline constexpr uint32_t kTensorDir = 1u << 0;
inline constexpr uint32_t kBinaryMasks = 1u << 1;
inline constexpr uint32_t kQuant2F = 1u << 2;
inline constexpr uint32_t kDeltaMasks = 1u << 3;  ///< reserved, rejected
inline constexpr uint32_t kHotPacks = 1u << 4;    ///< reserved, rejected
inline constexpr uint32_t kLoopMasks = 1u << 5;
inline constexpr uint32_t kSkillFile = 1u << 6;
/// The bits this reader supports; any other bit → UnsupportedFeature.
inline constexpr uint32_t kSupported = kTensorDir | kBinaryMasks | kQuant2F | kLoopMasks | kSkillFile;
}  // namespace feature

/// A section of the file: absolute offset and length in bytes; (0, 0) = absent.
struct Section {
  uint64_t off = 0, len = 0;
  bool present() const noexcept { return len > 0; }
  uint64_t end() const noexcept { return off + len; }
  bool operator==(const Section&) const = default;
};

/// The 128-byte envelope at offset 0 (FORMAT-NOTES §1.2).
struct Envelope {
  std::array<uint8_t, 4> magic = kMagic;
  uint32_t version = kVersion;
  uint32_t flags = 0;
  uint32_t features = 0;
  Section header, dir, data, masks, vocab, index;
  uint64_t header_hash = 0;  ///< 0x70: hash64(header JSON bytes); 0 = absent
  uint64_t dir_hash = 0;     ///< 0x78: hash64(directory bytes); 0 = absent

  /// Decodes 128 bytes (no validation).
  static Envelope decode(std::span<const uint8_t, kEnvelopeSize> bytes) noexcept;
  /// Encodes to 128 little-endian bytes.
  std::array<uint8_t, kEnvelopeSize> encode() const noexcept;
};

/// One directory record, decoded (spec §3, FORMAT-NOTES §1.6).
struct DirRecord {
  std::string name;
  quant::DType dtype = quant::DType::F32;
  std::vector<uint64_t> shape;  ///< row-major, outer → inner, at most 6 dims
  uint64_t off = 0;             ///< relative to data_off, multiple of 64
  uint64_t nbytes = 0;          ///< exact payload length
  uint64_t hash = 0;            ///< hash64(payload)
};

/// Encodes a directory: [count u64][pool_off u64 = 16 + 56·count][records][name pool].
/// Throws Error(InvalidArgument) for a name longer than 65535 bytes or a dim that is 0 or > u32.
std::vector<uint8_t> encode_directory(std::span<const DirRecord> records);

/// Decodes and validates a directory section (FORMAT-NOTES §1.4 step 4): ≥ 16 bytes,
/// 16 + count·56 ≤ len, records_end ≤ pool_off ≤ len, ndim ≤ 6, no dimension 0, name inside the pool and
/// valid UTF-8, dtype id known (else Error(Parse) "unknown dtype <id>"). `file_off` (absolute offset of the
/// section) is only used in messages. Throws Error(Parse|Bounds).
std::vector<DirRecord> decode_directory(std::span<const uint8_t> dir, uint64_t file_off);

/// Rounds v up to a multiple of a (a power of two). Caller guarantees no overflow.
constexpr uint64_t align_up(uint64_t v, uint64_t a) noexcept {
  return (v + a - 1) & ~(a - 1);
}

}  // namespace cortiq::cmf
