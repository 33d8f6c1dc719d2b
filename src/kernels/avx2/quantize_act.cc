// The int8 activation quantizer of the AVX2 tier: x per 32-column block (q8_0-like d = absmax/127)
// in each family's layout (Fam), with the lane scales and biases the tiles expect.
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/avx2/matvec_internal.h"

namespace cortiq::kernels::avx2_detail {

namespace {

/// Block b of x (32 columns, times col when col != nullptr; zero past cols) into v[0..3].
CQ_AVX2 inline void load_block32(const float* x, const float* col, uint64_t cols, uint64_t b,
                                 __m256 (&v)[4]) {
  const uint64_t c0 = 32 * b, m = std::min<uint64_t>(32, cols - c0);
  if (m == 32) {
    for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_ps(x + c0 + 8 * j);
    if (col)
      for (int j = 0; j < 4; ++j) v[j] = _mm256_mul_ps(v[j], _mm256_loadu_ps(col + c0 + 8 * j));
  } else {
    alignas(32) float tmp[32] = {};
    for (uint64_t j = 0; j < m; ++j) tmp[j] = col ? x[c0 + j] * col[c0 + j] : x[c0 + j];
    for (int j = 0; j < 4; ++j) v[j] = _mm256_load_ps(tmp + 8 * j);
  }
}

/// Fam::Q8 activation of x[cols] (times col[c] when col != nullptr): xq in natural order (zero
/// padding in the ragged last block); chunk k (blocks 8k … 8k + 7, fewer in the last chunk) has 8
/// lane scales at d + 8k. Lane j of a chunk of nb blocks quantizes its 4·nb columns {32b + 4j + i}
/// as one block: d_j = absmax_j/127, q = rne(x·(127/absmax_j)); a lane holding a NaN/±Inf gets
/// d_j = NaN and q = 0.
CQ_AVX2 void quantize_act_q8(const float* x, const float* col, uint64_t cols, int8_t* xq, float* d) {
  const uint64_t nb = (cols + 31) / 32;
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)), zero = _mm256_setzero_ps();
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (uint64_t b0 = 0, k = 0; b0 < nb; b0 += kQ8Chunk, ++k) {
    const uint64_t b1 = std::min(b0 + kQ8Chunk, nb);
    // mx: elementwise absmax over the chunk; nf: NaN where a NaN/±Inf occurred (v·0 is NaN exactly then)
    __m256 mx[4] = {zero, zero, zero, zero}, nf[4] = {zero, zero, zero, zero};
    for (uint64_t b = b0; b < b1; ++b) {
      __m256 v[4];
      load_block32(x, col, cols, b, v);
      for (int j = 0; j < 4; ++j) {
        mx[j] = _mm256_max_ps(mx[j], _mm256_and_ps(v[j], absmask));
        nf[j] = _mm256_add_ps(nf[j], _mm256_mul_ps(v[j], zero));
      }
    }
    alignas(32) float m32[32], id[8];
    uint32_t bad = 0;  // bit e: element e of the 32 saw a non-finite value
    for (int j = 0; j < 4; ++j) {
      _mm256_store_ps(m32 + 8 * j, mx[j]);
      bad |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(nf[j], nf[j], _CMP_UNORD_Q))) << (8 * j);
    }
    for (int l = 0; l < 8; ++l) {
      const float amax =
          std::max(std::max(m32[4 * l], m32[4 * l + 1]), std::max(m32[4 * l + 2], m32[4 * l + 3]));
      const bool finite = ((bad >> (4 * l)) & 0xF) == 0;
      d[8 * k + l] = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
      id[l] = finite && amax > 0.0f ? 127.0f / amax : 0.0f;
    }
    // register j holds elements 8j … 8j + 7: lanes 2j (first 4) and 2j + 1
    __m256 idv[4];
    for (int j = 0; j < 4; ++j)
      idv[j] = _mm256_permutevar8x32_ps(
          _mm256_load_ps(id),
          _mm256_setr_epi32(2 * j, 2 * j, 2 * j, 2 * j, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1));
    for (uint64_t b = b0; b < b1; ++b) {
      __m256 v[4];
      load_block32(x, col, cols, b, v);
      __m256i q[4];
      for (int j = 0; j < 4; ++j) q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], idv[j]));
      const __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq + 32 * b),
                          _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), order));
    }
  }
}

/// Block b of x (times col[c] when col != nullptr) quantized: d = absmax/127, q = rne(x·(127/absmax))
/// (cvtps_epi32 in the default rounding mode) in natural order, zero for the padding of a ragged last
/// block. A block with a non-finite value gets q = 0 and d = NaN (the output is NaN).
CQ_AVX2 inline __m256i quantize_block32(const float* x, const float* col, uint64_t cols, uint64_t b,
                                        float& d) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256 v[4];
  load_block32(x, col, cols, b, v);
  const __m256 mx = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], absmask), _mm256_and_ps(v[1], absmask)),
                                  _mm256_max_ps(_mm256_and_ps(v[2], absmask), _mm256_and_ps(v[3], absmask)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float amax = _mm_cvtss_f32(h);
  // Σ v·0 is NaN exactly when some v is NaN or ±Inf.
  __m256 probe = _mm256_setzero_ps();
  for (int j = 0; j < 4; ++j) probe = _mm256_add_ps(probe, _mm256_mul_ps(v[j], _mm256_setzero_ps()));
  const bool finite = _mm256_movemask_ps(_mm256_cmp_ps(probe, probe, _CMP_UNORD_Q)) == 0;
  const float id = finite && amax > 0.0f ? 127.0f / amax : 0.0f;
  d = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
  const __m256 idv = _mm256_set1_ps(id);
  __m256i q[4];
  for (int j = 0; j < 4; ++j) q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], idv));
  const __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
  // packs interleave the 128-bit lanes; the dword permutation restores the natural order
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), order);
}

/// Per int32 lane l: Σ of the 4 int8 at bytes 4l … 4l + 3 of v (what maddubs + madd fold into lane l).
CQ_AVX2 inline __m256i lane_sums(__m256i v) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), v), _mm256_set1_epi16(1));
}

/// Fam::Q2 activation of x[cols] (cols % 32 == 0): superblock s (blocks 4s … 4s + 3, zero past the
/// last block) at xq + 128s in 4 planes (Fam::Q2), lane scales d + 8s (lane l: d_(4s + l/2)/2) and
/// lane biases bias + 8s (−3·Σ of the q folded into lane l over the 4 planes).
CQ_AVX2 void quantize_act_q2(const float* x, uint64_t cols, int8_t* xq, float* d, int32_t* bias) {
  const uint64_t nb = cols / 32, ns = (nb + 3) / 4;
  // within each 128-bit lane: bytes 4k + j → 4j + k (dword j = field j of 4 weight bytes), then the
  // dwords (0, 4, 1, 5, …) so qword j = plane j's 8 bytes (k = 0 … 7)
  const __m256i tr = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5,
                                      9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (uint64_t s = 0; s < ns; ++s) {
    alignas(32) int8_t planes[128] = {};
    alignas(32) float ds[8] = {};
    for (uint64_t g = 0; g < 4 && 4 * s + g < nb; ++g) {
      float db;
      const __m256i p8 = quantize_block32(x, nullptr, cols, 4 * s + g, db);
      alignas(32) int8_t t[32];
      _mm256_store_si256(reinterpret_cast<__m256i*>(t),
                         _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(p8, tr), order));
      for (int j = 0; j < 4; ++j) std::memcpy(planes + 32 * j + 8 * g, t + 8 * j, 8);
      ds[2 * g] = ds[2 * g + 1] = db * 0.5f;
    }
    __m256i sum = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j)
      sum = _mm256_add_epi32(sum,
                             lane_sums(_mm256_load_si256(reinterpret_cast<const __m256i*>(planes + 32 * j))));
    std::memcpy(xq + 128 * s, planes, 128);
    std::memcpy(d + 8 * s, ds, sizeof ds);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bias + 8 * s),
                        _mm256_mullo_epi32(sum, _mm256_set1_epi32(-3)));
  }
}

}  // namespace

/// Quantizes x[cols] (times col[c] when col != nullptr) per 32-column block (quantize_block32) into
/// the family layout: NIB and Q1 one scale per block at d + b and 8 lane biases per block at bias + 8b
/// (NIB: −8·Σq; Q1: −Σq); Q8 and Q2 have their own layouts (quantize_act_q8, quantize_act_q2).
CQ_AVX2 void quantize_act(Fam f, const float* x, const float* col, uint64_t cols, int8_t* xq, float* d,
                          int32_t* bias) {
  if (f == Fam::Q8) return quantize_act_q8(x, col, cols, xq, d);
  if (f == Fam::Q2) return quantize_act_q2(x, cols, xq, d, bias);
  const uint64_t nb = (cols + 31) / 32;
  const __m256i evod = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8,
                                        10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (uint64_t b = 0; b < nb; ++b) {
    __m256i p8 = quantize_block32(x, col, cols, b, d[b]);
    __m256i lb;
    if (f == Fam::NIB) {
      // [evens | odds]: evens/odds within each 128-bit lane, then the middle qwords swapped
      p8 = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(p8, evod), 0xD8);
      lb = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(lane_sums(p8), 3));
    } else {  // Q1
      lb = _mm256_sub_epi32(_mm256_setzero_si256(), lane_sums(p8));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bias + 8 * b), lb);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq + 32 * b), p8);
  }
}

}  // namespace cortiq::kernels::avx2_detail

#endif  // x86
