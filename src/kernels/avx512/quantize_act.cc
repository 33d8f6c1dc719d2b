// The int8 activation of the AVX-512 tier (llama.cpp q8_0 style, per 32-column block): x quantized
// into the layout of each activation family (Fam in matvec_internal.h), with the per-lane scales and
// the integer biases that undo the weight codes' unsigned offset.
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/avx512/matvec_internal.h"

namespace cortiq::kernels::avx512_detail {

namespace {

/// One 32-column block of the int8 activation, llama.cpp q8_0 style: x[c0 .. c0+n) (times col[c]
/// when col != nullptr; n ≤ 32, missing columns are 0), q = rne(x·127/absmax) saturated to int8 in
/// q0 (elements 0–15) and q1 (16–31) as int32 lanes. Returns absmax (the block's scale is
/// absmax/127); NaN, with q = 0, when the block holds a NaN or an infinity.
CQ_AVX512 inline float quantize_block32(const float* x, const float* col, uint64_t c0, uint64_t n,
                                        __m512i& q0, __m512i& q1) {
  const __mmask16 m0 = mask16(n), m1 = n > 16 ? mask16(n - 16) : __mmask16(0);
  __m512 v0 = _mm512_maskz_loadu_ps(m0, x + c0), v1 = _mm512_maskz_loadu_ps(m1, x + c0 + 16);
  if (col) {
    v0 = _mm512_mul_ps(v0, _mm512_maskz_loadu_ps(m0, col + c0));
    v1 = _mm512_mul_ps(v1, _mm512_maskz_loadu_ps(m1, col + c0 + 16));
  }
  // v·0 is NaN exactly for a NaN or ±inf v: such a block gets absmax NaN (so d = NaN and q = 0, the
  // output NaN), since max_ps would drop a NaN and inf·(127/inf) is no code either.
  const __m512 zero = _mm512_setzero_ps();
  const bool finite = _mm512_cmp_ps_mask(_mm512_add_ps(_mm512_mul_ps(v0, zero), _mm512_mul_ps(v1, zero)),
                                         zero, _CMP_UNORD_Q) == 0;
  const float amax = finite ? _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)))
                            : std::numeric_limits<float>::quiet_NaN();
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
  q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
  return amax;
}

/// One NIBQ chunk of NS = ns superblocks at slot s0 (see quantize_act_nibq).
CQ_AVX512 void quantize_nibq_chunk(const float* x, const float* col, uint64_t s0, int ns, int8_t* xq,
                                   float* d, int32_t* bias) {
  // byte order within each 16-element half: for m, the evens then the odds of elements 8m…8m+7
  const __m256i perm = _mm256_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15,  //
                                        0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
  int8_t* cx = xq + 128 * s0;
  float* cd = d + 16 * s0;
  const int32_t* gmap = ns == 4 ? kNibqQuadGroup : kNibqPairGroup;
  float gd[16];
  for (int g = 0; g < 4 * ns; ++g) {
    __m512i q0, q1;
    const float amax = quantize_block32(x, col, 32 * (4 * s0 + static_cast<uint64_t>(g)), 32, q0, q1);
    alignas(32) uint32_t dw[8];  // dword j = 2m + h
    _mm256_store_si256(
        reinterpret_cast<__m256i*>(dw),
        _mm256_shuffle_epi8(_mm256_set_m128i(_mm512_cvtsepi32_epi8(q1), _mm512_cvtsepi32_epi8(q0)), perm));
    gd[g] = amax / 127.0f;
    for (int m = 0; m < 4; ++m)
      for (int h = 0; h < 2; ++h) {
        const int reg = ns == 4 ? 2 * m + h : 2 * (m / 2) + h;
        const int lane = ns == 4 ? 4 * (g % 4) + g / 4 : 4 * (g % 4) + 2 * (g / 4) + m % 2;
        std::memcpy(cx + 64 * reg + 4 * lane, &dw[2 * m + h], 4);
      }
  }
  for (int l = 0; l < 16; ++l) cd[l] = gd[gmap[l]];
  __m512i acc = _mm512_setzero_si512();
  for (int r = 0; r < 2 * ns; ++r)
    acc = _mm512_dpbusd_epi32(acc, _mm512_set1_epi8(1), _mm512_loadu_si512(cx + 64 * r));
  _mm512_storeu_si512(bias + 16 * s0, _mm512_mullo_epi32(acc, _mm512_set1_epi32(-8)));
}

/// Fam::NIBQ activation of x[cols] (cols % 32 == 0). A chunk of NS superblocks (NS = 4: quad,
/// 2: pair) holds 2·NS registers of 64 bytes at xq + 128·s0, 16 scales at d + 16·s0 and 16 biases
/// at bias + 16·s0. It matches the weights as nibq_step rearranges them: the chunk's NS weight
/// superblocks (4 groups × 16 bytes each, byte b of a group = elements 2b (low nibble) and 2b + 1)
/// are transposed as dwords within 128-bit lanes, so dword m (bytes 4m…4m+3, elements 8m…8m+7) of
/// chunk-local group g lands in register m of a quad at lane 4·(g mod 4) + g/4, and in register
/// m/2 of a pair at lane 4·(g mod 4) + 2·(g/4) + m mod 2. Each weight register splits into low
/// nibbles (activation register 2·reg) and high nibbles (2·reg + 1), so activation register 2·reg
/// + h, lane L holds elements 8m + h, 8m + h + 2, 8m + h + 4, 8m + h + 6 of that group.
/// d lane L is the scale of lane L's group, bias lane L is −8·Σ of lane L's activation bytes.
CQ_AVX512 void quantize_act_nibq(const float* x, const float* col, uint64_t cols, int8_t* xq, float* d,
                                 int32_t* bias) {
  const NibqSplit sp = nibq_split(cols / 32);
  for (uint64_t q = 0; q < sp.nq; ++q) quantize_nibq_chunk(x, col, 4 * q, 4, xq, d, bias);
  if (sp.np) quantize_nibq_chunk(x, col, 4 * sp.nq, 2, xq, d, bias);
  const uint64_t s1 = sp.first_nib_slot(), c1 = 128 * s1;
  if (c1 < cols)
    quantize_act(Fam::NIB, x + c1, col ? col + c1 : nullptr, cols - c1, xq + 128 * s1, d + 16 * s1,
                 bias + 16 * s1);
}

/// x[c .. c+16) (times col when col != nullptr), zero past cols.
CQ_AVX512 inline __m512 load_act16(const float* x, const float* col, uint64_t cols, uint64_t c) {
  const __mmask16 m = c < cols ? mask16(cols - c) : __mmask16(0);
  const __m512 v = _mm512_maskz_loadu_ps(m, x + c);
  return col ? _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, col + c)) : v;
}

/// Fam::Q8 activation of x[cols] (times col[c] when col != nullptr): xq in natural column order
/// (zero past cols, up to the last whole superblock); chunk k (superblocks 8k … 8k + 7, fewer in
/// the last chunk) has 16 scales at d + 16·k and 16 biases at bias + 16·k. Lane j of a chunk of ns
/// superblocks quantizes its 4·ns columns {64s + 4j + i : s in the chunk, i < 4} as one block:
/// d_j = absmax_j/127, q = rne(x·127/absmax_j) (llama.cpp's q8_0 rule over 32 columns when ns = 8);
/// bias_j = −128·Σ q over the block.
CQ_AVX512 void quantize_act_q8(const float* x, const float* col, uint64_t cols, int8_t* xq, float* d,
                               int32_t* bias) {
  const uint64_t nsb = (cols + 63) / 64;
  // lane (4-float group) j of 16 → its 4 floats in register j/4: expand[r] picks lane 4r + i/4
  const __m512i expand = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  for (uint64_t s0 = 0, k = 0; s0 < nsb; s0 += kQ8Chunk, ++k) {
    const uint64_t ns = std::min<uint64_t>(kQ8Chunk, nsb - s0);
    // mx: elementwise absmax over the chunk; nf: NaN where a NaN or ±inf occurred (v·0 is NaN
    // exactly then), which makes that lane's absmax NaN (d = NaN, q = 0; quantize_block32).
    const __m512 zero = _mm512_setzero_ps();
    __m512 mx[4], nf[4];
    for (int r = 0; r < 4; ++r) mx[r] = nf[r] = zero;
    for (uint64_t s = s0; s < s0 + ns; ++s)
      for (int r = 0; r < 4; ++r) {
        const __m512 v = load_act16(x, col, cols, 64 * s + 16 * r);
        mx[r] = _mm512_max_ps(mx[r], _mm512_abs_ps(v));
        nf[r] = _mm512_add_ps(nf[r], _mm512_mul_ps(v, zero));
      }
    alignas(64) float m64[64], id[16];
    uint64_t bad = 0;  // bit e: element e of the 64 saw a non-finite value
    for (int r = 0; r < 4; ++r) {
      _mm512_store_ps(m64 + 16 * r, mx[r]);
      bad |= uint64_t{_mm512_cmp_ps_mask(nf[r], zero, _CMP_UNORD_Q)} << (16 * r);
    }
    for (int j = 0; j < 16; ++j) {
      const float amax = (bad >> (4 * j)) & 0xF ? std::numeric_limits<float>::quiet_NaN()
                                                : std::max(std::max(m64[4 * j], m64[4 * j + 1]),
                                                           std::max(m64[4 * j + 2], m64[4 * j + 3]));
      d[16 * k + j] = amax / 127.0f;
      id[j] = amax > 0.0f ? 127.0f / amax : 0.0f;
    }
    __m512 idv[4];
    for (int r = 0; r < 4; ++r)
      idv[r] = _mm512_permutexvar_ps(_mm512_add_epi32(expand, _mm512_set1_epi32(4 * r)), _mm512_load_ps(id));
    __m512i acc = _mm512_setzero_si512();
    for (uint64_t s = s0; s < s0 + ns; ++s) {
      for (int r = 0; r < 4; ++r)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(xq + 64 * s + 16 * r),
                         _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(
                             _mm512_mul_ps(load_act16(x, col, cols, 64 * s + 16 * r), idv[r]))));
      acc = _mm512_dpbusd_epi32(acc, _mm512_set1_epi8(1), _mm512_loadu_si512(xq + 64 * s));
    }
    _mm512_storeu_si512(bias + 16 * k, _mm512_mullo_epi32(acc, _mm512_set1_epi32(-fam_k(Fam::Q8))));
  }
}

}  // namespace

/// Quantizes x[cols] (times col[c] when col != nullptr) into the family layout.
CQ_AVX512 void quantize_act(Fam f, const float* x, const float* col, uint64_t cols, int8_t* xq, float* d,
                            int32_t* bias) {
  if (f == Fam::NIBQ) return quantize_act_nibq(x, col, cols, xq, d, bias);
  if (f == Fam::Q8) return quantize_act_q8(x, col, cols, xq, d, bias);
  const QActSize sz = qact_size(f, cols);
  const uint64_t bps = fam_sb(f) / 32, lanes = 16 / bps;
  const int32_t K = fam_k(f);
  const float dmul = f == Fam::Q2 ? 0.5f : 1.0f;
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i q2a = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
  const __m512i q2b = _mm512_add_epi32(q2a, _mm512_set1_epi32(2));
  for (uint64_t s = 0; s < sz.nsb; ++s) {
    for (uint64_t j = 0; j < bps; ++j) {
      const uint64_t c0 = (s * bps + j) * 32;
      __m512i q0, q1;
      const float amax =
          quantize_block32(x, col, c0, c0 < cols ? std::min<uint64_t>(32, cols - c0) : 0, q0, q1);
      switch (f) {
        case Fam::Q8:  // not reached (quantize_act_q8)
        case Fam::Q1:
          _mm_storeu_si128(reinterpret_cast<__m128i*>(xq + c0), _mm512_cvtsepi32_epi8(q0));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(xq + c0 + 16), _mm512_cvtsepi32_epi8(q1));
          break;
        case Fam::NIB:
        case Fam::NIBV:
        case Fam::NIBQ: {  // not reached (returned above; its NIB superblocks come here as NIB)
          int8_t* base = xq + s * 128 + 16 * j;
          _mm_storeu_si128(reinterpret_cast<__m128i*>(base),
                           _mm512_cvtsepi32_epi8(_mm512_permutex2var_epi32(q0, even, q1)));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(base + 64),
                           _mm512_cvtsepi32_epi8(_mm512_permutex2var_epi32(q0, odd, q1)));
          break;
        }
        case Fam::Q2: {
          int8_t* base = xq + s * 256 + 8 * j;
          const __m128i a = _mm512_cvtsepi32_epi8(_mm512_permutex2var_epi32(q0, q2a, q1));
          const __m128i b = _mm512_cvtsepi32_epi8(_mm512_permutex2var_epi32(q0, q2b, q1));
          _mm_storel_epi64(reinterpret_cast<__m128i*>(base), a);
          _mm_storel_epi64(reinterpret_cast<__m128i*>(base + 64), _mm_unpackhi_epi64(a, a));
          _mm_storel_epi64(reinterpret_cast<__m128i*>(base + 128), b);
          _mm_storel_epi64(reinterpret_cast<__m128i*>(base + 192), _mm_unpackhi_epi64(b, b));
          break;
        }
        case Fam::Q1T: {
          alignas(16) int8_t nat[32];
          _mm_store_si128(reinterpret_cast<__m128i*>(nat), _mm512_cvtsepi32_epi8(q0));
          _mm_store_si128(reinterpret_cast<__m128i*>(nat + 16), _mm512_cvtsepi32_epi8(q1));
          int8_t* base = xq + s * 320 + 8 * j;
          for (uint32_t p = 0; p < 5; ++p)
            for (uint32_t b = 0; b < 8; ++b) base[64 * p + b] = 5 * b + p < 32 ? nat[5 * b + p] : int8_t{0};
          break;
        }
      }
      for (uint64_t l = 0; l < lanes; ++l) d[s * 16 + j * lanes + l] = (amax / 127.0f) * dmul;
    }
    // Per-lane bias −K·Σ(the q that vpdpbusd folds into that lane), so every int32 lane is exactly
    // Σ w·q over its own products (no cancellation between lanes in the f32 sum).
    __m512i acc = _mm512_setzero_si512();
    for (uint64_t k = 0; k < fam_xq_sb(f) / 64; ++k)
      acc = _mm512_dpbusd_epi32(acc, _mm512_set1_epi8(1), _mm512_loadu_si512(xq + s * fam_xq_sb(f) + 64 * k));
    _mm512_storeu_si512(bias + 16 * s, _mm512_mullo_epi32(acc, _mm512_set1_epi32(-K)));
  }
}

}  // namespace cortiq::kernels::avx512_detail

#endif  // x86
