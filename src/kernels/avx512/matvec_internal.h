// Internals of the AVX-512 / VNNI matrix kernels (src/kernels/avx512/*.cc), private to them: the
// parsed tensor (Plan), per-thread block state, the int8 activation families and their quantized
// form, and the entry points by which the driver (matvec_driver.cc) reaches each codec family's
// tiles (q8.cc, nibble.cc, lowbit.cc, vbit.cc), the activation quantizer (quantize_act.cc), the
// q4tp/q2tp ladders (tp_ladders.h) and the exact f32 path (exact.cc). The public contract is
// kernels/simd_matvec.h.
//
// Every function that uses AVX-512 intrinsics carries CQ_AVX512 (a `target` attribute) and is only
// reached after simd_cpu_ok() checked the CPU with __builtin_cpu_supports.
#pragma once
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc

// GCC 12 reports its own _mm512_undefined_* placeholders inside the intrinsic headers as
// uninitialized (a known false positive); silenced for the files that include this header.
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
#include "kernels/simd_matvec.h"
#include "kernels/weight_plan.h"
#include "quant/codec.h"
#include "quant/layout.h"
#include "util/error.h"
#include "util/half.h"

/// The q1t int8 tile also needs AVX512-VBMI (vpermi2b); reached only when simd_vbmi_ok().
#define CQ_AVX512_VBMI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma,f16c")))

namespace cortiq::kernels::avx512_detail {

using quant::DType;

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

inline QActSize qact_size(Fam f, uint64_t cols) {
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

/// The calling thread's BlockState (thread_local).
BlockState& block_state();

/// Quantizes n activation rows into caller scratch; act(i) gives token i.
struct ActSet {
  QActSize sz{};
  const int8_t* xq = nullptr;
  const float* d = nullptr;
  const int32_t* bias = nullptr;
  QAct at(size_t i) const { return {xq + i * sz.xq_bytes, d + i * sz.lanes, bias + i * sz.lanes}; }
};

/// Most tokens block_nibq_few takes at once: a decode step of up to 8 sequences; a prefill goes
/// through it 8 tokens at a time.
constexpr size_t kFewTokens = 8;
/// Rows block_nibq_few unpacks together.
constexpr int kFewRows = 4;

// ---------------------------------------------------------------------------------------------
// Entry points between the files

/// Quantizes x[cols] (times col[c] when col != nullptr) into the family layout (quantize_act.cc).
CQ_AVX512 void quantize_act(Fam f, const float* x, const float* col, uint64_t cols, int8_t* xq, float* d,
                            int32_t* bias);

/// The exact path of one row block (exact.cc): Y[i·y_stride + j0 + k] = row (r0 + k) · X[i] for
/// k < rc, i < n with f32 activations, every weight decoded to its reference value.
void block_exact(const Plan& pl, BlockState& st, uint64_t r0, uint64_t rc, const float* x, size_t n, float* y,
                 size_t y_stride, uint64_t j0);

// Register-blocked int8 tiles: R weight rows × T tokens. Each weight superblock is loaded/unpacked
// once and applied to T tokens, each activation superblock once and applied to R rows. Every output
// is computed with the same sequence of operations whatever R and T are (one f32 accumulator per
// output, fused multiply-add per superblock, then _mm512_reduce_add_ps), so matvec (T = 1) and
// matmul (T > 1) results are bit-identical. rows[k]: tensor row, li[k]: block-local index,
// out[k·T + t]: Σ for row k and token t.

//
// Each codec family's file defines its tiles (file-local) and exports the row-block loop over
// them, block_<family><R, T> (block_tiles with the family's tile, so the tile inlines into the loop
// as it did when the tier was one file: a tile called across files measured 15–30% slower on
// q4_block matvec), instantiated there for every shape of CQ_AVX512_TILE_SHAPES; the driver's
// block_int8 picks the family and the shape.

/// The (R, T) tile shapes block_int8 uses; X(R, T) for each.
#define CQ_AVX512_TILE_SHAPES(X) X(1, 1) X(2, 2) X(2, 3) X(2, 4) X(4, 1) X(4, 2) X(4, 3) X(4, 4) X(8, 1)

// block_tiles: the row-block loop over Tile::run<R, T>, the same text as the AVX2 tier's (simd_common.h).
CQ_DEFINE_BLOCK_TILES(CQ_AVX512)

/// q8_row / q8_2f (q8.cc).
template <int R, int T>
CQ_AVX512 void block_q8(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc, const ActSet& acts,
                        size_t n, float* y, size_t y_stride, uint64_t j0);
/// block_q8 without the weight prefetch, for many tokens (q8.cc): each row tile's weights are read
/// from memory once and then reused by every token tile from L1/L2, where a prefetch per row and
/// superblock only takes issue slots.
template <int R, int T>
CQ_AVX512 void block_q8_reuse(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc,
                              const ActSet& acts, size_t n, float* y, size_t y_stride, uint64_t j0);
/// q4_tiled, q4_block, q4tp (nibble.cc; D is the dtype).
template <DType D, int R, int T>
CQ_AVX512 void block_nib(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc, const ActSet& acts,
                         size_t n, float* y, size_t y_stride, uint64_t j0);
/// q2tp (lowbit.cc).
template <int R, int T>
CQ_AVX512 void block_q2(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc, const ActSet& acts,
                        size_t n, float* y, size_t y_stride, uint64_t j0);
/// q1 / q1s's base (lowbit.cc).
template <int R, int T>
CQ_AVX512 void block_q1(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc, const ActSet& acts,
                        size_t n, float* y, size_t y_stride, uint64_t j0);
/// q1t's base (lowbit.cc); needs AVX512-VBMI.
template <int R, int T>
CQ_AVX512_VBMI void block_q1t(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc,
                              const ActSet& acts, size_t n, float* y, size_t y_stride, uint64_t j0);
/// vbit / vbit_ro (vbit.cc); needs AVX512-VBMI.
template <int R, int T>
CQ_AVX512_VBMI void block_vbit(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc,
                               const ActSet& acts, size_t n, float* y, size_t y_stride, uint64_t j0);

/// Fam::NIBQ rows [r0, r0+rc) × tokens [i0, i0 + n), 1 ≤ n ≤ kFewTokens (nibble.cc; D = Q4TP or
/// Q4Block): each chunk of kFewRows rows unpacked once for all n tokens.
template <DType D>
CQ_AVX512 void block_nibq_few(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc,
                              const ActSet& acts, size_t i0, size_t n, float* y, size_t y_stride,
                              uint64_t j0);

}  // namespace cortiq::kernels::avx512_detail

#endif  // x86
