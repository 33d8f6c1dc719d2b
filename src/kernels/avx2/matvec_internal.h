// Internals of the AVX2 / FMA / F16C matrix kernels (src/kernels/avx2/*.cc), private to them: the
// parsed tensor (Plan), per-thread block state, the int8 activation families and their quantized
// form, and the entry points by which the driver (matvec_driver.cc) reaches each codec family's
// tiles (q8.cc, nibble.cc, lowbit.cc, vbit.cc), the activation quantizer (quantize_act.cc) and the
// exact f32 path (exact.cc). The public contract, with the arithmetic and error bounds of both
// paths, is kernels/simd_avx2.h.
//
// Every function that uses AVX2 intrinsics carries CQ_AVX2 (a `target` attribute) and is only
// reached after avx2_cpu_ok() checked the CPU with __builtin_cpu_supports.
#pragma once
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc

// GCC 12 reports its own _mm256_undefined_* placeholders inside the intrinsic headers as
// uninitialized (a known false positive); silenced for the files that include this header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "kernels/simd_avx2.h"
#include "kernels/simd_common.h"
#include "kernels/weight_plan.h"
#include "quant/codec.h"
#include "quant/layout.h"
#include "util/error.h"
#include "util/half.h"

#define CQ_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace cortiq::kernels::avx2_detail {

using quant::DType;

using simd_detail::exp2_f16_table;
using simd_detail::grow;
using simd_detail::kRowBlock;
using simd_detail::LineVec;
using simd_detail::prefetch_distance;

inline void prefetch(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
}

/// Fixed-order horizontal sum of 8 lanes: (l_i + l_{i+4}), then (0+2, 1+3), then the last pair.
CQ_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// ---------------------------------------------------------------------------------------------
// Plan: the parsed tensor

/// Activation layout family of the int8 path (one per weight-code arrangement).
enum class Fam : uint8_t {
  // natural column order; weights are signed bytes (|w| × sign(q, w) trick). The quantization blocks
  // are lane blocks: blocks of 32 columns are taken 8 at a time (a chunk, 256 columns) and lane j's
  // block is the chunk's columns 32b + 4j … 32b + 4j + 3 — what _mm256_madd_epi16 sums into int32
  // lane j — so a chunk gets one convert and FMA (quantize_act_q8, tile_q8).
  Q8,
  NIB,  // per 32-block [x0, x2, …, x30 | x1, x3, …, x31] to match [low nibbles | high nibbles]
  // per 32-block natural order; lane bias −Σq. q1: u8 = 2·bit (a lane is Σ (2·bit − 1)·q); q1t: u8 =
  // value + 1 ∈ {0, 1, 2} (a lane is Σ value·q)
  Q1,
  // superblocks of 4 blocks (128 columns) in 4 planes of 32 bytes: plane j, bytes 8g … 8g + 7 =
  // columns 32g + 4k + j (k = 0 … 7) of block g — the 2-bit field j of q2tp weight byte k of group g.
  // u8 = 2·code, lane bias −3·Σq, 8 lane scales d_b/2 (lanes 2g, 2g + 1 belong to block g).
  Q2,
};

struct Plan {
  const WeightView* w = nullptr;
  DType t = DType::F32;
  uint64_t rows = 0, cols = 0, gpr = 0;
  const uint8_t* p = nullptr;
  const uint8_t* scales = nullptr;      // q8_row/q8_2f: row scales; q4_block: scale plane
  const float* bases = nullptr;         // q4tp/q2tp: prepared ladder bases (tp_bases), or null
  const float* col = nullptr;           // q8_2f: decoded column field (caller scratch)
  quant::TpView tp;                     // q4tp / q2tp
  quant::Q1sView q1s;                   // q1s: q1 base tiles at p, outlier entries
  quant::Q1tView q1t;                   // q1t: rows unchecked (decode_row_native checks each row)
  const quant::VBitView* vb = nullptr;  // vbit / vbit_ro: widths, scales, row offsets (scratch or plan)
  Fam fam = Fam::Q8;
  bool int8 = false;       // int8 path in use
  uint64_t row_bytes = 0;  // stride of one row in the main weight plane (prefetch distance unit)
};

/// Per-thread state of one block of ≤ kRowBlock rows.
struct BlockState {
  float lad[kRowBlock][32];  // q4tp/q2tp ladders of the block's rows
  // int8 group scales, row i at gs[i·gs_stride + g]: q2tp (0 past gpr), q4_tiled / q4_block matmul (f32
  // copies of the f16 scales)
  LineVec<float> gs;
  uint64_t gs_stride = 0;  // q2tp: gpr rounded up to 8; q4_tiled / q4_block: gpr
  LineVec<float> rowbuf;   // decoded rows (exact path, quantized codecs)
  LineVec<int8_t> wq;      // vbit int8 matmul: the block's rows as signed bytes w = u − Lp (tile_vbit)
  bool wq_ready = false;   // wq holds the current block's rows (unpack_vbit_rows)
};
/// The calling thread's BlockState (thread_local).
BlockState& block_state();

// ---------------------------------------------------------------------------------------------
// int8 path: quantized activations

/// Superblocks of 32 columns per Fam::Q8 chunk (one lane block of 32 columns per int32 lane).
constexpr uint64_t kQ8Chunk = 8;

/// Quantized activations of n tokens, per token xs int8 (family layout), ds f32 scales and bs int32
/// lane biases: NIB, Q1: nb blocks of 32 int8, one scale per block (ds = nb) and 8 lane biases per
/// block (−8·Σq, −Σq); Q8: 8 lane scales per chunk (ds = 8·⌈nb/8⌉), no bias; Q2: ⌈nb/4⌉ superblocks
/// of 128 int8, 8 lane scales and 8 lane biases (−3·Σq) each.
/// One token's quantized activation (pointers into an ActSet).
struct QAct {
  const int8_t* xq;
  const float* d;
  const int32_t* bias;
};
struct ActSet {
  uint64_t xs = 0, ds = 0, bs = 0;
  const int8_t* xq = nullptr;
  const float* d = nullptr;
  const int32_t* bias = nullptr;
  /// Token i's activation.
  QAct at(size_t i) const { return {xq + i * xs, d + i * ds, bias + i * bs}; }
};

/// a's T token activations copied into `out` through an empty asm, so that the tile's loop sees T
/// unrelated base pointers. Inlined into block_tiles, the tile otherwise sees every base as
/// acts.xq + i·xs (and so on) and GCC's induction-variable choice derives one token's addresses from
/// another's inside the loop (subtractions, bases reloaded from the stack: q1 int8 matmul 2×4 measured
/// 1.26× main's instructions, 1.02× with this). No value changes: the pointers are the same.
template <int T>
inline void opaque_acts(const QAct* a, QAct (&out)[T]) {
  for (int t = 0; t < T; ++t) {
    out[t] = a[t];
    asm("" : "+r"(out[t].xq), "+r"(out[t].d), "+r"(out[t].bias));
  }
}

/// q4tp / q2tp: the 40 code bits of groups g..g+7 (g % 8 == 0) of row r, LSB-first (fewer at the row end).
inline uint64_t code_window(const Plan& pl, uint64_t r, uint64_t g) {
  const uint64_t off = 5 * (g / 8);
  const uint8_t* c = pl.tp.row_codes(r) + off;
  if (off + 5 <= pl.tp.code_row_bytes) return load_le<uint32_t>(c) | uint64_t{c[4]} << 32;
  uint64_t v = 0;
  for (uint64_t k = 0; off + k < pl.tp.code_row_bytes; ++k) v |= uint64_t{c[k]} << (8 * k);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Entry points between the files

/// Quantizes x[cols] (times col[c] when col != nullptr) per 32-column block into family f's layout
/// (quantize_act.cc): xq int8, d f32 scales, bias int32 lane biases, sized as the driver's ActSet says.
CQ_AVX2 void quantize_act(Fam f, const float* x, const float* col, uint64_t cols, int8_t* xq, float* d,
                          int32_t* bias);

/// Ladders of rows [r0, r0+rc) into st.lad (q4tp/q2tp; no-op otherwise), bit-identical to
/// quant::q4tp_ladder / q2tp_ladder (matvec_driver.cc).
CQ_AVX2 void set_ladders(const Plan& pl, BlockState& st, uint64_t r0, uint64_t rc);

/// Whether exact.cc decodes this plan's rows natively (else the caller passes a quant::RowDecoder).
bool native_decode(const Plan& pl);

/// The exact path of one row block (exact.cc): Y[i·y_stride + j0 + k] = row (r0 + k) · X[i] for
/// k < rc, i < n with f32 activations, every weight decoded to its reference value; `dec` decodes the
/// rows of the plans native_decode refuses (null otherwise).
CQ_AVX2 void block_exact(const Plan& pl, BlockState& st, uint64_t r0, uint64_t rc, const float* x, size_t n,
                         float* y, size_t y_stride, uint64_t j0, const quant::RowDecoder* dec);

/// vbit int8 matmul: rows [r0, r0+rc) unpacked once into st.wq (vbit.cc), so that T-token tiles reuse
/// them; sets st.wq_ready.
CQ_AVX2 void unpack_vbit_rows(const Plan& pl, BlockState& st, uint64_t r0, uint64_t rc);

// int8 path: register tiles of R weight rows × T tokens. Each weight block is loaded once and applied to T
// tokens; every output is computed with the same sequence of operations whatever R and T are (one 8-lane f32
// accumulator per output, one FMA per 32-column block, then hsum), so matvec (T = 1) and matmul (T > 1)
// results are bit-identical. rows[k]: tensor row, li[k]: block-local index, out[k·T + t]: Σ for row k and
// token t.
//
// Each codec family's file defines its tiles (file-local) and exports the row-block loop over them,
// block_<family><R, T> (block_tiles with the family's tile, so that the tile inlines into the loop; a
// tile called across files measured 15–30 % slower in the AVX-512 tier), instantiated there for every
// shape of CQ_AVX2_TILE_SHAPES; the driver's block_int8 picks the family and the shape.

/// The (R, T) tile shapes block_int8 uses; X(R, T) for each.
#define CQ_AVX2_TILE_SHAPES(X) X(1, 1) X(2, 2) X(2, 4) X(4, 1) X(4, 2)

// block_tiles: the row-block loop over Tile::run<R, T>, the same text as the AVX-512 tier's (simd_common.h).
CQ_DEFINE_BLOCK_TILES(CQ_AVX2)

/// Tile with its activations passed through opaque_acts; with MultiOnly, in the T > 1 (matmul) shapes only.
/// Each family picks what measured fewer instructions per call than the one-file tier's (the driver's
/// shapes: q8 1×1 / 2×2, nibble 4×1 / 2×2, q2tp 4×1 / 4×2, q1 4×1 / 2×4; callgrind, 4864×896).
template <class Tile, bool MultiOnly = true>
struct OpaqueActsTile {
  template <int R, int T>
  CQ_AVX2 static void run(const Plan& pl, const BlockState& st, const uint64_t* rows, const uint64_t* li,
                          const QAct* a, float* out) {
    if constexpr (MultiOnly && T == 1) {
      Tile::template run<R, T>(pl, st, rows, li, a, out);
    } else {
      QAct at[T];
      opaque_acts<T>(a, at);
      Tile::template run<R, T>(pl, st, rows, li, at, out);
    }
  }
};

/// What each family's block_<family> runs: block_tiles, with n = 1 a constant in the T == 1 shapes,
/// which serve matvecs only (the driver's block_int8 picks them for n == 1 alone) — what GCC made of
/// the loop by constant propagation when the tier was one file (without it q8_row int8 matvec measured
/// up to 17 % slower).
template <int R, int T, class Tile>
CQ_AVX2 inline void block_rows(const Plan& pl, const BlockState& st, uint64_t r0, uint64_t rc,
                               const ActSet& acts, size_t n, float* y, size_t y_stride, uint64_t j0) {
  if constexpr (T == 1)
    block_tiles<R, 1, Tile>(pl, st, r0, rc, acts, size_t{1}, y, y_stride, j0);
  else
    block_tiles<R, T, Tile>(pl, st, r0, rc, acts, n, y, y_stride, j0);
}

/// The signature every family's row-block loop shares.
#define CQ_AVX2_BLOCK_ARGS                                                                                \
  const Plan &pl, const BlockState &st, uint64_t r0, uint64_t rc, const ActSet &acts, size_t n, float *y, \
      size_t y_stride, uint64_t j0

/// q8_row / q8_2f (q8.cc).
template <int R, int T>
CQ_AVX2 void block_q8(CQ_AVX2_BLOCK_ARGS);
/// q4_tiled, q4_block, q4tp (nibble.cc; D is the dtype).
template <DType D, int R, int T>
CQ_AVX2 void block_nib(CQ_AVX2_BLOCK_ARGS);
/// q2tp (lowbit.cc).
template <int R, int T>
CQ_AVX2 void block_q2(CQ_AVX2_BLOCK_ARGS);
/// q1 / q1s's base (lowbit.cc).
template <int R, int T>
CQ_AVX2 void block_q1(CQ_AVX2_BLOCK_ARGS);
/// q1t's base (lowbit.cc).
template <int R, int T>
CQ_AVX2 void block_q1t(CQ_AVX2_BLOCK_ARGS);
/// vbit / vbit_ro (vbit.cc).
template <int R, int T>
CQ_AVX2 void block_vbit(CQ_AVX2_BLOCK_ARGS);

}  // namespace cortiq::kernels::avx2_detail

#endif  // x86
