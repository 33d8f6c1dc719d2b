// AVX-512 / VNNI matvec and batched matmul over the CMF codecs (contracts in simd_matvec.h; payload
// layouts FORMAT-NOTES §1.8, quant/codec.h, quant/layout.h).
//
// Every function that uses AVX-512 intrinsics carries CQ_AVX512 (a `target` attribute) and is only
// reached after simd_cpu_ok() checked the CPU with __builtin_cpu_supports.
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/simd_matvec.h"

// GCC 12 reports its own _mm512_undefined_* placeholders inside the intrinsic headers as
// uninitialized (a known false positive); silence that for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/simd_avx512_rows.h"
#include "kernels/simd_common.h"
#include "kernels/simd_gemm_exact.h"
#include "kernels/weight_plan.h"
#include "quant/codec.h"
#include "quant/layout.h"
#include "util/error.h"
#include "util/half.h"

/// The q1t int8 tile also needs AVX512-VBMI (vpermi2b); reached only when simd_vbmi_ok().
#define CQ_AVX512_VBMI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma,f16c")))

namespace cortiq::kernels {

using quant::DType;

bool simd_cpu_ok() noexcept {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                         __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") &&
                         simd_detail::cpu_has_f16c();
  return ok;
}

bool simd_vbmi_ok() noexcept {
  static const bool ok = simd_cpu_ok() && __builtin_cpu_supports("avx512vbmi");
  return ok;
}

bool simd_supported(DType t) noexcept {
  if (!simd_cpu_ok()) return false;
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8Row:
    case DType::Q8_2F:
    case DType::Q4Block:
    case DType::Q4Tiled:
    case DType::Q4TP:
    case DType::Q2TP:
    case DType::Q1:
    case DType::Q1S:  // q1 kernels + the outliers in f32; needs ascending indices (else the reference)
    case DType::Q1T:  // int8 path only with VBMI (simd_vbmi_ok), else the exact path in both modes
      return true;
    case DType::VBit:  // bit-field unpacking with vpermb/vpmultishiftqb (VBMI)
    case DType::VBitRo:
      return simd_vbmi_ok();
    default:
      return false;
  }
}

namespace {

using simd_detail::exp2_f16_table;
using simd_detail::grow;
using simd_detail::kRowBlock;
using simd_detail::LdBF16;
using simd_detail::LdF16;
using simd_detail::LdF32;
using simd_detail::LineVec;

// ---------------------------------------------------------------------------------------------
// Activation quantization (int8 path)

/// Layout families of the quantized activation; each matches one weight-code arrangement so the
/// inner loop is a plain vpdpbusd over 64 bytes. `sb` columns per superblock, 16 int32/f32 lanes
/// per superblock with `16/(sb/32)` lanes per 32-block; each lane carries the integer bias −K·Σq that undoes
/// the unsigned weight offset.
enum class Fam : uint8_t {
  // natural order, 64 cols; weights s8 xor 0x80 → u8 = w + 128, K = 128. The quantization blocks
  // are lane blocks, not runs of 32 columns: superblocks are taken 8 at a time (a chunk, 512
  // columns), and lane j's block is the chunk's columns 64s + 4j … 64s + 4j + 3 — what vpdpbusd
  // sums into int32 lane j. One convert / scale / FMA per chunk (quantize_act_q8, tile_q8).
  Q8,
  Q1,    // natural order, 64 cols; u8 = 2·bit, w = 2·bit − 1, K = 1
  NIB,   // 128 cols (4 blocks): [evens of b0..b3 | odds of b0..b3]; u8 = nibble, K = 8
  NIBV,  // the NIB layout with K = 1: vbit codes, whose offset L varies per row (tile_vbit scales the bias)
  Q2,    // 256 cols (8 blocks): plane j = elements 4k+j of each block; u8 = 2·code, K = 3, d·0.5
  // 256 cols (8 q1t groups) in 5 planes of 64 bytes: plane p, bytes 8g..8g+7 = elements 5j+p
  // (j = 0..6, zero where 5j+p ≥ 32, byte 7 zero) of group g — the base-3 digit p of code byte j;
  // u8 = ternary value + 1 ∈ {0, 1, 2}, K = 1. Two lanes per group.
  Q1T,
  // q4tp and q4_block: the NIB codes, with the row's groups taken 16 (a "quad", 4 superblock
  // slots) or 8 (a "pair", 2 slots) at a time, so that each int32 lane sums one group's products
  // over several vpdpbusd and gets one convert / scale / FMA per group (nibq_step); the remaining
  // groups (fewer than 8) are NIB superblocks. See nibq_split and quantize_act_nibq for the lanes.
  NIBQ,
};

/// Columns per superblock.
constexpr uint64_t fam_sb(Fam f) {
  return f == Fam::NIB || f == Fam::NIBV || f == Fam::NIBQ ? 128 : f == Fam::Q2 || f == Fam::Q1T ? 256 : 64;
}
/// Bytes of quantized activation per superblock (the columns, plus q1t's padding).
constexpr uint64_t fam_xq_sb(Fam f) {
  return f == Fam::Q1T ? 5 * 64 : fam_sb(f);
}
constexpr int32_t fam_k(Fam f) {
  return f == Fam::Q8                                      ? 128
         : f == Fam::Q1 || f == Fam::Q1T || f == Fam::NIBV ? 1
         : f == Fam::NIB || f == Fam::NIBQ                 ? 8
                                                           : 3;
}

/// One quantized activation vector (pointers into scratch).
struct QAct {
  const int8_t* xq;
  const float* d;
  const int32_t* bias;
};

/// Sizes of one quantized activation for `cols` columns.
struct QActSize {
  uint64_t nsb, xq_bytes, lanes;
};
QActSize qact_size(Fam f, uint64_t cols) {
  const uint64_t sb = fam_sb(f), nsb = (cols + sb - 1) / sb;
  return {nsb, nsb * fam_xq_sb(f), nsb * 16};
}

/// Superblocks per Fam::Q8 chunk: 8 · 64 columns, so every lane block of a whole chunk has 32
/// columns, and a lane's int32 sum stays < 2^31 (32 · 255 · 128).
constexpr uint64_t kQ8Chunk = 8;

inline __mmask16 mask16(uint64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u);
}
inline __mmask64 mask64(uint64_t n) {
  return n >= 64 ? ~__mmask64(0) : ((__mmask64(1) << n) - 1);
}

/// NIBQ chunks of a row of gpr 32-column groups: nq quads (groups 16q…16q+15, superblock slots
/// 4q…4q+3), then np ≤ 1 pair (8 groups, 2 slots), then NIB superblocks from slot 4·nq + 2·np.
struct NibqSplit {
  uint64_t nq, np;
  uint64_t first_nib_slot() const { return 4 * nq + 2 * np; }
};
constexpr NibqSplit nibq_split(uint64_t gpr) {
  return {gpr / 16, (gpr % 16) / 8};
}

/// Lane → chunk-local group of a NIBQ quad / pair; see quantize_act_nibq.
alignas(64) constexpr int32_t kNibqQuadGroup[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
alignas(64) constexpr int32_t kNibqPairGroup[16] = {0, 0, 4, 4, 1, 1, 5, 5, 2, 2, 6, 6, 3, 3, 7, 7};

CQ_AVX512 void quantize_act(Fam f, const float* x, const float* col, uint64_t cols, int8_t* xq, float* d,
                            int32_t* bias);

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

// ---------------------------------------------------------------------------------------------
// Plan: the parsed tensor and per-call shared state

struct Plan {
  std::string_view name;  // tensor name, for error messages
  DType t = DType::F32;
  uint64_t rows = 0, cols = 0, gpr = 0;
  const uint8_t* p = nullptr;
  const uint8_t* scales = nullptr;  // q8_row/q8_2f: row scales; q4_block: scale plane
  const float* bases = nullptr;     // q4tp/q2tp: prepared ladder bases (tp_bases), or null
  const float* col = nullptr;       // q8_2f: decoded column field (caller scratch)
  quant::TpView tp;
  quant::Q1tView q1t;  // q1t: base tiles, row_ptr, overlay entries
  quant::Q1sView q1s;  // q1s: q1 base tiles at p, outlier entries (order checked by the blocks)
  // q1s entry problems the row blocks found (call scratch): bit 1 = not strictly ascending, bit 2 =
  // an index ≥ rows·cols. Checked after the parallel run (finish_q1s).
  std::atomic<int>* q1s_bad = nullptr;
  bool q1s_checked = false;  // q1s: entries checked in full (a WeightPlan's), no per-block check
  const WeightView* w = nullptr;
  const quant::VBitView* vb = nullptr;  // vbit / vbit_ro: widths, scales, row offsets (call scratch or plan)
  Fam fam = Fam::Q8;
  bool int8 = false;       // int8 path in use
  uint64_t row_bytes = 0;  // stride of one row in the main weight plane (prefetch distance unit)
};

/// Distance (bytes) from a tile of R rows to the rows it prefetches (simd_common.h).
inline uint64_t prefetch_distance(const Plan& pl, int R) {
  return simd_detail::prefetch_distance(pl.row_bytes, R);
}

inline void prefetch(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
}

// ---------------------------------------------------------------------------------------------
// vbit / vbit_ro rows: 64 codes of width b are exactly 8·b bytes of the MSB-first bit stream (rows
// start byte-aligned because in % 32 == 0). vpermb puts the b bytes of every 8 codes into one
// qword, most significant first (a big-endian b-byte number), so code p of that qword sits at bit
// b·(7 − p); vpmultishiftqb extracts it and a mask keeps b bits.

struct VbTables {
  std::array<std::array<uint8_t, 64>, 9> idx{}, ctrl{};
};
constexpr VbTables kVb = [] {
  VbTables t;
  for (uint32_t b = 3; b <= 8; ++b)
    for (uint32_t j = 0; j < 64; ++j) {
      const uint32_t q = j / 8, p = j % 8;
      t.idx[b][j] = static_cast<uint8_t>(p < b ? q * b + (b - 1 - p) : 0);
      t.ctrl[b][j] = static_cast<uint8_t>(b * (7 - p));
    }
  return t;
}();

/// Codes [64s, 64s + 64) of a vbit row of width b (u8, natural order; codes past `cols` are 0).
CQ_AVX512_VBMI inline __m512i vb_codes(const uint8_t* row, uint64_t s, uint64_t cols, uint32_t b) {
  const uint64_t n = std::min<uint64_t>(64, cols - 64 * s);  // 64 or 32 (cols % 32 == 0)
  const __m512i raw = _mm512_maskz_loadu_epi8(mask64(n * b / 8), row + 8 * b * s);
  const __m512i be = _mm512_permutexvar_epi8(_mm512_loadu_si512(kVb.idx[b].data()), raw);
  const __m512i f = _mm512_multishift_epi64_epi8(_mm512_loadu_si512(kVb.ctrl[b].data()), be);
  return _mm512_maskz_and_epi64(n == 64 ? __mmask8(0xFF) : __mmask8(0x0F), f,
                                _mm512_set1_epi8(static_cast<char>((1u << b) - 1u)));
}

/// Row r of a vbit tensor decoded to f32: (u − L)·scale with L = 2^(b−1) − 1, the same single
/// product quant::decode_rows computes.
CQ_AVX512_VBMI void decode_row_vbit(const Plan& pl, uint64_t r, float* out) {
  const uint32_t b = pl.vb->width(r);
  const __m512i L = _mm512_set1_epi32((1 << (b - 1)) - 1);
  const uint8_t* row = pl.vb->row(r);
  for (uint64_t s = 0; s * 64 < pl.cols; ++s) {
    const __m512i u = vb_codes(row, s, pl.cols, b);
    const __m128i part[4] = {_mm512_extracti32x4_epi32(u, 0), _mm512_extracti32x4_epi32(u, 1),
                             _mm512_extracti32x4_epi32(u, 2), _mm512_extracti32x4_epi32(u, 3)};
    const uint64_t nq = std::min<uint64_t>(4, (pl.cols - 64 * s) / 16);
    for (uint64_t q = 0; q < nq; ++q) {
      const __m512i c = _mm512_sub_epi32(_mm512_cvtepu8_epi32(part[q]), L);
      const __m512 sc = _mm512_set1_ps(pl.vb->scale(r, (64 * s + 16 * q) / 32));
      _mm512_storeu_ps(out + 64 * s + 16 * q, _mm512_mul_ps(_mm512_cvtepi32_ps(c), sc));
    }
  }
}

/// Per-thread state of a block of ≤ kRowBlock rows.
struct BlockState {
  /// prep_tp computes the ladders of up to kLadBlocks consecutive blocks at once (independent
  /// multiply chains, so their latency overlaps) and keeps them for the next blocks of the range.
  static constexpr uint64_t kLadBlocks = 4;
  // ladders of rows [lad_r0, lad_r0 + lad_n) of the tensor of *lad_pl: lad[r − lad_r0][rung]
  float lad[kLadBlocks * kRowBlock][32];
  const Plan* lad_pl = nullptr;  // null: no ladders kept (reset at the start of every range)
  uint64_t lad_r0 = 0, lad_n = 0;
  // q4tp/q2tp group scales of the block's rows: gsc[i·gsc_stride + g] = lad[i][code of tile g]
  // (gsc_stride = gpr rounded up to 16; the padding is zero).
  LineVec<float> gsc;
  uint64_t gsc_stride = 0;
  std::vector<uint8_t> codes;  // zero-padded copy of a code row the 16-byte reads would overrun
  /// Group scales of block-local row i (gsc_stride floats).
  float* row_scales(uint64_t i) { return gsc.data() + i * gsc_stride; }
  const float* row_scales(uint64_t i) const { return gsc.data() + i * gsc_stride; }
  LineVec<float> rowbuf;  // decoded rows (exact path)
};
BlockState& block_state() {
  thread_local BlockState s;
  return s;
}

/// Transposes the 16×16 matrix in[c] (lane i) into out[i·stride + c].
CQ_AVX512 void transpose16(const __m512* in, float* out, size_t stride) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(in[2 * i], in[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512 v = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88),
                 w = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
    const __m512 w2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
    _mm512_storeu_ps(out + j * stride, _mm512_shuffle_f32x4(v, v2, 0x88));
    _mm512_storeu_ps(out + (4 + j) * stride, _mm512_shuffle_f32x4(w, w2, 0x88));
    _mm512_storeu_ps(out + (8 + j) * stride, _mm512_shuffle_f32x4(v, v2, 0xDD));
    _mm512_storeu_ps(out + (12 + j) * stride, _mm512_shuffle_f32x4(w, w2, 0xDD));
  }
}

/// Ladders of rows [r0, r0 + m), m ≤ kLadBlocks·16, into st.lad (q4tp/q2tp), as quant::q4tp_ladder /
/// q2tp_ladder compute them: t0 = exp2f(lo), ratio = exp2f(step), t[c] = t[c−1]·ratio in f32. Each
/// block's 16 rows run in the 16 lanes of one vector (same f32 products); the kLadBlocks chains are
/// independent, so one chain's multiply latency hides the others'. Then each block is transposed.
CQ_AVX512 void prep_ladders(const Plan& pl, uint64_t r0, uint64_t m, BlockState& st) {
  static_assert(kRowBlock == 16, "one ladder lane per row");
  constexpr uint64_t NB = BlockState::kLadBlocks;
  const float* e2 = exp2_f16_table();
  const bool q2 = pl.t == DType::Q2TP;
  // row r's params are the dword at params + 4r: lo_f16 in the low half, step_f16 in the high half
  const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 cur[NB], ratio[NB], lad[NB][32];
  for (uint64_t j = 0; j < NB; ++j) {
    const __mmask16 live = mask16(m > 16 * j ? m - 16 * j : 0);
    if (pl.bases) {  // prepared (prepare_weight): two plain loads instead of two table gathers
      cur[j] = _mm512_mask_loadu_ps(one, live, pl.bases + r0 + 16 * j);
      ratio[j] = _mm512_mask_loadu_ps(one, live, pl.bases + pl.rows + r0 + 16 * j);
    } else {
      const __m512i pr = _mm512_maskz_loadu_epi32(live, pl.tp.params + 4 * (r0 + 16 * j));
      cur[j] = _mm512_mask_i32gather_ps(one, live, _mm512_and_si512(pr, lo16), e2, 4);
      ratio[j] = _mm512_mask_i32gather_ps(one, live, _mm512_srli_epi32(pr, 16), e2, 4);
    }
    if (q2) {
      lad[j][0] = _mm512_setzero_ps();
      lad[j][1] = cur[j];
    } else {
      lad[j][0] = cur[j];
    }
  }
  for (int c = q2 ? 2 : 1; c < 32; ++c)
    for (uint64_t j = 0; j < NB; ++j) {
      cur[j] = _mm512_mul_ps(cur[j], ratio[j]);
      lad[j][c] = cur[j];
    }
  for (uint64_t j = 0; j < (m + 15) / 16; ++j) {
    transpose16(lad[j], &st.lad[16 * j][0], 32);
    transpose16(lad[j] + 16, &st.lad[16 * j][16], 32);
  }
  st.lad_pl = &pl;
  st.lad_r0 = r0;
  st.lad_n = m;
}

/// Row blocks ahead whose q4tp/q2tp code rows prep_tp prefetches.
constexpr uint64_t kTpCodeAhead = 2;

/// Ladders and group scales of rows [r0, r0+n) (q4tp/q2tp): each row's tiles get their rung
/// (BlockState::row_scales). `ahead` (≥ n): rows from r0 on that the caller will also run on this
/// thread, so their ladders are computed now with this block's (prep_ladders).
CQ_AVX512 void prep_tp(const Plan& pl, uint64_t r0, uint64_t n, uint64_t ahead, BlockState& st) {
  if (st.lad_pl != &pl || r0 < st.lad_r0 || r0 + n > st.lad_r0 + st.lad_n)
    prep_ladders(pl, r0, std::min(std::max(ahead, n), BlockState::kLadBlocks * kRowBlock), st);
  const float(*lad)[32] = st.lad + (r0 - st.lad_r0);
  // Group scales, 16 tiles per step: their 80 code bits are bytes 10j..10j+9 of the code row (a
  // 16-byte read; a row whose read would pass the payload's end is copied zero-padded). Each 32-bit
  // lane k gathers the two bytes holding bits 5k..5k+4 (vpshufb on the 16 bytes broadcast to the
  // four 128-bit lanes), shifts by 5k mod 8 and keeps 5 bits: the rung index of tile 16j + k.
  const uint64_t gpr = pl.gpr, crb = pl.tp.code_row_bytes, n16 = (gpr + 15) / 16;
  st.gsc_stride = n16 * 16;
  grow(st.gsc, kRowBlock * st.gsc_stride);
  const uint8_t* end = pl.w->payload.data() + pl.w->payload.size();
  alignas(64) static constexpr std::array<uint8_t, 64> kPick = [] {
    std::array<uint8_t, 64> a{};
    for (int k = 0; k < 16; ++k) {
      const int byte = 5 * k / 8;
      a[4 * k] = static_cast<uint8_t>(byte);
      a[4 * k + 1] = static_cast<uint8_t>(byte + 1);
      a[4 * k + 2] = 0x80;  // zero
      a[4 * k + 3] = 0x80;
    }
    return a;
  }();
  const __m512i pick = _mm512_load_si512(kPick.data());
  const __m512i sh = _mm512_setr_epi32(0, 5, 2, 7, 4, 1, 6, 3, 0, 5, 2, 7, 4, 1, 6, 3);  // 5k mod 8
  const __m512i m31 = _mm512_set1_epi32(31);
  for (uint64_t i = 0; i < n; ++i) {
    const uint8_t* cr = pl.tp.row_codes(r0 + i);
    if (static_cast<uint64_t>(end - cr) < 10 * (n16 - 1) + 16) {
      grow(st.codes, crb + 16);
      std::memcpy(st.codes.data(), cr, crb);
      std::memset(st.codes.data() + crb, 0, 16);
      cr = st.codes.data();
    }
    const __m512 l0 = _mm512_loadu_ps(lad[i]), l1 = _mm512_loadu_ps(lad[i] + 16);
    float* out = st.row_scales(i);
    for (uint64_t g = 0; g < gpr; g += 16) {
      const __m512i b =
          _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(cr + 10 * (g / 16))));
      const __m512i idx = _mm512_and_si512(_mm512_srlv_epi32(_mm512_shuffle_epi8(b, pick), sh), m31);
      // tiles past gpr (the next row's codes, or the padding) get scale 0
      _mm512_storeu_ps(out + g, _mm512_maskz_permutex2var_ps(mask16(gpr - g), l0, idx, l1));
    }
  }
  // The code and parameter planes are streams of their own beside the weights: prefetch the code
  // rows of the block kTpCodeAhead blocks on and the parameters of the ladder batch after the
  // current one, so their DRAM latency does not land on this thread's next preparation.
  const uint64_t rc0 = r0 + kTpCodeAhead * kRowBlock;
  if (rc0 < pl.rows) {
    const uint8_t* c0 = pl.tp.row_codes(rc0);
    const uint64_t bytes = std::min<uint64_t>(kRowBlock, pl.rows - rc0) * crb;
    for (uint64_t off = 0; off < bytes; off += 64) prefetch(c0 + off);
    prefetch(c0 + bytes - 1);
  }
  const uint64_t rp0 = st.lad_r0 + st.lad_n;  // the next ladder batch: 4 bytes per row (each plane)
  if (r0 == st.lad_r0)
    for (uint64_t r = rp0; r < std::min(pl.rows, rp0 + BlockState::kLadBlocks * kRowBlock); r += 16) {
      if (pl.bases) {
        prefetch(pl.bases + r);
        prefetch(pl.bases + pl.rows + r);
      } else {
        prefetch(pl.tp.params + 4 * r);
      }
    }
}

// ---------------------------------------------------------------------------------------------
// Exact path: f32 dot with 4×16-lane accumulators (chunk k → accumulator k mod 4)

/// q8_row / q8_2f rows decoded in registers: ŵ_c = f32(q_c)·s (times col_c for q8_2f), the same
/// products as decode_row (and quant::decode_rows), so the exact dot is bit-identical to decoding the
/// row into a buffer first, without that second pass over it.
struct LdQ8 {
  const uint8_t* p;            ///< the row's int8 codes
  float s;                     ///< the row's f16 scale, widened
  const float* col = nullptr;  ///< q8_2f: the decoded column field; null for q8_row
  /// Prefetches the 64 columns at c of the row `dist` bytes ahead.
  void pf(uint64_t c, uint64_t dist) const { prefetch(p + c + dist); }
  CQ_AVX512 __m512 ld(uint64_t c) const {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + c));
    const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(s));
    return col ? _mm512_mul_ps(v, _mm512_loadu_ps(col + c)) : v;
  }
  CQ_AVX512 __m512 ldm(uint64_t c, __mmask16 m) const {
    const __m128i q = _mm_maskz_loadu_epi8(m, p + c);
    const __m512 v = _mm512_maskz_mul_ps(m, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(s));
    return col ? _mm512_maskz_mul_ps(m, v, _mm512_maskz_loadu_ps(m, col + c)) : v;
  }
};

/// R weight rows × T activation rows of exact dots: out[k·T + t] = Σ_c w[k](c)·x[t][c]. Per output
/// the arithmetic is fixed whatever R and T are: 16-column chunk j accumulates with FMA into
/// accumulator j mod 4 (a masked FMA for the tail chunk), then (a0+a1)+(a2+a3) and
/// _mm512_reduce_add_ps — so matvec (R = T = 1) and batched results are bit-identical.
template <int R, int T, class L>
CQ_AVX512 void dot_exact_tile(const L* w, const float* const* x, uint64_t n, float* out, uint64_t pfd = 0) {
  __m512 a[R][T][4];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t)
      for (int q = 0; q < 4; ++q) a[k][t][q] = _mm512_setzero_ps();
  uint64_t c = 0;
  for (; c + 64 <= n; c += 64) {
    if (pfd)
      for (int k = 0; k < R; ++k) w[k].pf(c, pfd);
    for (int q = 0; q < 4; ++q) {
      __m512 wv[R];
      for (int k = 0; k < R; ++k) wv[k] = w[k].ld(c + 16 * q);
      for (int t = 0; t < T; ++t) {
        const __m512 xv = _mm512_loadu_ps(x[t] + c + 16 * q);
        for (int k = 0; k < R; ++k) a[k][t][q] = _mm512_fmadd_ps(wv[k], xv, a[k][t][q]);
      }
    }
  }
  // Up to three more full chunks (indices 0, 1, 2 mod 4), then a masked tail chunk.
  for (int q = 0; q < 3; ++q)
    if (c + 16 <= n) {
      __m512 wv[R];
      for (int k = 0; k < R; ++k) wv[k] = w[k].ld(c);
      for (int t = 0; t < T; ++t) {
        const __m512 xv = _mm512_loadu_ps(x[t] + c);
        for (int k = 0; k < R; ++k) a[k][t][q] = _mm512_fmadd_ps(wv[k], xv, a[k][t][q]);
      }
      c += 16;
    }
  if (c < n) {
    const __mmask16 m = mask16(n - c);
    const int qt = static_cast<int>((c / 16) & 3);
    for (int q = 0; q < 4; ++q)
      if (q == qt) {
        __m512 wv[R];
        for (int k = 0; k < R; ++k) wv[k] = w[k].ldm(c, m);
        for (int t = 0; t < T; ++t) {
          const __m512 xv = _mm512_maskz_loadu_ps(m, x[t] + c);
          for (int k = 0; k < R; ++k) a[k][t][q] = _mm512_fmadd_ps(wv[k], xv, a[k][t][q]);
        }
      }
  }
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t)
      out[k * T + t] = _mm512_reduce_add_ps(
          _mm512_add_ps(_mm512_add_ps(a[k][t][0], a[k][t][1]), _mm512_add_ps(a[k][t][2], a[k][t][3])));
}

template <class L>
CQ_AVX512 float dot_exact(const L& w, const float* x, uint64_t n, uint64_t pfd = 0) {
  float out;
  dot_exact_tile<1, 1>(&w, &x, n, &out, pfd);
  return out;
}

/// Y[i·y_stride + j0 + k] for k < rc, i < n from rc row loaders, in R×T tiles; tails padded by
/// repeating the last row/token and dropping those outputs.
template <int R, int T, class L, class MakeL>
CQ_AVX512 void block_exact_rt(MakeL make, uint64_t rc, const float* x, uint64_t cols, size_t n, float* y,
                              size_t y_stride, uint64_t j0) {
  for (uint64_t k0 = 0; k0 < rc; k0 += R) {
    L w[R];
    for (int k = 0; k < R; ++k) w[k] = make(std::min<uint64_t>(k0 + k, rc - 1));
    const uint64_t kn = std::min<uint64_t>(R, rc - k0);
    for (size_t i0 = 0; i0 < n; i0 += T) {
      const float* xs[T];
      for (int t = 0; t < T; ++t) xs[t] = x + std::min<size_t>(i0 + t, n - 1) * cols;
      float out[R * T];
      dot_exact_tile<R, T>(w, xs, cols, out);
      const size_t tn = std::min<size_t>(T, n - i0);
      for (uint64_t k = 0; k < kn; ++k)
        for (size_t t = 0; t < tn; ++t) y[(i0 + t) * y_stride + j0 + k0 + k] = out[k * T + t];
    }
  }
}

/// 32 weights (nibbles 0..15 in 16 bytes, element 2k low / 2k+1 high) → (nib − 8)·s as f32.
CQ_AVX512 inline void dec_nib32(const uint8_t* b16, float s, float* out) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b16));
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
  const __m512i k8 = _mm512_set1_epi32(8);
  const __m512 sv = _mm512_set1_ps(s);
  const __m512i e0 = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)), k8);
  const __m512i e1 = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(lo, hi)), k8);
  _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_cvtepi32_ps(e0), sv));
  _mm512_storeu_ps(out + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(e1), sv));
}

/// Decodes row r (block-local index i for ladders) into out[cols], bit-identical to quant::decode_rows.
CQ_AVX512 void decode_row(const Plan& pl, const BlockState& st, uint64_t r, uint64_t i, float* out) {
  const uint64_t cols = pl.cols;
  switch (pl.t) {
    case DType::Q8Row:
    case DType::Q8_2F: {
      const uint8_t* q = pl.p + r * cols;
      const __m512 s = _mm512_set1_ps(f16_to_f32(load_le<uint16_t>(pl.scales + 2 * r)));
      for (uint64_t c = 0; c < cols; c += 16) {
        const __mmask16 m = mask16(cols - c);
        __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, q + c))), s);
        if (pl.t == DType::Q8_2F) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, pl.col + c));
        _mm512_mask_storeu_ps(out + c, m, v);
      }
      return;
    }
    case DType::Q4Tiled:
      for (uint64_t g = 0; g < pl.gpr; ++g) {
        const uint8_t* t = pl.p + 18 * (r * pl.gpr + g);
        dec_nib32(t + 2, f16_to_f32(load_le<uint16_t>(t)), out + 32 * g);
      }
      return;
    case DType::Q4Block:
      for (uint64_t g = 0; g < pl.gpr; ++g) {
        const uint64_t fg = r * pl.gpr + g;
        dec_nib32(pl.p + 16 * fg, f16_to_f32(load_le<uint16_t>(pl.scales + 2 * fg)), out + 32 * g);
      }
      return;
    case DType::Q4TP: {
      const uint8_t* w = pl.tp.row_weights(r);
      const float* gs = st.row_scales(i);
      for (uint64_t g = 0; g < pl.gpr; ++g) dec_nib32(w + 16 * g, gs[g], out + 32 * g);
      return;
    }
    case DType::Q2TP: {
      const uint8_t* w = pl.tp.row_weights(r);
      const float* gs = st.row_scales(i);
      const __m512i sh = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      const __m512i three = _mm512_set1_epi32(3);
      const __m512 h = _mm512_set1_ps(1.5f);
      for (uint64_t g = 0; g < pl.gpr; ++g) {
        const __m512 s = _mm512_set1_ps(gs[g]);
        for (int half = 0; half < 2; ++half) {
          const __m512i v = _mm512_set1_epi32(static_cast<int>(load_le<uint32_t>(w + 8 * g + 4 * half)));
          const __m512i c2 = _mm512_and_si512(_mm512_srlv_epi32(v, sh), three);
          _mm512_storeu_ps(out + 32 * g + 16 * half,
                           _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(c2), h), s));
        }
      }
      return;
    }
    case DType::Q1T: {
      // Base: 7 base-3 code bytes per 32-group (5 codes each, digit k of byte b = b / 3^k mod 3),
      // code 1 → +s, 2 → −s, 0 → 0; then the row's overlay entries overwrite their columns —
      // exactly the values quant::decode_rows produces.
      const __m512i one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2);
      for (uint64_t g = 0; g < pl.gpr; ++g) {
        const uint8_t* t = pl.q1t.base + (r * pl.gpr + g) * quant::kQ1tTileBytes;
        if (!quant::q1t_tile_ok(t))
          fail(ErrorKind::Parse, "tensor '{}': q1t tile (row {}, group {}) has a non-base-3 code byte",
               pl.name, r, g);
        alignas(16) uint8_t codes[40];
        for (int b = 0; b < 7; ++b) std::memcpy(codes + 5 * b, quant::kQ1tDigits[t[2 + b]].data(), 5);
        const __m512 ps = _mm512_set1_ps(f16_to_f32(load_le<uint16_t>(t))),
                     ns = _mm512_sub_ps(_mm512_setzero_ps(), ps);
        for (int h = 0; h < 2; ++h) {
          const __m512i c =
              _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(codes + 16 * h)));
          __m512 v = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(c, one), ps);
          v = _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(c, two), ns);
          _mm512_storeu_ps(out + 32 * g + 16 * h, v);
        }
      }
      quant::q1t_check_row(pl.q1t, r, pl.name);
      for (uint32_t e = pl.q1t.ptr(r); e < pl.q1t.ptr(r + 1); ++e) out[pl.q1t.col(e)] = pl.q1t.value(e);
      return;
    }
    case DType::VBit:
    case DType::VBitRo:
      decode_row_vbit(pl, r, out);
      return;
    case DType::Q1:
    case DType::Q1S:
      for (uint64_t g = 0; g < pl.gpr; ++g) {
        const uint8_t* t = pl.p + quant::kQ1TileBytes * (r * pl.gpr + g);
        const float s = f16_to_f32(load_le<uint16_t>(t));
        const uint32_t bits = load_le<uint32_t>(t + 2);
        const __m512 ps = _mm512_set1_ps(s), ns = _mm512_set1_ps(-s);
        _mm512_storeu_ps(out + 32 * g, _mm512_mask_blend_ps(static_cast<__mmask16>(bits & 0xFFFF), ns, ps));
        _mm512_storeu_ps(out + 32 * g + 16, _mm512_mask_blend_ps(static_cast<__mmask16>(bits >> 16), ns, ps));
      }
      // outliers replace the base values; an entry out of order → finish_q1s redoes the call
      if (pl.t == DType::Q1S && !pl.q1s.overwrite_run(r * pl.cols, (r + 1) * pl.cols, out))
        pl.q1s_bad->fetch_or(1, std::memory_order_relaxed);
      return;
    default:
      return;
  }
}

/// The register decoder of q8_row / q8_2f row r.
inline LdQ8 q8_loader(const Plan& pl, uint64_t r) {
  return LdQ8{pl.p + r * pl.cols, f16_to_f32(load_le<uint16_t>(pl.scales + 2 * r)),
              pl.t == DType::Q8_2F ? pl.col : nullptr};
}

/// Exact dot of row r (block-local index i) with x; `buf` holds ≥ cols floats of scratch.
CQ_AVX512 float row_exact(const Plan& pl, const BlockState& st, uint64_t r, uint64_t i, const float* x,
                          float* buf) {
  switch (pl.t) {
    case DType::F32:
      return dot_exact(LdF32{pl.p + 4 * r * pl.cols}, x, pl.cols, prefetch_distance(pl, 1));
    case DType::F16:
      return dot_exact(LdF16{pl.p + 2 * r * pl.cols}, x, pl.cols, prefetch_distance(pl, 1));
    case DType::BF16:
      return dot_exact(LdBF16{pl.p + 2 * r * pl.cols}, x, pl.cols, prefetch_distance(pl, 1));
    case DType::Q8Row:
    case DType::Q8_2F:
      return dot_exact(q8_loader(pl, r), x, pl.cols, prefetch_distance(pl, 1));
    default:
      decode_row(pl, st, r, i, buf);
      return dot_exact(LdF32{reinterpret_cast<const uint8_t*>(buf)}, x, pl.cols);
  }
}

// ---------------------------------------------------------------------------------------------
// int8 path: vpdpbusd over 64-byte superblocks

// ---------------------------------------------------------------------------------------------
// Driver

/// Caller-thread scratch: q8_2f column field and quantized activations.
struct CallScratch {
  std::atomic<int> q1s_bad{0};  // Plan::q1s_bad
  quant::VBitView vb;           // vbit / vbit_ro view (row offsets reused between calls)
  LineVec<float> col;
  LineVec<int8_t> xq;
  LineVec<float> d;
  LineVec<int32_t> bias;
};
/// Most weights one matmul_multi_simd call takes (each needs its own call scratch).
constexpr size_t kMaxMulti = 4;

/// Caller-thread scratch of one product; `slot` < kMaxMulti separates the products of one
/// matmul_multi_simd call.
CallScratch& call_scratch(size_t slot = 0) {
  thread_local std::array<CallScratch, kMaxMulti> s;
  return s[slot];
}

/// out[i] = f16 → f32 of n little-endian halves at p (exact conversion, as f16_to_f32).
CQ_AVX512 void f16_row_to_f32(const uint8_t* p, uint64_t n, float* out) {
  for (uint64_t c = 0; c < n; c += 16) {
    const __mmask16 m = mask16(n - c);
    _mm512_mask_storeu_ps(out + c, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * c)));
  }
}

/// Parses and validates the tensor; returns false when the shape is one the SIMD kernels do not
/// cover (flat-group codecs with cols % 32 != 0), in which case the caller uses the reference.
/// A prepared view (WeightView::plan, weight_plan.h) takes the parsed pieces from its plan instead:
/// no validation or parsing per call, the same Plan and so the same results.
bool make_plan(const WeightView& w, bool exact, Plan& pl, size_t slot = 0) {
  if (!simd_supported(w.dtype))
    fail(ErrorKind::Unsupported, "tensor '{}': dtype {} has no SIMD kernel", w.name,
         quant::dtype_name(w.dtype));
  const WeightPlan* wp = plan_of(w);
  // q1t: O(1) here; each row's overlay is checked when the row is decoded (decode_row), so a call
  // costs O(rows read), not O(rows + overlay) of the tensor. q1s: the row blocks check the entries
  // (check_q1s_slice; one pass over the outliers per call, which also tells whether they are
  // ascending), a plan's were checked when it was made. vbit: vbit_view_into below is the full check.
  if (!wp && w.dtype != DType::Q1S && w.dtype != DType::VBit && w.dtype != DType::VBitRo)
    quant::validate_payload(w.dtype, w.shape, w.payload, w.name, /*check_rows=*/false);
  pl.name = w.name;
  pl.w = &w;
  pl.t = w.dtype;
  pl.rows = w.rows();
  pl.cols = w.cols();
  pl.p = w.payload.data();
  pl.gpr = pl.cols / 32;
  const uint64_t n = pl.rows * pl.cols;
  switch (pl.t) {
    case DType::Q8Row:
    case DType::Q8_2F:
      pl.scales = pl.p + n;
      pl.fam = Fam::Q8;
      break;
    case DType::Q4Block:
      pl.scales = pl.p + 16 * ((n + 31) / 32);
      pl.fam = Fam::NIBQ;
      break;
    case DType::Q4Tiled:
      // NIB: a NIBQ version that picked the 18-byte tiles apart with vpermt2b / vpermb measured
      // 1.3–1.5× slower on Zen 5 (the shuffles, and the 8-row tile's accumulators spilled)
      pl.fam = Fam::NIB;
      break;
    case DType::Q4TP:
    case DType::Q2TP:
      pl.tp = wp ? wp->tp : quant::tp_view(pl.t, w.shape, w.payload, w.name);
      pl.bases = wp ? (wp->bases ? wp->bases->data() : nullptr) : simd_detail::tp_bases(w, pl.rows);
      pl.fam = pl.t == DType::Q2TP ? Fam::Q2 : Fam::NIBQ;
      break;
    case DType::Q1:
      pl.fam = Fam::Q1;
      break;
    case DType::Q1S: {
      // O(1) here; the row blocks check the entries, a slice each (check_q1s_slice). A plan's entries
      // were checked in full when it was made: unordered ones go to the reference right away (what
      // finish_q1s would redo the call with), ordered ones skip the per-block check.
      if (wp && !wp->q1s.ascending) return false;
      pl.q1s = wp ? wp->q1s : quant::q1s_view(w.shape, w.payload, w.name, /*check_entries=*/false);
      pl.q1s_checked = wp != nullptr;
      auto& cs = call_scratch(slot);
      cs.q1s_bad.store(0);
      pl.q1s_bad = &cs.q1s_bad;
      pl.fam = Fam::Q1;
      break;
    }
    case DType::VBit:
    case DType::VBitRo: {
      if (wp) {
        pl.vb = &wp->vb;
      } else {
        auto& cs = call_scratch(slot);
        quant::vbit_view_into(cs.vb, pl.t, w.shape, w.payload, w.name);
        pl.vb = &cs.vb;
      }
      pl.fam = Fam::NIBV;  // bias −Σq, scaled by each row's L in tile_vbit
      pl.row_bytes = pl.rows ? pl.vb->row_off[pl.rows] / pl.rows : 0;  // mean row (prefetch unit)
      break;
    }
    default:
      break;
  }
  switch (pl.t) {
    case DType::F32:
      pl.row_bytes = 4 * pl.cols;
      break;
    case DType::F16:
    case DType::BF16:
      pl.row_bytes = 2 * pl.cols;
      break;
    case DType::Q8Row:
    case DType::Q8_2F:
      pl.row_bytes = pl.cols;
      break;
    case DType::Q4Tiled:
      pl.row_bytes = 18 * pl.gpr;
      break;
    case DType::Q1:
    case DType::Q1S:
      pl.row_bytes = quant::kQ1TileBytes * pl.gpr;
      break;
    case DType::Q4Block:
    case DType::Q4TP:
      pl.row_bytes = 16 * pl.gpr;
      break;
    case DType::Q2TP:
      pl.row_bytes = 8 * pl.gpr;
      break;
    case DType::Q1T:
      pl.q1t = wp ? wp->q1t : quant::q1t_view(w.shape, w.payload, w.name, /*check_rows=*/false);
      pl.row_bytes = quant::kQ1tTileBytes * pl.gpr;
      pl.fam = Fam::Q1T;
      break;
    default:
      break;
  }
  const bool flat = pl.t == DType::Q4Block || pl.t == DType::Q4Tiled || pl.t == DType::Q1;
  if (flat && pl.cols % 32 != 0) return false;
  pl.int8 = !exact && !quant::is_float_dtype(pl.t) && (pl.t != DType::Q1T || simd_vbmi_ok());
  if (pl.t == DType::Q8_2F && wp) {
    pl.col = wp->col_avx512.data();  // filled: the plan was made on this CPU, which has the tier
  } else if (pl.t == DType::Q8_2F) {
    auto& cs = call_scratch(slot);
    grow(cs.col, pl.cols);
    const uint8_t* cp = pl.p + n + 2 * pl.rows;
    f16_row_to_f32(cp, pl.cols, cs.col.data());
    pl.col = cs.col.data();
  }
  return true;
}

/// Quantizes n activation rows into caller scratch; act(i) gives token i.
struct ActSet {
  QActSize sz{};
  const int8_t* xq = nullptr;
  const float* d = nullptr;
  const int32_t* bias = nullptr;
  QAct at(size_t i) const { return {xq + i * sz.xq_bytes, d + i * sz.lanes, bias + i * sz.lanes}; }
};
ActSet quantize_all(const Plan& pl, const float* x, size_t n, ThreadPool& pool, size_t slot = 0) {
  auto& cs = call_scratch(slot);
  ActSet a;
  a.sz = qact_size(pl.fam, pl.cols);
  grow(cs.xq, n * a.sz.xq_bytes);
  grow(cs.d, n * a.sz.lanes);
  grow(cs.bias, n * a.sz.lanes);
  a.xq = cs.xq.data();
  a.d = cs.d.data();
  a.bias = cs.bias.data();
  const auto rows = [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i)
      quantize_act(pl.fam, x + i * pl.cols, pl.t == DType::Q8_2F ? pl.col : nullptr, pl.cols,
                   cs.xq.data() + i * a.sz.xq_bytes, cs.d.data() + i * a.sz.lanes,
                   cs.bias.data() + i * a.sz.lanes);
  };
  // Tokens are quantized independently (same values for any split); a batch is split over the pool
  // (pp512 prefill: 512 rows per product, serial on the caller before).
  if (n >= 2)
    pool.parallel_for(n, rows);
  else
    rows(0, n);
  return a;
}

/// Weight bytes and per-lane group scales of superblock s of NIB-family row r (block-local index
/// i): q4_tiled / q4_block take the f16 group scales, q4tp the row's ladder.
/// D: the codec (a template parameter so the per-superblock dispatch compiles away); Full: all 4
/// groups of the superblock exist (every superblock but possibly the last).
template <DType D, bool Full>
CQ_AVX512 inline void nib_load(const Plan& pl, const BlockState& st, uint64_t r, uint64_t i, uint64_t s,
                               uint64_t pfd, __m512i& v, __m512& sw) {
  const uint64_t gpr = pl.gpr, g0 = 4 * s, ng = Full ? 4 : std::min<uint64_t>(4, gpr - g0);
  const __m512i expand = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  if constexpr (D == DType::Q4Tiled) {
    const uint8_t* t = pl.p + 18 * (r * gpr + g0);
    prefetch(t + pfd);
    prefetch(t + 64 + pfd);
    uint16_t h[4] = {0, 0, 0, 0};
    __m128i b[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()};
    for (uint64_t k = 0; k < ng; ++k) {
      h[k] = load_le<uint16_t>(t + 18 * k);
      b[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 18 * k + 2));
    }
    v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(b[1], b[0])), _mm256_set_m128i(b[3], b[2]),
                           1);
    uint64_t hv;
    std::memcpy(&hv, h, 8);
    sw = _mm512_permutexvar_ps(
        expand, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(hv)))));
  } else if constexpr (D == DType::Q4Block) {
    const uint64_t fg = r * gpr + g0;
    prefetch(pl.p + 16 * fg + pfd);
    prefetch(pl.scales + 2 * fg + pfd / 8);
    v = ng == 4 ? _mm512_loadu_si512(pl.p + 16 * fg)
                : _mm512_maskz_loadu_epi8(mask64(16 * ng), pl.p + 16 * fg);
    const __m128i hs = _mm_maskz_loadu_epi16(static_cast<__mmask8>((1u << ng) - 1u), pl.scales + 2 * fg);
    sw = _mm512_permutexvar_ps(expand, _mm512_castps128_ps512(_mm_cvtph_ps(hs)));
  } else {  // Q4TP
    const uint8_t* wp = pl.tp.row_weights(r) + 16 * g0;
    prefetch(wp + pfd);
    v = ng == 4 ? _mm512_loadu_si512(wp) : _mm512_maskz_loadu_epi8(mask64(16 * ng), wp);
    // group scales from prep_tp (zero-padded to a multiple of 16, so the 4 floats always exist)
    sw = _mm512_permutexvar_ps(expand, _mm512_castps128_ps512(_mm_loadu_ps(st.row_scales(i) + g0)));
  }
}

// Register-blocked int8 tiles: R weight rows × T tokens. Each weight superblock is loaded/unpacked
// once and applied to T tokens, each activation superblock once and applied to R rows. Every output
// is computed with the same sequence of operations whatever R and T are (one f32 accumulator per
// output, fused multiply-add per superblock, then _mm512_reduce_add_ps), so matvec (T = 1) and
// matmul (T > 1) results are bit-identical. rows[k]: tensor row, li[k]: block-local index,
// out[k·T + t]: Σ for row k and token t.

/// One Q8-family superblock s (64 columns) of R rows × T tokens: acc[k][t] += the int32 lane sums
/// (see tile_q8). Full: all 64 columns exist (the hot loop: plain loads, no mask).
template <bool Full, int R, int T>
CQ_AVX512 inline void q8_step(const int8_t* const* w, const QAct* a, uint64_t s, uint64_t cols, uint64_t pfd,
                              __m512i (&acc)[R][T]) {
  const __m512i x80 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i wv[R];
  for (int k = 0; k < R; ++k) prefetch(w[k] + 64 * s + pfd);
  for (int k = 0; k < R; ++k)
    wv[k] = _mm512_xor_si512(Full ? _mm512_loadu_si512(w[k] + 64 * s)
                                  : _mm512_maskz_loadu_epi8(mask64(cols - 64 * s), w[k] + 64 * s),
                             x80);
  for (int t = 0; t < T; ++t) {
    const __m512i xq = _mm512_loadu_si512(a[t].xq + 64 * s);
    for (int k = 0; k < R; ++k) acc[k][t] = _mm512_dpbusd_epi32(acc[k][t], wv[k], xq);
  }
}

/// q8_row / q8_2f: R rows × T tokens. Each chunk of kQ8Chunk superblocks sums into int32 lanes
/// (starting from the activation's bias), then gets one convert and one FMA with the lane scales
/// (quantize_act_q8); the row's f16 scale multiplies the reduced sum.
template <int R, int T>
CQ_AVX512 void tile_q8(const Plan& pl, const uint64_t* rows, const QAct* a, float* out) {
  const uint64_t cols = pl.cols, nsb = (cols + 63) / 64, nfull = cols / 64;
  const int8_t* w[R];
  for (int k = 0; k < R; ++k) w[k] = reinterpret_cast<const int8_t*>(pl.p + rows[k] * cols);
  const uint64_t pfd = prefetch_distance(pl, R);
  __m512 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm512_setzero_ps();
  for (uint64_t s0 = 0; s0 < nsb; s0 += kQ8Chunk) {
    const uint64_t l = 16 * (s0 / kQ8Chunk), s1 = std::min(s0 + kQ8Chunk, nsb);
    __m512i acc[R][T];
    for (int t = 0; t < T; ++t) {
      const __m512i bias = _mm512_loadu_si512(a[t].bias + l);
      for (int k = 0; k < R; ++k) acc[k][t] = bias;
    }
    if (s1 <= nfull && s1 - s0 == kQ8Chunk) {
      for (uint64_t s = s0; s < s0 + kQ8Chunk; ++s) q8_step<true, R, T>(w, a, s, cols, pfd, acc);
    } else {
      for (uint64_t s = s0; s < std::min(s1, nfull); ++s) q8_step<true, R, T>(w, a, s, cols, pfd, acc);
      if (nfull < s1) q8_step<false, R, T>(w, a, nfull, cols, pfd, acc);
    }
    for (int t = 0; t < T; ++t) {
      const __m512 d = _mm512_loadu_ps(a[t].d + l);
      for (int k = 0; k < R; ++k) f[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[k][t]), d, f[k][t]);
    }
  }
  CQ_UNROLL
  for (int k = 0; k < R; ++k) {
    const float sc = f16_to_f32(load_le<uint16_t>(pl.scales + 2 * rows[k]));
    for (int t = 0; t < T; ++t) out[k * T + t] = _mm512_reduce_add_ps(f[k][t]) * sc;
  }
}

/// One NIB-family superblock s of R rows × T tokens (see tile_nib).
template <DType D, bool Full, int R, int T>
CQ_AVX512 inline void nib_step(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                               const QAct* a, uint64_t s, uint64_t pfd, __m512 (&f)[R][T]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512i lo[R], hi[R];
  __m512 sw[R];
  CQ_UNROLL
  for (int k = 0; k < R; ++k) {
    __m512i v;
    nib_load<D, Full>(pl, st, rows[k], li[k], s, pfd, v, sw[k]);
    lo[k] = _mm512_and_si512(v, m4);
    hi[k] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
  }
  for (int t = 0; t < T; ++t) {
    const __m512i x0 = _mm512_loadu_si512(a[t].xq + 128 * s), x1 = _mm512_loadu_si512(a[t].xq + 128 * s + 64);
    const __m512i bias = _mm512_loadu_si512(a[t].bias + 16 * s);
    const __m512 d = _mm512_loadu_ps(a[t].d + 16 * s);
    CQ_UNROLL
    for (int k = 0; k < R; ++k) {
      const __m512i acc = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(bias, lo[k], x0), hi[k], x1);
      f[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(d, sw[k]), f[k][t]);
    }
  }
}

/// Transposes the NS weight superblocks of a NIBQ chunk (sb[s]: groups 4s…4s+3 of the chunk, 16 code
/// bytes each) as dwords within 128-bit lanes into tr, the layout quantize_act_nibq describes.
template <int NS>
CQ_AVX512 inline void nibq_transpose(const __m512i (&sb)[NS], __m512i (&tr)[NS]) {
  if constexpr (NS == 4) {
    const __m512i a0 = _mm512_unpacklo_epi32(sb[0], sb[1]), a1 = _mm512_unpackhi_epi32(sb[0], sb[1]);
    const __m512i b0 = _mm512_unpacklo_epi32(sb[2], sb[3]), b1 = _mm512_unpackhi_epi32(sb[2], sb[3]);
    tr[0] = _mm512_unpacklo_epi64(a0, b0);
    tr[1] = _mm512_unpackhi_epi64(a0, b0);
    tr[2] = _mm512_unpacklo_epi64(a1, b1);
    tr[3] = _mm512_unpackhi_epi64(a1, b1);
  } else {
    tr[0] = _mm512_unpacklo_epi64(sb[0], sb[1]);
    tr[1] = _mm512_unpackhi_epi64(sb[0], sb[1]);
  }
}

/// One row's transposed NIBQ chunk (tr, chunk at superblock slot s0) with its group scales in lane
/// order (sw) applied to T tokens: the low / high nibbles of each register against activation
/// registers 2j / 2j + 1, one int32 accumulator per token that collects whole groups per lane, then
/// one convert and one FMA with (activation scale × group scale): f[t] += Σ_lanes.
template <int NS, int T>
CQ_AVX512 inline void nibq_apply(const __m512i (&tr)[NS], __m512 sw, const QAct* a, uint64_t s0, __m512* f) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512i w[2 * NS];
  for (int j = 0; j < NS; ++j) {
    w[2 * j] = _mm512_and_si512(tr[j], m4);
    w[2 * j + 1] = _mm512_and_si512(_mm512_srli_epi16(tr[j], 4), m4);
  }
  for (int t = 0; t < T; ++t) {
    const int8_t* x = a[t].xq + 128 * s0;
    __m512i acc = _mm512_loadu_si512(a[t].bias + 16 * s0);
    for (int j = 0; j < 2 * NS; ++j) acc = _mm512_dpbusd_epi32(acc, w[j], _mm512_loadu_si512(x + 64 * j));
    f[t] =
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(_mm512_loadu_ps(a[t].d + 16 * s0), sw), f[t]);
  }
}

/// One row's NIBQ chunk (NS = 4: quad of 16 groups, NS = 2: pair of 8) at superblock slot s0, for
/// the codecs whose code bytes are 16 per group back to back: q4tp (group scales from prep_tp) and
/// q4_block (f16 scales in their own plane). Loads and transposes the code bytes (tr, see
/// nibq_transpose) and returns the group scales in lane order (sw).
template <DType D, int NS>
CQ_AVX512 inline void nibq_load(const Plan& pl, const BlockState& st, uint64_t r, uint64_t i, uint64_t s0,
                                uint64_t pfd, __m512i (&tr)[NS], __m512& sw) {
  const uint64_t g0 = 4 * s0;
  const uint8_t* wp = D == DType::Q4TP ? pl.tp.row_weights(r) + 16 * g0 : pl.p + 16 * (r * pl.gpr + g0);
  __m512i sb[NS];
  for (int j = 0; j < NS; ++j) {
    prefetch(wp + 64 * j + pfd);
    sb[j] = _mm512_loadu_si512(wp + 64 * j);
  }
  __m512 sc;
  if constexpr (D == DType::Q4TP) {
    sc = _mm512_loadu_ps(st.row_scales(i) + g0);
  } else {
    prefetch(pl.scales + 2 * (r * pl.gpr + g0) + pfd / 8);
    const __m256i h = _mm256_maskz_loadu_epi16(NS == 4 ? 0xFFFF : 0x00FF, pl.scales + 2 * (r * pl.gpr + g0));
    sc = _mm512_cvtph_ps(h);
  }
  nibq_transpose<NS>(sb, tr);
  sw = _mm512_permutexvar_ps(_mm512_load_si512(NS == 4 ? kNibqQuadGroup : kNibqPairGroup), sc);
}

/// One NIBQ chunk at superblock slot s0 of R rows × T tokens: each row's chunk is loaded,
/// transposed and applied to every token in turn.
template <DType D, int NS, int R, int T>
CQ_AVX512 inline void nibq_step(const Plan& pl, const BlockState& st, const uint64_t* rows,
                                const uint64_t* li, const QAct* a, uint64_t s0, uint64_t pfd,
                                __m512 (&f)[R][T]) {
  CQ_UNROLL
  for (int k = 0; k < R; ++k) {
    __m512i tr[NS];
    __m512 sw;
    nibq_load<D, NS>(pl, st, rows[k], li[k], s0, pfd, tr, sw);
    nibq_apply<NS, T>(tr, sw, a, s0, f[k]);
  }
}

/// The nibble codecs: R rows × T tokens. q4tp and q4_block (Fam::NIBQ) take the NIBQ chunks first;
/// the remaining groups (all of q4_tiled's) go as NIB superblocks.
template <DType D, int R, int T>
CQ_AVX512 void tile_nib(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                        const QAct* a, float* out) {
  const uint64_t nsb = (pl.gpr + 3) / 4, nfull = pl.gpr / 4;
  const uint64_t pfd = prefetch_distance(pl, R);
  __m512 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm512_setzero_ps();
  uint64_t s0 = 0;  // first NIB superblock slot
  if constexpr (D == DType::Q4TP || D == DType::Q4Block) {
    const NibqSplit sp = nibq_split(pl.gpr);
    for (uint64_t q = 0; q < sp.nq; ++q) nibq_step<D, 4, R, T>(pl, st, rows, li, a, 4 * q, pfd, f);
    if (sp.np) nibq_step<D, 2, R, T>(pl, st, rows, li, a, 4 * sp.nq, pfd, f);
    s0 = sp.first_nib_slot();
  }
  for (uint64_t s = s0; s < nfull; ++s) nib_step<D, true, R, T>(pl, st, rows, li, a, s, pfd, f);
  if (nfull < nsb) nib_step<D, false, R, T>(pl, st, rows, li, a, nfull, pfd, f);
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) out[k * T + t] = _mm512_reduce_add_ps(f[k][t]);
}

template <int R, int T>
CQ_AVX512 void tile_q2(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                       const QAct* a, float* out) {
  const uint64_t gpr = pl.gpr, nsb = (gpr + 7) / 8;
  const __m512i m6 = _mm512_set1_epi8(6);
  const uint64_t pfd = prefetch_distance(pl, R);
  const __m512i expand2 = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const uint8_t* w[R];
  const float* gs[R];
  CQ_UNROLL
  for (int k = 0; k < R; ++k) {
    w[k] = pl.tp.row_weights(rows[k]);
    gs[k] = st.row_scales(li[k]);
  }
  __m512 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm512_setzero_ps();
  for (uint64_t s = 0; s < nsb; ++s) {
    const uint64_t g0 = 8 * s, ng = std::min<uint64_t>(8, gpr - g0);
    __m512i p[R][4];
    __m512 sw[R];
    CQ_UNROLL
    for (int k = 0; k < R; ++k) {
      prefetch(w[k] + 8 * g0 + pfd);
      const __m512i v = ng == 8 ? _mm512_loadu_si512(w[k] + 8 * g0)
                                : _mm512_maskz_loadu_epi8(mask64(8 * ng), w[k] + 8 * g0);
      p[k][0] = _mm512_and_si512(_mm512_slli_epi16(v, 1), m6);
      p[k][1] = _mm512_and_si512(_mm512_srli_epi16(v, 1), m6);
      p[k][2] = _mm512_and_si512(_mm512_srli_epi16(v, 3), m6);
      p[k][3] = _mm512_and_si512(_mm512_srli_epi16(v, 5), m6);
      sw[k] = _mm512_permutexvar_ps(expand2, _mm512_castps256_ps512(_mm256_loadu_ps(gs[k] + g0)));
    }
    for (int t = 0; t < T; ++t) {
      const int8_t* xq = a[t].xq + 256 * s;
      const __m512i x0 = _mm512_loadu_si512(xq), x1 = _mm512_loadu_si512(xq + 64);
      const __m512i x2 = _mm512_loadu_si512(xq + 128), x3 = _mm512_loadu_si512(xq + 192);
      const __m512i bias = _mm512_loadu_si512(a[t].bias + 16 * s);
      const __m512 d = _mm512_loadu_ps(a[t].d + 16 * s);
      CQ_UNROLL
      for (int k = 0; k < R; ++k) {
        __m512i acc = _mm512_dpbusd_epi32(bias, p[k][0], x0);
        acc = _mm512_dpbusd_epi32(acc, p[k][1], x1);
        acc = _mm512_dpbusd_epi32(acc, p[k][2], x2);
        acc = _mm512_dpbusd_epi32(acc, p[k][3], x3);
        f[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(d, sw[k]), f[k][t]);
      }
    }
  }
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) out[k * T + t] = _mm512_reduce_add_ps(f[k][t]);
}

[[noreturn]] void fail_q1t_tile(const Plan& pl, uint64_t r, uint64_t g) {
  fail(ErrorKind::Parse, "tensor '{}': q1t tile (row {}, group {}) has a non-base-3 code byte", pl.name, r,
       g);
}

/// Byte permutations of 8 consecutive q1t tiles (72 bytes, split over two registers lo/hi):
/// kQ1tCodeIdx puts group g's 7 code bytes at 8g..8g+6 (byte 8g+7 is zeroed by a mask),
/// kQ1tScaleIdx its f16 scale at 2g, 2g+1.
constexpr std::array<uint8_t, 64> kQ1tCodeIdx = [] {
  std::array<uint8_t, 64> a{};
  for (uint32_t g = 0; g < 8; ++g)
    for (uint32_t j = 0; j < 8; ++j) a[8 * g + j] = static_cast<uint8_t>(9 * g + 2 + std::min(j, 6u));
  return a;
}();
constexpr std::array<uint8_t, 64> kQ1tScaleIdx = [] {
  std::array<uint8_t, 64> a{};
  for (uint32_t g = 0; g < 8; ++g) {
    a[2 * g] = static_cast<uint8_t>(9 * g);
    a[2 * g + 1] = static_cast<uint8_t>(9 * g + 1);
  }
  return a;
}();

/// u = value + 1 ∈ {0, 1, 2} of the base-3 digits 0..3 of a code byte b < 243, packed 2 bits
/// each (digit p in bits 2p..2p+1); digit 4 is taken by comparison (b ≥ 81, b ≥ 162).
/// Code → value: 0 → 0, 1 → +1, 2 → −1 (quant/layout.h), so u = (digit + 1) mod 3.
constexpr std::array<uint8_t, 256> kQ1tLowDigits = [] {
  std::array<uint8_t, 256> a{};
  for (uint32_t b = 0; b < 243; ++b) {
    uint32_t v = b, packed = 0;
    for (uint32_t p = 0; p < 4; ++p, v /= 3) packed |= ((v % 3 + 1) % 3) << (2 * p);
    a[b] = static_cast<uint8_t>(packed);
  }
  return a;
}();

/// One q1t superblock s (8 groups) of R rows × T tokens (see tile_q1t). Full: all 8 groups exist.
template <bool Full, int R, int T>
CQ_AVX512_VBMI inline void q1t_step(const Plan& pl, const uint64_t* rows, const QAct* a, uint64_t s,
                                    uint64_t pfd, __m512 (&f)[R][T]) {
  const uint64_t gpr = pl.gpr, g0 = 8 * s;
  const uint64_t nb =
      Full ? 8 * quant::kQ1tTileBytes : quant::kQ1tTileBytes * std::min<uint64_t>(8, gpr - g0);
  const __m512i cidx = _mm512_loadu_si512(kQ1tCodeIdx.data()), sidx = _mm512_loadu_si512(kQ1tScaleIdx.data());
  // per group: 243 for code bytes 0..5, 9 for byte 6, 1 for the zeroed pad byte 7
  const __m512i limit = _mm512_set1_epi64(static_cast<long long>(0x0109F3F3F3F3F3F3ull));
  const __m512i expand = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi8(1), two = _mm512_set1_epi8(2);
  const __m512i three = _mm512_set1_epi8(3), c81 = _mm512_set1_epi8(81),
                c162 = _mm512_set1_epi8(static_cast<char>(162));
  const __m512i lut0 = _mm512_loadu_si512(kQ1tLowDigits.data()),
                lut1 = _mm512_loadu_si512(kQ1tLowDigits.data() + 64),
                lut2 = _mm512_loadu_si512(kQ1tLowDigits.data() + 128),
                lut3 = _mm512_loadu_si512(kQ1tLowDigits.data() + 192);
  const __mmask64 code_bytes = 0x7F7F7F7F7F7F7F7Full;
  __m512i u[R][5];
  __m512 sw[R];
  CQ_UNROLL
  for (int k = 0; k < R; ++k) {
    const uint8_t* tp = pl.q1t.base + (rows[k] * gpr + g0) * quant::kQ1tTileBytes;
    prefetch(tp + pfd);
    prefetch(tp + 64 + pfd);
    const __m512i lo = Full || nb >= 64 ? _mm512_loadu_si512(tp) : _mm512_maskz_loadu_epi8(mask64(nb), tp);
    const __m512i hi = Full || nb > 64 ? _mm512_maskz_loadu_epi8(mask64(nb - 64), tp + 64) : zero;
    const __m512i b = _mm512_maskz_permutex2var_epi8(code_bytes, lo, cidx, hi);
    if (const __mmask64 bad = _mm512_cmpge_epu8_mask(b, limit))
      fail_q1t_tile(pl, rows[k], g0 + static_cast<uint64_t>(__builtin_ctzll(bad)) / 8);
    const __m128i hs = _mm512_castsi512_si128(_mm512_permutex2var_epi8(lo, sidx, hi));
    sw[k] = _mm512_permutexvar_ps(expand, _mm512_castps256_ps512(_mm256_cvtph_ps(hs)));
    const __m512i lowd =
        _mm512_mask_blend_epi8(_mm512_movepi8_mask(b), _mm512_permutex2var_epi8(lut0, b, lut1),
                               _mm512_permutex2var_epi8(lut2, b, lut3));
    u[k][0] = _mm512_and_si512(lowd, three);
    u[k][1] = _mm512_and_si512(_mm512_srli_epi16(lowd, 2), three);
    u[k][2] = _mm512_and_si512(_mm512_srli_epi16(lowd, 4), three);
    u[k][3] = _mm512_and_si512(_mm512_srli_epi16(lowd, 6), three);
    const __mmask64 k1 = _mm512_cmpge_epu8_mask(b, c81), k2 = _mm512_cmpge_epu8_mask(b, c162);
    u[k][4] = _mm512_mask_mov_epi8(_mm512_mask_blend_epi8(k1, one, two), k2, zero);
  }
  for (int t = 0; t < T; ++t) {
    const int8_t* xq = a[t].xq + 320 * s;
    const __m512i bias = _mm512_loadu_si512(a[t].bias + 16 * s);
    const __m512 d = _mm512_loadu_ps(a[t].d + 16 * s);
    CQ_UNROLL
    for (int k = 0; k < R; ++k) {
      __m512i acc = _mm512_dpbusd_epi32(bias, u[k][0], _mm512_loadu_si512(xq));
      for (int p = 1; p < 5; ++p) acc = _mm512_dpbusd_epi32(acc, u[k][p], _mm512_loadu_si512(xq + 64 * p));
      f[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(d, sw[k]), f[k][t]);
    }
  }
}

/// q1t: R rows × T tokens over superblocks of 8 groups (Fam::Q1T). Per row and superblock the 8
/// tiles are gathered with vpermi2b, the code bytes checked (bytes 0..5 < 243, byte 6 < 9: the
/// exact path's q1t_tile_ok), and the five base-3 digits turned into u = value + 1 ∈ {0, 1, 2}
/// (digits 0..3 from a 256-entry table, digit 4 by comparison); each digit plane is one vpdpbusd
/// against the matching activation plane. The overlay is added by the caller
/// (add_q1t_overlay). Same per-output operation sequence for every R, T (see tile_q8).
template <int R, int T>
CQ_AVX512_VBMI void tile_q1t(const Plan& pl, const uint64_t* rows, const QAct* a, float* out) {
  const uint64_t nsb = (pl.gpr + 7) / 8, nfull = pl.gpr / 8;
  const uint64_t pfd = prefetch_distance(pl, R);
  __m512 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm512_setzero_ps();
  for (uint64_t s = 0; s < nfull; ++s) q1t_step<true, R, T>(pl, rows, a, s, pfd, f);
  if (nfull < nsb) q1t_step<false, R, T>(pl, rows, a, nfull, pfd, f);
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) out[k * T + t] = _mm512_reduce_add_ps(f[k][t]);
}

/// vpermi2b indices that split 128 natural-order codes (two registers) into the NIB layout: per
/// 32-code group j, its 16 even codes at 16j.. of the first result and its 16 odd codes at 16j.. of
/// the second.
constexpr std::array<std::array<uint8_t, 64>, 2> kVbSplit = [] {
  std::array<std::array<uint8_t, 64>, 2> a{};
  for (uint32_t h = 0; h < 2; ++h)
    for (uint32_t j = 0; j < 4; ++j)
      for (uint32_t i = 0; i < 16; ++i) a[h][16 * j + i] = static_cast<uint8_t>(32 * j + 2 * i + h);
  return a;
}();

/// vbit / vbit_ro: R rows × T tokens over 128-code superblocks (4 groups): vb_codes twice, then the
/// codes are split into the NIB activation layout (Fam::NIBV, bias −Σq) so both halves accumulate in
/// the same lanes and one scale vector serves 128 weights; each row's offset L = 2^(b−1) − 1 scales
/// the bias, so every int32 lane is Σ (u − L)·q. Same per-output operation sequence for every R, T.
template <int R, int T>
CQ_AVX512_VBMI void tile_vbit(const Plan& pl, const uint64_t* rows, const QAct* a, float* out) {
  const uint64_t cols = pl.cols, nsb = (cols + 127) / 128, pfd = prefetch_distance(pl, R);
  const __m512i expand = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i even = _mm512_loadu_si512(kVbSplit[0].data()), odd = _mm512_loadu_si512(kVbSplit[1].data());
  const uint8_t* rp[R];
  uint32_t b[R];
  __m512i L[R];
  CQ_UNROLL
  for (int k = 0; k < R; ++k) {
    b[k] = pl.vb->width(rows[k]);
    rp[k] = pl.vb->row(rows[k]);
    L[k] = _mm512_set1_epi32((1 << (b[k] - 1)) - 1);
  }
  __m512 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm512_setzero_ps();
  for (uint64_t s = 0; s < nsb; ++s) {
    const bool second = 128 * s + 64 < cols;  // cols % 32 == 0: the second half may be absent
    const uint64_t ng = std::min<uint64_t>(4, (cols - 128 * s) / 32);
    __m512i ue[R], uo[R];
    __m512 sw[R];
    CQ_UNROLL
    for (int k = 0; k < R; ++k) {
      prefetch(rp[k] + 16 * b[k] * s + pfd);
      const __m512i u0 = vb_codes(rp[k], 2 * s, cols, b[k]);
      const __m512i u1 = second ? vb_codes(rp[k], 2 * s + 1, cols, b[k]) : _mm512_setzero_si512();
      ue[k] = _mm512_permutex2var_epi8(u0, even, u1);
      uo[k] = _mm512_permutex2var_epi8(u0, odd, u1);
      prefetch(pl.vb->scales + 2 * ((rows[k] + kRowBlock) * pl.gpr + 4 * s));  // the scale plane, a block on
      const __m128i h = _mm_maskz_loadu_epi16(static_cast<__mmask8>((1u << ng) - 1u),
                                              pl.vb->scales + 2 * (rows[k] * pl.gpr + 4 * s));
      sw[k] = _mm512_permutexvar_ps(expand, _mm512_castps128_ps512(_mm_cvtph_ps(h)));
    }
    for (int t = 0; t < T; ++t) {
      const __m512i x0 = _mm512_loadu_si512(a[t].xq + 128 * s),
                    x1 = _mm512_loadu_si512(a[t].xq + 128 * s + 64);
      const __m512i bias = _mm512_loadu_si512(a[t].bias + 16 * s);
      const __m512 d = _mm512_loadu_ps(a[t].d + 16 * s);
      CQ_UNROLL
      for (int k = 0; k < R; ++k) {
        const __m512i acc =
            _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_mullo_epi32(bias, L[k]), ue[k], x0), uo[k], x1);
        f[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(d, sw[k]), f[k][t]);
      }
    }
  }
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) out[k * T + t] = _mm512_reduce_add_ps(f[k][t]);
}

/// q1 / q1s's base: R rows × T tokens over superblocks of 2 tiles (64 weights): u8 = 2·bit against
/// the natural-order activation (Fam::Q1, bias −Σq), so every int32 lane is Σ (2·bit − 1)·q.
template <int R, int T>
CQ_AVX512 void tile_q1(const Plan& pl, const uint64_t* rows, const QAct* a, float* out) {
  const uint64_t gpr = pl.gpr, nsb = (gpr + 1) / 2, pfd = prefetch_distance(pl, R);
  const __m512i two = _mm512_set1_epi8(2);
  const __m512i expand = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  __m512 f[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) f[k][t] = _mm512_setzero_ps();
  for (uint64_t s = 0; s < nsb; ++s) {
    const bool both = 2 * s + 1 < gpr;
    __m512i u[R];
    __m512 sw[R];
    CQ_UNROLL
    for (int k = 0; k < R; ++k) {
      const uint8_t* ta = pl.p + quant::kQ1TileBytes * (rows[k] * gpr + 2 * s);
      prefetch(ta + pfd);
      const uint64_t mb =
          uint64_t{load_le<uint32_t>(ta + 2)} | (both ? uint64_t{load_le<uint32_t>(ta + 8)} << 32 : 0);
      const uint32_t hs =
          uint32_t{load_le<uint16_t>(ta)} | (both ? uint32_t{load_le<uint16_t>(ta + 6)} << 16 : 0);
      u[k] = _mm512_maskz_mov_epi8(mb, two);
      sw[k] = _mm512_permutexvar_ps(
          expand, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(hs)))));
    }
    for (int t = 0; t < T; ++t) {
      const __m512i xq = _mm512_loadu_si512(a[t].xq + 64 * s), bias = _mm512_loadu_si512(a[t].bias + 16 * s);
      const __m512 d = _mm512_loadu_ps(a[t].d + 16 * s);
      for (int k = 0; k < R; ++k)
        f[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, u[k], xq)),
                                  _mm512_mul_ps(d, sw[k]), f[k][t]);
    }
  }
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) out[k * T + t] = _mm512_reduce_add_ps(f[k][t]);
}

template <int R, int T>
CQ_AVX512 void tile_int8(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                         const QAct* a, float* out) {
  if (pl.fam == Fam::Q8)
    tile_q8<R, T>(pl, rows, a, out);
  else if (pl.fam == Fam::Q1T)
    tile_q1t<R, T>(pl, rows, a, out);
  else if (pl.t == DType::VBit || pl.t == DType::VBitRo)
    tile_vbit<R, T>(pl, rows, a, out);
  else if (pl.fam == Fam::Q1)
    tile_q1<R, T>(pl, rows, a, out);
  else if (pl.fam == Fam::Q2)
    tile_q2<R, T>(pl, st, rows, li, a, out);
  else
    switch (pl.t) {
      case DType::Q4Tiled:
        tile_nib<DType::Q4Tiled, R, T>(pl, st, rows, li, a, out);
        break;
      case DType::Q4Block:
        tile_nib<DType::Q4Block, R, T>(pl, st, rows, li, a, out);
        break;
      default:
        tile_nib<DType::Q4TP, R, T>(pl, st, rows, li, a, out);
        break;
    }
}

/// Rows [r0, r0+rc) (block-local 0..rc) × tokens [0, n): Y[i·y_stride + j0 + k], in R×T tiles.
/// Row/token tails are padded by repeating the last row/token and dropping those outputs.
template <int R, int T>
CQ_AVX512 void block_int8_rt(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc,
                             const ActSet& acts, size_t n, float* y, size_t y_stride, uint64_t j0) {
  for (uint64_t k0 = 0; k0 < rc; k0 += R) {
    uint64_t rows[R], li[R];
    for (int k = 0; k < R; ++k) {
      li[k] = std::min<uint64_t>(k0 + k, rc - 1);
      rows[k] = r0 + li[k];
    }
    const uint64_t kn = std::min<uint64_t>(R, rc - k0);
    for (size_t i0 = 0; i0 < n; i0 += T) {
      QAct a[T];
      for (int t = 0; t < T; ++t) a[t] = acts.at(std::min<size_t>(i0 + t, n - 1));
      float out[R * T];
      tile_int8<R, T>(pl, st, rows, li, a, out);
      const size_t tn = std::min<size_t>(T, n - i0);
      for (uint64_t k = 0; k < kn; ++k)
        for (size_t t = 0; t < tn; ++t) y[(i0 + t) * y_stride + j0 + k0 + k] = out[k * T + t];
    }
  }
}

/// Most tokens block_nibq_few takes at once: a decode step of up to 8 sequences; a prefill goes
/// through it 8 tokens at a time.
constexpr size_t kFewTokens = 8;
/// Rows block_nibq_few unpacks together.
constexpr int kFewRows = 4;

/// One chunk of kFewRows rows, unpacked (w[k][j]: weight register j of row k, u8 codes; sw[k]:
/// the row's group scales in lane order), applied to tokens t … t + T − 1 (activation registers at
/// xq + 128·s0 + 64·j, biases and scales at 16·s0, as nibq_apply and nib_step use them): each
/// activation register loaded serves T·kFewRows vpdpbusd. Per output the operations are those of
/// nibq_apply / nib_step (an exact int32 sum per lane, then one convert and one FMA with d·sw), so
/// the results are bit-identical to theirs.
template <int NW, int T>
CQ_AVX512 inline void few_tokens(const __m512i (&w)[kFewRows][8], const __m512 (&sw)[kFewRows], const QAct* a,
                                 size_t t, uint64_t s0, __m512 (&f)[kFewRows][kFewTokens]) {
  constexpr int R = kFewRows;
  __m512i acc[R][T];
  for (int u = 0; u < T; ++u) {
    const __m512i b = _mm512_loadu_si512(a[t + u].bias + 16 * s0);
    for (int k = 0; k < R; ++k) acc[k][u] = b;
  }
  CQ_UNROLL
  for (int j = 0; j < NW; ++j) {
    __m512i v[T];
    for (int u = 0; u < T; ++u) v[u] = _mm512_loadu_si512(a[t + u].xq + 128 * s0 + 64 * j);
    for (int k = 0; k < R; ++k)
      for (int u = 0; u < T; ++u) acc[k][u] = _mm512_dpbusd_epi32(acc[k][u], w[k][j], v[u]);
  }
  for (int u = 0; u < T; ++u) {
    const __m512 d = _mm512_loadu_ps(a[t + u].d + 16 * s0);
    for (int k = 0; k < R; ++k)
      f[k][t + u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[k][u]), _mm512_mul_ps(d, sw[k]), f[k][t + u]);
  }
}

/// few_tokens over tokens a[0 … n), two at a time (4 at a time spills: matmul_n4 4864×896 150 →
/// 169 µs on Zen 5).
template <int NW>
CQ_AVX512 inline void few_apply(const __m512i (&w)[kFewRows][8], const __m512 (&sw)[kFewRows], const QAct* a,
                                size_t n, uint64_t s0, __m512 (&f)[kFewRows][kFewTokens]) {
  size_t t = 0;
  for (; t + 2 <= n; t += 2) few_tokens<NW, 2>(w, sw, a, t, s0, f);
  if (t < n) few_tokens<NW, 1>(w, sw, a, t, s0, f);
}

/// The NIBQ chunk (NS = 4: quad, 2: pair) at superblock slot s0 of kFewRows rows, unpacked for
/// few_apply: w[k][j] the u8 weight registers of row k (low / high nibbles of each transposed code
/// register, as nibq_apply splits them), sw[k] its group scales in lane order.
template <DType D, int NS>
CQ_AVX512 inline void few_unpack_nibq(const Plan& pl, const BlockState& st, const uint64_t* rows,
                                      const uint64_t* li, uint64_t s0, uint64_t pfd,
                                      __m512i (&w)[kFewRows][8], __m512 (&sw)[kFewRows]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int k = 0; k < kFewRows; ++k) {
    __m512i tr[NS];
    nibq_load<D, NS>(pl, st, rows[k], li[k], s0, pfd, tr, sw[k]);
    for (int j = 0; j < NS; ++j) {
      w[k][2 * j] = _mm512_and_si512(tr[j], m4);
      w[k][2 * j + 1] = _mm512_and_si512(_mm512_srli_epi16(tr[j], 4), m4);
    }
  }
}

/// Fam::NIBQ rows [r0, r0+rc) (block-local 0..rc) × tokens [i0, i0 + n), 1 ≤ n ≤ kFewTokens:
/// Y[i·y_stride + j0 + k]. The R × T tiles unpack each row chunk once per token tile and load each
/// activation register once per row; here every chunk of kFewRows rows is unpacked once for all n
/// tokens and each activation register serves 2·kFewRows vpdpbusd (see few_apply). The row tail is
/// padded by repeating the last row and dropping its outputs.
template <DType D>
CQ_AVX512 void block_nibq_few(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc,
                              const ActSet& acts, size_t i0, size_t n, float* y, size_t y_stride,
                              uint64_t j0) {
  constexpr int R = kFewRows;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const uint64_t pfd = prefetch_distance(pl, R);
  const NibqSplit sp = nibq_split(pl.gpr);
  const uint64_t nsb = (pl.gpr + 3) / 4, nfull = pl.gpr / 4;
  QAct a[kFewTokens];
  for (size_t t = 0; t < n; ++t) a[t] = acts.at(i0 + t);
  for (uint64_t k0 = 0; k0 < rc; k0 += R) {
    uint64_t rows[R], li[R];
    for (int k = 0; k < R; ++k) {
      li[k] = std::min<uint64_t>(k0 + k, rc - 1);
      rows[k] = r0 + li[k];
    }
    __m512 f[R][kFewTokens];
    for (int k = 0; k < R; ++k)
      for (size_t t = 0; t < n; ++t) f[k][t] = _mm512_setzero_ps();
    __m512i w[R][8];
    __m512 sw[R];
    for (uint64_t q = 0; q < sp.nq; ++q) {
      few_unpack_nibq<D, 4>(pl, st, rows, li, 4 * q, pfd, w, sw);
      few_apply<8>(w, sw, a, n, 4 * q, f);
    }
    if (sp.np) {
      few_unpack_nibq<D, 2>(pl, st, rows, li, 4 * sp.nq, pfd, w, sw);
      few_apply<4>(w, sw, a, n, 4 * sp.nq, f);
    }
    for (uint64_t s = sp.first_nib_slot(); s < nsb; ++s) {
      for (int k = 0; k < R; ++k) {
        __m512i v;
        if (s < nfull)
          nib_load<D, true>(pl, st, rows[k], li[k], s, pfd, v, sw[k]);
        else
          nib_load<D, false>(pl, st, rows[k], li[k], s, pfd, v, sw[k]);
        w[k][0] = _mm512_and_si512(v, m4);
        w[k][1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      }
      few_apply<2>(w, sw, a, n, s, f);
    }
    const uint64_t kn = std::min<uint64_t>(R, rc - k0);
    for (uint64_t k = 0; k < kn; ++k)
      for (size_t t = 0; t < n; ++t) y[(i0 + t) * y_stride + j0 + k0 + k] = _mm512_reduce_add_ps(f[k][t]);
  }
}

/// Tile shapes (measured with bench/kernels_bench on Zen 4, 1 thread, 4864×896): q8 1 row (matvec) /
/// 4 rows × 2 tokens (matmul: since the chunked int32 sums, 4 × 4 spills; on Zen 5 matmul_n64 3.0 →
/// 1.9 ms against 2.3 ms for 4 × 4 and 2.5 ms for 2 × 4); the nibble and 2-bit codecs 4 rows × 3 tokens / 4
/// rows (with the codec a template parameter nothing spills; 2-row tiles were 15–40% slower); q1 as the
/// nibble codecs and vbit; q1t 4 rows (matvec) / 2 rows × 2–4 tokens. q4tp (NIBQ, Zen 5, 2 threads): 8 rows
/// (matvec, 12% faster than 4) / 4 rows × 2 tokens (6% faster than 4 × 4).
/// Two tokens or more take block_nibq_few instead (each 4-row chunk unpacked once per 8 tokens):
/// Zen 5, 1 thread, interleaved A/B, matmul_n4 4864×896 166–175 → 148–160 µs, matmul_n64 2.18 →
/// 1.63 ms; the 0.5B q4tp `cortiq bench --parallel 4` aggregate 224–227 → 255–263 tok/s (2
/// threads), 137 → 157 (1); pp512 (1 thread) 290–312 → 322–351 tok/s.
///
/// q8 matvec reads one row at a time: it is memory-bound, and a DRAM stream read in address order
/// runs faster than R rows read side by side a superblock at a time (R streams one row apart).
/// Zen 5, 1 thread, kernels_bench A/B in one run: matvec_cold 4864×896 170 → 130 µs, 896×4864
/// 155 → 125 µs, 151936×896 (the lm_head) 5.2 → 3.6 ms against 8-row tiles; the 0.5B q8 decode
/// 48–49 → 50–53 tok/s (1 thread), 90 → 98 (2). The nibble codecs keep their row tiles: they are
/// compute-bound at T = 1, and one row at a time costs them 30–40% (each activation load then
/// serves one row).
CQ_AVX512 void block_int8(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc, const ActSet& acts,
                          size_t n, float* y, size_t y_stride, uint64_t j0) {
  // Small batches (continuous-batching decode steps of 2–8 sequences) get a token tile that
  // divides them, so no padded token is computed.
  if (pl.fam == Fam::Q1T) {  // 5 digit planes per row: 2-row tiles keep the accumulators in registers
    if (n == 1)
      block_int8_rt<4, 1>(pl, st, r0, rc, acts, n, y, y_stride, j0);
    else if (n == 2)
      block_int8_rt<2, 2>(pl, st, r0, rc, acts, n, y, y_stride, j0);
    else if (n % 4 == 0)
      block_int8_rt<2, 4>(pl, st, r0, rc, acts, n, y, y_stride, j0);
    else
      block_int8_rt<2, 3>(pl, st, r0, rc, acts, n, y, y_stride, j0);
  } else if (pl.fam == Fam::NIBQ) {
    if (n == 1)  // each row's chunk is applied to the token in turn (nibq_step)
      block_int8_rt<8, 1>(pl, st, r0, rc, acts, n, y, y_stride, j0);
    else  // 4-row chunks unpacked once per kFewTokens tokens
      for (size_t i0 = 0; i0 < n; i0 += kFewTokens) {
        const size_t m = std::min(kFewTokens, n - i0);
        if (pl.t == DType::Q4TP)
          block_nibq_few<DType::Q4TP>(pl, st, r0, rc, acts, i0, m, y, y_stride, j0);
        else
          block_nibq_few<DType::Q4Block>(pl, st, r0, rc, acts, i0, m, y, y_stride, j0);
      }
  } else if (n == 2 || (n > 1 && pl.fam == Fam::Q8))  // q8: an odd n pads one token
    block_int8_rt<4, 2>(pl, st, r0, rc, acts, n, y, y_stride, j0);
  else if (n > 1 && n % 4 == 0)
    block_int8_rt<4, 4>(pl, st, r0, rc, acts, n, y, y_stride, j0);
  else if (n > 1)
    block_int8_rt<4, 3>(pl, st, r0, rc, acts, n, y, y_stride, j0);
  else if (pl.fam == Fam::Q8)
    block_int8_rt<1, 1>(pl, st, r0, rc, acts, n, y, y_stride, j0);
  else
    block_int8_rt<4, 1>(pl, st, r0, rc, acts, n, y, y_stride, j0);
}

/// One product of a run: Y[i·y_stride + j] = row (row_begin + j) · X[i] for j < row_count, i < n,
/// with its quantized activations (int8 path).
struct Job {
  const Plan* pl;
  uint64_t row_begin, row_count;
  const float* x;
  size_t n;
  float* y;
  size_t y_stride;
  ActSet acts;
  uint64_t nblocks() const { return (row_count + kRowBlock - 1) / kRowBlock; }
};

/// q1s: block b of nb checks entries [b·per, (b+1)·per] (each slice overlaps the next by one, so
/// every adjacent pair is compared once): index < rows·cols and strictly ascending; problems go to
/// pl.q1s_bad. O(count / nb) per block — the tensor's entries are read once per call in all.
void check_q1s_slice(const Plan& pl, uint64_t b, uint64_t nb) {
  const quant::Q1sView& v = pl.q1s;
  const uint64_t per = (uint64_t{v.count} + nb - 1) / nb, n = pl.rows * pl.cols;
  const uint64_t lo = std::min<uint64_t>(v.count, b * per), hi = std::min<uint64_t>(v.count, lo + per + 1);
  int bad = 0;
  for (uint64_t e = lo; e < hi; ++e) {
    const uint32_t idx = v.index(static_cast<uint32_t>(e));
    if (idx >= n) bad |= 2;
    if (e > lo && idx <= v.index(static_cast<uint32_t>(e - 1))) bad |= 1;
  }
  if (bad) pl.q1s_bad->fetch_or(bad, std::memory_order_relaxed);
}

/// Block b (rows row_begin + 16b …) of job j, on the calling thread, which runs the job's blocks
/// b … b + ahead − 1 next (ahead ≥ 1; prep_tp computes their ladders together).
void run_block(const Job& j, size_t b, size_t ahead, BlockState& st) {
  const Plan& pl = *j.pl;
  if (pl.t == DType::Q1S && !pl.q1s_checked) check_q1s_slice(pl, b, j.nblocks());
  const ActSet& acts = j.acts;
  const float* x = j.x;
  const size_t n = j.n, y_stride = j.y_stride;
  float* y = j.y;
  const bool is_tp = pl.t == DType::Q4TP || pl.t == DType::Q2TP;
  const bool floatw = quant::is_float_dtype(pl.t);
  const uint64_t j0 = b * kRowBlock, rc = std::min<uint64_t>(kRowBlock, j.row_count - j0);
  const uint64_t r0 = j.row_begin + j0;
  if (is_tp) prep_tp(pl, r0, rc, std::min<uint64_t>(ahead * kRowBlock, j.row_count - j0), st);
  if (pl.int8) {
    block_int8(pl, st, r0, rc, acts, n, y, y_stride, j0);
    if (pl.t == DType::Q1T)
      simd_detail::add_q1t_overlay(pl.q1t, pl.name, pl.cols, r0, rc, x, n, y, y_stride, j0);
    // an entry out of order → finish_q1s redoes the call
    if (pl.t == DType::Q1S &&
        !simd_detail::add_q1s_outliers(pl.q1s, pl.p, pl.gpr, pl.cols, r0, rc, x, n, y, y_stride, j0))
      pl.q1s_bad->fetch_or(1, std::memory_order_relaxed);
  } else if (floatw && n >= simd_detail::kGemmExactMinRows) {  // many tokens: the register-tiled GEMM
    const uint64_t esz = pl.t == DType::F32 ? 4 : 2;
    simd_detail::gemm_exact_avx512(pl.t, pl.p + esz * r0 * pl.cols, rc, pl.cols, x, n, y, y_stride, j0);
  } else if (floatw && n > 1) {
    constexpr int ER = 2, ET = 2;
    switch (pl.t) {
      case DType::F32:
        block_exact_rt<ER, ET, LdF32>([&](uint64_t k) { return LdF32{pl.p + 4 * (r0 + k) * pl.cols}; }, rc, x,
                                      pl.cols, n, y, y_stride, j0);
        break;
      case DType::F16:
        block_exact_rt<ER, ET, LdF16>([&](uint64_t k) { return LdF16{pl.p + 2 * (r0 + k) * pl.cols}; }, rc, x,
                                      pl.cols, n, y, y_stride, j0);
        break;
      default:
        block_exact_rt<ER, ET, LdBF16>([&](uint64_t k) { return LdBF16{pl.p + 2 * (r0 + k) * pl.cols}; }, rc,
                                       x, pl.cols, n, y, y_stride, j0);
        break;
    }
  } else if ((pl.t == DType::Q8Row || pl.t == DType::Q8_2F) && n > 1 &&
             n < simd_detail::kGemmExactMinRows) {  // q8 rows decoded in registers
    block_exact_rt<2, 2, LdQ8>([&](uint64_t k) { return q8_loader(pl, r0 + k); }, rc, x, pl.cols, n, y,
                               y_stride, j0);
  } else if (floatw || n == 1) {
    grow(st.rowbuf, pl.cols);
    for (uint64_t k = 0; k < rc; ++k)
      for (size_t i = 0; i < n; ++i)
        y[i * y_stride + j0 + k] = row_exact(pl, st, r0 + k, k, x + i * pl.cols, st.rowbuf.data());
  } else {
    // Batched exact: decode the block's rows once, then apply them to every token.
    grow(st.rowbuf, rc * pl.cols);
    for (uint64_t k = 0; k < rc; ++k) decode_row(pl, st, r0 + k, k, st.rowbuf.data() + k * pl.cols);
    const float* rb = st.rowbuf.data();
    if (n >= simd_detail::kGemmExactMinRows)  // decode_row gives the values the q8 register decoder does
      return simd_detail::gemm_exact_avx512(DType::F32, reinterpret_cast<const uint8_t*>(rb), rc, pl.cols, x,
                                            n, y, y_stride, j0);
    block_exact_rt<2, 2, LdF32>(
        [&](uint64_t k) { return LdF32{reinterpret_cast<const uint8_t*>(rb + k * pl.cols)}; }, rc, x, pl.cols,
        n, y, y_stride, j0);
  }
}

/// Runs the jobs' row blocks as one parallel_for (one hand-off to the pool for all of them).
void run(std::span<const Job> jobs, ThreadPool& pool) {
  uint64_t total = 0;
  for (const Job& j : jobs) total += j.nblocks();
  pool.parallel_for(total, [&](size_t b0, size_t b1) {
    BlockState& st = block_state();
    st.lad_pl = nullptr;  // ladders kept from another run may be of another tensor at the same address
    size_t ji = 0;
    uint64_t base = 0;  // first global block of jobs[ji]
    for (size_t b = b0; b < b1; ++b) {
      while (b >= base + jobs[ji].nblocks()) base += jobs[ji++].nblocks();
      run_block(jobs[ji], b - base, std::min<uint64_t>(b1, base + jobs[ji].nblocks()) - b, st);
    }
  });
}

/// After a run: a q1s job whose blocks found an index ≥ rows·cols throws the layout's Parse error
/// (quant::q1s_view with the full check names the entry); one whose indices are not strictly
/// ascending (legal: later duplicates win) is recomputed by the reference, which applies the
/// overwrite semantics — the kernels' binary search needs the order.
void finish_q1s(const Job& j, ThreadPool& pool) {
  const Plan& pl = *j.pl;
  if (pl.t != DType::Q1S) return;
  const int bad = pl.q1s_bad->load();
  if (bad & 2) (void)quant::q1s_view(pl.w->shape, pl.w->payload, pl.name);
  if (bad == 0) return;
  if (j.n == 1)
    matvec_rows_ref(*pl.w, j.row_begin, j.row_count, j.x, j.y, pool);
  else
    matmul_ref(*pl.w, j.x, j.n, j.y, pool);  // batched jobs cover every row (y_stride = rows)
}

/// Y[i·y_stride + j] = row (row_begin + j) · X[i] for j < row_count, i < n.
void run(const Plan& pl, uint64_t row_begin, uint64_t row_count, const float* x, size_t n, float* y,
         size_t y_stride, ThreadPool& pool) {
  Job j{&pl, row_begin, row_count, x, n, y, y_stride, {}};
  if (pl.int8) j.acts = quantize_all(pl, x, n, pool);
  run(std::span<const Job>(&j, 1), pool);
  finish_q1s(j, pool);
}

}  // namespace

void simd_detail::q8_2f_columns_avx512(const uint8_t* p, uint64_t n, float* out) {
  f16_row_to_f32(p, n, out);
}

void matvec_rows_simd(const WeightView& w, uint64_t row_begin, uint64_t row_count, const float* x, float* y,
                      ThreadPool& pool, bool exact) {
  Plan pl;
  const bool ok = make_plan(w, exact, pl);
  if (row_begin > pl.rows || row_count > pl.rows - row_begin)
    fail(ErrorKind::Bounds, "tensor '{}': rows [{}, {}) outside [0, {})", w.name, row_begin,
         row_begin + row_count, pl.rows);
  if (!ok) return matvec_rows_ref(w, row_begin, row_count, x, y, pool);
  run(pl, row_begin, row_count, x, 1, y, row_count, pool);
}

void matmul_simd(const WeightView& w, const float* x, size_t n, float* y, ThreadPool& pool, bool exact) {
  Plan pl;
  if (!make_plan(w, exact, pl)) return matmul_ref(w, x, n, y, pool);
  run(pl, 0, pl.rows, x, n, y, pl.rows, pool);
}

void matmul_multi_simd(std::span<const WeightView* const> ws, const float* x, size_t n,
                       std::span<float* const> ys, ThreadPool& pool, bool exact) {
  if (ws.size() != ys.size())
    fail(ErrorKind::InvalidArgument, "matmul_multi: {} weights but {} outputs", ws.size(), ys.size());
  if (ws.size() > kMaxMulti) {  // more products than scratch slots: one call each
    for (size_t i = 0; i < ws.size(); ++i) matmul_simd(*ws[i], x, n, ys[i], pool, exact);
    return;
  }
  std::array<Plan, kMaxMulti> plans;
  std::array<Job, kMaxMulti> jobs;
  size_t nj = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    if (!make_plan(*ws[i], exact, plans[nj], nj)) {
      matmul_ref(*ws[i], x, n, ys[i], pool);  // a layout only the reference handles (as matmul_simd)
      continue;
    }
    if (nj > 0 && plans[nj].cols != plans[0].cols)
      fail(ErrorKind::InvalidArgument, "matmul_multi: tensor '{}' has {} columns, '{}' has {}", ws[i]->name,
           plans[nj].cols, ws[0]->name, plans[0].cols);
    Job& j = jobs[nj];
    j = Job{&plans[nj], 0, plans[nj].rows, x, n, ys[i], plans[nj].rows, {}};
    if (plans[nj].int8) {
      // products of one activation in the same layout share its quantization (q/k/v, gate/up);
      // q8_2f folds its own column field into it
      const auto same = [&](size_t k) {
        return plans[k].int8 && plans[k].fam == plans[nj].fam && plans[k].t != DType::Q8_2F &&
               plans[nj].t != DType::Q8_2F;
      };
      size_t k = 0;
      while (k < nj && !same(k)) ++k;
      j.acts = k < nj ? jobs[k].acts : quantize_all(plans[nj], x, n, pool, nj);
    }
    ++nj;
  }
  run(std::span<const Job>(jobs.data(), nj), pool);
  for (size_t i = 0; i < nj; ++i) finish_q1s(jobs[i], pool);
}

}  // namespace cortiq::kernels

#endif  // x86
