// The SIMD attention algorithm for one query position, written once over a vector-traits type V; the
// tiers (attention_avx512.cc: attention_simd, attention_avx2.cc: attention_avx2) instantiate it. The
// contracts and error bounds are in simd_attention.h and simd_avx2_attention.h.
//
// Include this header from exactly one tier .cc, after defining CQ_ATTN_TARGET as that tier's target
// attribute (e.g. CQ_AVX512): every function here carries it, so GCC and clang inline the traits'
// intrinsics into it; the definitions are in an anonymous namespace, each tier's file gets its own.
// No intrinsics appear here: a new tier (NEON) is a traits type and a thin .cc.
//
// V provides (static members, with the tier's target attribute where they use intrinsics; `reg` holds
// V::lanes f32 lanes, `mask` a lane subset):
//   lanes, head_tile (query heads sharing one pass over V; bounded by the register file:
//   head_tile × 2 chunks accumulators);
//   zero(), set1(f), add, sub, mul, max, fmadd(a, b, c) = a·b + c (one rounding), exp (e^x per lane);
//   load(const float*), load_f16(const uint16_t*) (full vectors), load_part / load_part_f16(p, n):
//   the first n (1..lanes−1) elements, other lanes zero, nothing past p + n read; store(p, v),
//   store_part(p, v, n) (first n lanes); first(n): mask of lanes < min(n, lanes); select(m, a, b):
//   a where m else b; hsum (fixed lane tree), hmax; transpose_sum(acc[lanes]): lane i = Σ lanes of
//   acc[i] by a fixed tree.
//
// Work order, for each requested kv head (all of its query heads together, so every K and V row is
// read from memory once per group, V once per tile of ≤ head_tile query heads):
//  1. scores: keys in blocks of `lanes` (f16 blocks, blocks of a head_dim that is not a multiple of
//     lanes and the ragged last block are first widened into a zero-padded f32 scratch block that stays
//     in L1 for all query heads of the group); per query head, `lanes` f32 FMA accumulators (one per
//     key, `lanes` dims per step) are reduced by V::transpose_sum into one vector of scores;
//     s = f32(scale·(q·k)); optional softcap s ← c·tanh(s/c) (scalar, double tanh, as the reference);
//  2. softmax: m = max s, e_j = V::exp(s_j − m), Σe in `lanes` f32 lanes + V::hsum;
//  3. out = (Σ_j e_j·v_j)·(1/Σe): V rows streamed once per tile of ≤ head_tile query heads, two chunks
//     of `lanes` dims at a time, f32 FMA, one sequential accumulation over keys per output.
// Every head's arithmetic depends only on that head's q, the keys and the values, never on which other
// heads share the call (or the tile they land in), so results are bit-identical for any kv-head split,
// dead-head pattern of other heads, and thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/kernels.h"
#include "util/line_vec.h"

#ifndef CQ_ATTN_TARGET
#error "define CQ_ATTN_TARGET (the including tier's target attribute) before including attention_tiles.h"
#endif

namespace cortiq::kernels::attention_tiles {
namespace {

/// Reads the first n ≥ 1 elements of a K/V row at element index idx (f32 or f16) into a vector, lanes
/// ≥ n zero; n ≥ lanes is a plain vector load.
template <class V, bool F16>
CQ_ATTN_TARGET inline typename V::reg load_row(const void* base, size_t idx, size_t n) {
  if constexpr (F16) {
    const uint16_t* p = static_cast<const uint16_t*>(base) + idx;
    return n >= V::lanes ? V::load_f16(p) : V::load_part_f16(p, n);
  } else {
    const float* p = static_cast<const float*>(base) + idx;
    return n >= V::lanes ? V::load(p) : V::load_part(p, n);
  }
}

/// Stores the first n ≥ 1 lanes of v at p.
template <class V>
CQ_ATTN_TARGET inline void store_row(float* p, typename V::reg v, size_t n) {
  if (n >= V::lanes) {
    V::store(p, v);
  } else {
    V::store_part(p, v, n);
  }
}

/// Dot products of one query head (zero-padded to lanes·nch) with `lanes` keys (rows at k + i·stride,
/// lanes·nch readable floats each): lane i = Σ_d q_d·k_id.
template <class V>
CQ_ATTN_TARGET inline typename V::reg dot_keys(const float* q, const float* k, size_t stride, size_t nch) {
  constexpr size_t L = V::lanes;
  // every index into a is a compile-time constant after unrolling, so the accumulators stay in registers
  typename V::reg a[L];
#pragma GCC unroll 16
  for (size_t i = 0; i < L; ++i) a[i] = V::zero();
  for (size_t c = 0; c < nch; ++c) {
    const typename V::reg qc = V::load(q + L * c);
    const float* kc = k + L * c;
#pragma GCC unroll 16
    for (size_t i = 0; i < L; ++i) a[i] = V::fmadd(qc, V::load(kc + i * stride), a[i]);
  }
  return V::transpose_sum(a);
}

/// V pass for NT query heads and NC (1 or 2) chunks of `lanes` dims starting at dim d0:
/// o_h[d] = inv_h · Σ_j e_h[j]·v_j[d]. `e[t]` points at head t's weights, `o[t]` at its output row.
/// FULL: every chunk is `lanes` dims wide (no partial loads in the key loop).
template <class V, int NT, int NC, bool F16, bool FULL>
CQ_ATTN_TARGET void v_tile(const void* vbase, size_t row0, size_t hd, size_t nk, size_t d0,
                           const float* const* e, const float* inv, float* const* o) {
  constexpr size_t L = V::lanes;
  const size_t n0 = std::min(hd - d0, L);
  const size_t n1 = NC > 1 ? std::min(hd - d0 - L, L) : 0;
  // every index into acc is a compile-time constant after unrolling, so GCC keeps it in registers
  typename V::reg acc[NT][NC];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    acc[t][0] = V::zero();
    if constexpr (NC > 1) acc[t][1] = V::zero();
  }
  for (size_t j = 0; j < nk; ++j) {
    const size_t idx = (row0 + j) * hd + d0;
    const typename V::reg v0 = load_row<V, F16>(vbase, idx, FULL ? L : n0);
    typename V::reg v1 = v0;
    if constexpr (NC > 1) v1 = load_row<V, F16>(vbase, idx + L, FULL ? L : n1);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const typename V::reg w = V::set1(e[t][j]);
      acc[t][0] = V::fmadd(w, v0, acc[t][0]);
      if constexpr (NC > 1) acc[t][1] = V::fmadd(w, v1, acc[t][1]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    const typename V::reg s = V::set1(inv[t]);
    store_row<V>(o[t] + d0, V::mul(acc[t][0], s), n0);
    if constexpr (NC > 1) store_row<V>(o[t] + d0 + L, V::mul(acc[t][1], s), n1);
  }
}

/// The V pass of NT heads over all dims. Not inlined: in its own function GCC keeps the key loop's
/// pointers and row stride in registers (inlined into attention_group, it reloaded the stride from the
/// stack every key).
template <class V, int NT, bool F16>
__attribute__((noinline)) CQ_ATTN_TARGET void v_heads(const void* vbase, size_t row0, size_t hd, size_t nk,
                                                      const float* const* e, const float* inv,
                                                      float* const* o) {
  constexpr size_t L = V::lanes;
  for (size_t d0 = 0; d0 < hd; d0 += 2 * L) {
    const size_t rest = hd - d0;
    if (rest >= 2 * L) {
      v_tile<V, NT, 2, F16, true>(vbase, row0, hd, nk, d0, e, inv, o);
    } else if (rest > L) {
      v_tile<V, NT, 2, F16, false>(vbase, row0, hd, nk, d0, e, inv, o);
    } else if (rest == L) {
      v_tile<V, NT, 1, F16, true>(vbase, row0, hd, nk, d0, e, inv, o);
    } else {
      v_tile<V, NT, 1, F16, false>(vbase, row0, hd, nk, d0, e, inv, o);
    }
  }
}

/// v_heads for nt (1..V::head_tile) heads: NT is a template parameter, so the tile of the last heads of
/// a group is compiled for its width too.
template <class V, bool F16, int NT = 1>
CQ_ATTN_TARGET void v_dispatch(size_t nt, const void* vbase, size_t row0, size_t hd, size_t nk,
                               const float* const* e, const float* inv, float* const* o) {
  if constexpr (NT < V::head_tile) {
    if (nt > NT) return v_dispatch<V, F16, NT + 1>(nt, vbase, row0, hd, nk, e, inv, o);
  }
  v_heads<V, NT, F16>(vbase, row0, hd, nk, e, inv, o);
}

/// Widens `nb` K rows (row indices row0.., f32 or f16) into `dst` (`lanes` rows of hdp floats, zero
/// padded: dims ≥ hd and rows ≥ nb are 0).
template <class V>
CQ_ATTN_TARGET void stage_keys(const KvLayerView& kv, size_t row0, size_t nb, size_t hd, size_t hdp,
                               float* dst) {
  for (size_t i = 0; i < V::lanes; ++i) {
    float* r = dst + i * hdp;
    if (i >= nb) {
      std::fill(r, r + hdp, 0.0f);
      continue;
    }
    const size_t base = (row0 + i) * hd;
    for (size_t d = 0; d < hd; d += V::lanes) {
      const size_t n = hd - d;
      const typename V::reg x =
          kv.f16 ? load_row<V, true>(kv.k, base + d, n) : load_row<V, false>(kv.k, base + d, n);
      V::store(r + d, x);  // r has hdp ≥ d + lanes floats; lanes ≥ hd are zero
    }
  }
}

struct Scratch {
  LineVec<float> q;           // [group, hdp] zero-padded query heads
  LineVec<float> kblk;        // [lanes, hdp] staged key block
  LineVec<float> sc;          // [group, nkp] scores, then exp weights
  LineVec<float> inv;         // [group] 1/Σe
  std::vector<size_t> alive;  // query head indices (within group) that are computed
  std::vector<const float*> e;
  std::vector<float*> o;
};

template <class V>
CQ_ATTN_TARGET void attention_group(const float* q, const KvLayerView& kv, size_t key_begin, size_t nk,
                                    const AttentionParams& p, const uint8_t* head_alive, float* out, size_t g,
                                    size_t group, Scratch& s) {
  using reg = typename V::reg;
  constexpr size_t L = V::lanes;
  const size_t hd = p.head_dim, hdp = (hd + L - 1) / L * L, nch = hdp / L;
  const size_t nkp = (nk + L - 1) / L * L;
  s.alive.clear();
  for (size_t i = 0; i < group; ++i) {
    const size_t h = g * group + i;
    if ((head_alive && !head_alive[h]) || nk == 0) {
      std::fill(out + h * hd, out + (h + 1) * hd, 0.0f);
    } else {
      s.alive.push_back(i);
    }
  }
  const size_t na = s.alive.size();
  if (na == 0) return;
  grow(s.q, na * hdp);
  grow(s.kblk, L * hdp);
  grow(s.sc, na * nkp);
  grow(s.inv, na);
  grow(s.e, na);
  grow(s.o, na);
  for (size_t a = 0; a < na; ++a) {
    const float* qh = q + (g * group + s.alive[a]) * hd;
    std::copy(qh, qh + hd, s.q.data() + a * hdp);
    std::fill(s.q.data() + a * hdp + hd, s.q.data() + (a + 1) * hdp, 0.0f);
  }
  const size_t row0 = g * kv.capacity + key_begin;  // K/V row of key 0
  const reg scale = V::set1(p.scale);

  // 1. scores (a ragged last block is staged, so its padded lanes score 0 and are masked out below)
  const bool direct = !kv.f16 && hd % L == 0;
  for (size_t jb = 0; jb < nk; jb += L) {
    const size_t nb = std::min(L, nk - jb);
    const float* kp;
    size_t stride;
    if (direct && nb == L) {
      kp = static_cast<const float*>(kv.k) + (row0 + jb) * hd;
      stride = hd;
    } else {
      stage_keys<V>(kv, row0 + jb, nb, hd, hdp, s.kblk.data());
      kp = s.kblk.data();
      stride = hdp;
    }
    for (size_t a = 0; a < na; ++a) {
      const reg d = dot_keys<V>(s.q.data() + a * hdp, kp, stride, nch);
      V::store(s.sc.data() + a * nkp + jb, V::mul(d, scale));  // sc rows have nkp ≥ jb + L floats
    }
  }

  // 2. softcap + softmax numerators
  for (size_t a = 0; a < na; ++a) {
    float* sr = s.sc.data() + a * nkp;
    if (p.softcap > 0.0f) {
      for (size_t j = 0; j < nk; ++j)
        sr[j] = static_cast<float>(p.softcap * std::tanh(static_cast<double>(sr[j]) / p.softcap));
    }
    const reg neg_inf = V::set1(-INFINITY);
    reg mx = neg_inf;  // lanes past nk read −inf (the blend does not wait on mx)
    for (size_t j = 0; j < nk; j += L) mx = V::max(mx, V::select(V::first(nk - j), V::load(sr + j), neg_inf));
    const reg mv = V::set1(V::hmax(mx));
    reg sum = V::zero();
    for (size_t j = 0; j < nk; j += L) {
      const reg e = V::select(V::first(nk - j), V::exp(V::sub(V::load(sr + j), mv)), V::zero());
      V::store(sr + j, e);
      sum = V::add(sum, e);
    }
    s.inv[a] = 1.0f / V::hsum(sum);
    s.e[a] = sr;
    s.o[a] = out + (g * group + s.alive[a]) * hd;
  }

  // 3. weighted V
  for (size_t t0 = 0; t0 < na; t0 += V::head_tile) {
    const size_t nt = std::min<size_t>(V::head_tile, na - t0);
    if (kv.f16) {
      v_dispatch<V, true>(nt, kv.v, row0, hd, nk, s.e.data() + t0, s.inv.data() + t0, s.o.data() + t0);
    } else {
      v_dispatch<V, false>(nt, kv.v, row0, hd, nk, s.e.data() + t0, s.inv.data() + t0, s.o.data() + t0);
    }
  }
}

/// The tier's `attention` (contract: attention_ref in kernels.h; scratch thread_local, grow-only).
template <class V>
CQ_ATTN_TARGET void attention(const float* q, const KvLayerView& kv, size_t key_begin, size_t key_end,
                              const AttentionParams& p, const uint8_t* head_alive, float* out,
                              size_t kv_head_begin, size_t kv_head_end) {
  if (p.n_kv_heads == 0 || p.head_dim == 0) return;
  const size_t group = p.n_heads / p.n_kv_heads;
  const size_t nk = key_end > key_begin ? key_end - key_begin : 0;
  thread_local Scratch s;
  const size_t g_end = std::min(kv_head_end, p.n_kv_heads);
  for (size_t g = kv_head_begin; g < g_end; ++g)
    attention_group<V>(q, kv, key_begin, nk, p, head_alive, out, g, group, s);
}

/// out[i] = V::exp(x[i]) for i < n (reads and writes nothing past n).
template <class V>
CQ_ATTN_TARGET void exp_rows(const float* x, size_t n, float* out) {
  for (size_t i = 0; i < n; i += V::lanes) {
    const size_t m = std::min<size_t>(n - i, V::lanes);
    store_row<V>(out + i, V::exp(load_row<V, false>(x, i, m)), m);
  }
}

}  // namespace
}  // namespace cortiq::kernels::attention_tiles
