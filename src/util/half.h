// IEEE binary16 and bfloat16 conversions (FORMAT-NOTES §1.1, decision 12).
//
// f32 -> f16 is round-to-nearest-even everywhere, including the subnormal range; overflow gives
// ±Inf; NaN keeps its sign and becomes a quiet NaN (0x7E00). f16 -> f32 is exact (subnormal m is
// m·2^-24). bf16 -> f32 places the 16 bits in the high half of an f32; f32 -> bf16 is RNE.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace cortiq {

/// Exact f16 bits -> f32 (subnormals, ±Inf, NaN preserved).
inline float f16_to_f32(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: man * 2^-24, exact in f32
      float v = static_cast<float>(man) * 0x1p-24f;
      bits = std::bit_cast<uint32_t>(v) | sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  return std::bit_cast<float>(bits);
}

/// f32 -> f16 bits, IEEE round-to-nearest-even (normal and subnormal results).
inline uint16_t f32_to_f16(float f) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) {  // Inf or NaN
    return ax == 0x7F800000u ? static_cast<uint16_t>(sign | 0x7C00u) : static_cast<uint16_t>(sign | 0x7E00u);
  }
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520 -> Inf
  if (ax < 0x38800000u) {  // below the smallest normal f16 (2^-14): subnormal or zero
    // value = ax as float; subnormal f16 unit is 2^-24. Round |f| * 2^24 to an integer, RNE.
    const float a = std::bit_cast<float>(ax);
    const float scaled = a * 0x1p24f;  // exact (power-of-two scaling, no overflow)
    // RNE to integer of a value < 1024: use the 2^23 trick.
    const float r = (scaled + 0x1p23f) - 0x1p23f;
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(r));
  }
  // normal: rebias exponent, round mantissa 23 -> 10 bits RNE
  uint32_t m = ax + 0xC8000000u;  // exponent -112 (127-15) << 23
  const uint32_t round_bit = 0x1000u, sticky = 0x0FFFu;
  const uint32_t lsb = (m >> 13) & 1u;
  if ((m & round_bit) && ((m & sticky) || lsb)) m += 0x2000u;
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(m >> 13));
}

/// Round an f32 through f16 and back (RNE).
inline float round_f16(float f) noexcept {
  return f16_to_f32(f32_to_f16(f));
}

/// bf16 bits -> f32 (exact).
inline float bf16_to_f32(uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

/// f32 -> bf16 bits, round-to-nearest-even; NaN stays a quiet NaN with its sign.
inline uint16_t f32_to_bf16(float f) noexcept {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

/// Little-endian loads/stores from unaligned bytes (all CMF integers are LE; x86/ARM LE hosts).
template <typename T>
inline T load_le(const void* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
inline void store_le(void* p, T v) noexcept {
  std::memcpy(p, &v, sizeof(T));
}

}  // namespace cortiq
