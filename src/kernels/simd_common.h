// Pieces shared by the two SIMD tiers (simd_matvec.cc: AVX-512, simd_avx2.cc: AVX2) that contain no
// intrinsics: the row-block size, the weight prefetch distance, scratch growth and the exp2 table of
// the q4tp/q2tp ladders. Internal to src/kernels (not part of the kernels API).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cortiq::kernels::simd_detail {

/// Rows per parallel work unit (and per decoded block / ladder batch) of both tiers.
inline constexpr uint64_t kRowBlock = 16;

/// Bytes ahead of the current load that the weight tiles prefetch (rounded up to whole tiles of
/// rows). CMF rows are short (0.4–5 KiB): the hardware prefetchers hardly ramp up inside one row and
/// do not cross 4 KiB pages, so without this a decode matvec ran at ~50% of the streaming bandwidth
/// (measured on the Qwen2.5-0.5B-shaped q8 file: tg 27 → 34 tok/s); 2048–4096 measured best, 8192
/// worse.
inline constexpr uint64_t kPrefetchBytes = 4096;

/// Distance (bytes) from a tile of R consecutive rows of `row_bytes` each to the rows it
/// prefetches: whole R-row tiles, ≥ kPrefetchBytes.
inline uint64_t prefetch_distance(uint64_t row_bytes, int R) {
  const uint64_t tile = std::max<uint64_t>(1, row_bytes * static_cast<uint64_t>(R));
  return std::max<uint64_t>(1, (kPrefetchBytes + tile - 1) / tile) * tile;
}

/// Grows `v` to at least n elements (never shrinks: scratch stops allocating once warm).
template <class T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

/// exp2f of every f16 bit pattern (65536 floats, 256 KiB, built once per process): the q4tp/q2tp
/// ladder bases, bit-identical to std::exp2f(f16_to_f32(h)) as quant::q4tp_ladder computes them.
const float* exp2_f16_table();

}  // namespace cortiq::kernels::simd_detail
