// The q4tp / q2tp row ladders of the AVX-512 tier: each row's 32 rungs exp2(lo)·exp2(step)^c in
// f32 (as quant::q4tp_ladder), computed 16 rows per vector, and each tile's group scale picked from
// its row's ladder by its 5-bit code (prep_tp, once per row block). Included by the driver
// (matvec_driver.cc) only — so prep_tp, not inline, is defined once — and compiled with it, as in
// the one-file tier: as a .cc of its own, or with prep_tp file-local (which the compiler then
// specializes), q4tp matvec 4864×896 int8 measured 113 → 125 µs (1 thread, min of 20).
#pragma once
#if defined(__x86_64__) || defined(__i386__)  // other CPUs: simd_portable.cc
#include "kernels/avx512/matvec_internal.h"

namespace cortiq::kernels::avx512_detail {

// The steps of prep_tp, file-local.
namespace {

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

}  // namespace

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

}  // namespace cortiq::kernels::avx512_detail

#endif  // x86
