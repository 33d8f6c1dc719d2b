// hash64: the CMF v2 non-cryptographic 64-bit hash (spec §8, FORMAT-NOTES §1.10).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace cortiq::cmf {

/// murmur3 fmix64 finalizer (wrapping u64 arithmetic).
constexpr uint64_t fmix64(uint64_t x) noexcept {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}

/// hash64 over bytes (FORMAT-NOTES §1.10): XOR of fmix64(LE word i) ^ i·0x9E3779B97F4A7C15 over the
/// 8-byte words (the tail zero-padded), then ^ len, then fmix64. hash64("") == 0.
uint64_t hash64(std::span<const uint8_t> bytes) noexcept;
inline uint64_t hash64(std::string_view s) noexcept {
  return hash64(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

/// Incremental hash64 over a stream of chunks (same result as hash64 of the concatenation).
class Hash64Stream {
 public:
  void update(std::span<const uint8_t> bytes) noexcept;
  uint64_t finish() const noexcept;

 private:
  uint64_t acc_ = 0, words_ = 0, len_ = 0;
  uint8_t pend_[8] = {};
  unsigned npend_ = 0;
};

}  // namespace cortiq::cmf
