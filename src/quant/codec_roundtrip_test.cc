// encode → decode within each codec's documented bound (codec.h) on random and adversarial rows;
// NaN/±Inf and impossible shapes refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>

#include "quant/codec.h"
#include "quant/test_util.h"
#include "util/error.h"

namespace cortiq::quant {
namespace {

using Shape = std::vector<uint64_t>;

struct Case {
  std::string name;
  std::vector<float> v;
};

std::vector<Case> cases(uint64_t n) {
  std::vector<Case> cs;
  cs.push_back({"gaussian", testing::gaussian(n, 1)});
  cs.push_back({"gaussian_small", testing::gaussian(n, 2, 1e-3f)});
  cs.push_back({"zeros", std::vector<float>(n, 0.0f)});
  auto out = testing::gaussian(n, 3);
  out[5] = 1e4f;
  cs.push_back({"outlier", out});
  std::vector<float> sub(n);
  for (uint64_t i = 0; i < n; ++i) sub[i] = (i % 3 == 0 ? -1.0f : 1.0f) * 1e-40f * static_cast<float>(i % 7);
  cs.push_back({"subnormal", sub});
  auto mixed = testing::gaussian(n, 4, 100.0f);
  for (uint64_t i = 0; i < n; i += 2) mixed[i] *= 1e-4f;
  cs.push_back({"mixed_rows", mixed});
  return cs;
}

float h(const uint8_t* p) {
  return f16_to_f32(load_le<uint16_t>(p));
}

/// Allowed |error| for element e of a [rows, in] tensor, from the stored scales.
using Bound = std::function<float(const std::vector<uint8_t>&, const std::vector<float>&, uint64_t rows,
                                  uint64_t in, uint64_t e)>;

float tile_absmax(const std::vector<float>& v, uint64_t e) {
  float a = 0;
  for (uint64_t j = e / 32 * 32; j < e / 32 * 32 + 32 && j < v.size(); ++j) a = std::max(a, std::fabs(v[j]));
  return a;
}

void check_bounded(DType t, const Shape& s, const Bound& bound) {
  const uint64_t rows = s[0], in = s[1], n = rows * in;
  for (const auto& c : cases(n)) {
    const auto p = encode(t, s, c.v);
    std::vector<float> w(n);
    decode(t, s, p, w);
    for (uint64_t e = 0; e < n; ++e) {
      const float b = bound(p, c.v, rows, in, e) * (1 + 1e-6f) + 1e-7f * std::fabs(c.v[e]);
      ASSERT_LE(std::fabs(w[e] - c.v[e]), b)
          << dtype_name(t) << " " << c.name << " element " << e << " value " << c.v[e];
    }
    if (c.name == "zeros") {
      for (float x : w) ASSERT_EQ(x, 0.0f) << dtype_name(t);
    }
  }
}

TEST(RoundTrip, FloatCodecs) {
  const auto v = testing::gaussian(100, 5);
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    const auto p = encode(t, Shape{4, 25}, v);
    std::vector<float> w(100);
    decode(t, Shape{4, 25}, p, w);
    for (size_t i = 0; i < v.size(); ++i) {
      const float want = t == DType::F32   ? v[i]
                         : t == DType::F16 ? round_f16(v[i])
                                           : bf16_to_f32(f32_to_bf16(v[i]));
      ASSERT_EQ(w[i], want);
    }
  }
  // Float codecs carry Inf/NaN through, but refuse a finite value they would turn into Inf.
  std::vector<float> special{INFINITY, -INFINITY, 1.0f};
  std::vector<float> w(3);
  decode(DType::F16, Shape{3}, encode(DType::F16, Shape{3}, special), w);
  EXPECT_TRUE(std::isinf(w[0]) && std::isinf(w[1]));
  EXPECT_THROW(encode(DType::F16, Shape{1}, std::vector<float>{70000.0f}), Error);
  EXPECT_THROW(encode(DType::BF16, Shape{1}, std::vector<float>{3.4e38f}), Error);
}

TEST(RoundTrip, Q8Row) {
  check_bounded(DType::Q8Row, {6, 37}, [](auto& p, auto&, uint64_t rows, uint64_t in, uint64_t e) {
    return 0.5f * h(p.data() + rows * in + 2 * (e / in));
  });
}

TEST(RoundTrip, Q8_2F) {
  check_bounded(DType::Q8_2F, {7, 5}, [](auto& p, auto&, uint64_t rows, uint64_t in, uint64_t e) {
    const uint64_t n = rows * in;
    return 0.5f * h(p.data() + n + 2 * (e / in)) * h(p.data() + n + 2 * rows + 2 * (e % in)) * (1 + 1e-6f);
  });
}

TEST(RoundTrip, Q4Block) {
  for (Shape s : {Shape{3, 7}, Shape{4, 64}}) {
    check_bounded(DType::Q4Block, s, [](auto& p, auto&, uint64_t rows, uint64_t in, uint64_t e) {
      const uint64_t groups = (rows * in + 31) / 32;
      return 0.5f * h(p.data() + 16 * groups + 2 * (e / 32));
    });
  }
}

TEST(RoundTrip, Q4Tiled) {
  check_bounded(DType::Q4Tiled, {4, 64}, [](auto& p, auto&, uint64_t, uint64_t, uint64_t e) {
    return 0.5f * h(p.data() + 18 * (e / 32));
  });
  // Same values as q4_block, re-interleaved.
  const auto v = testing::gaussian(128, 9);
  const auto a = encode(DType::Q4Block, Shape{2, 64}, v), b = encode(DType::Q4Tiled, Shape{2, 64}, v);
  for (int g = 0; g < 4; ++g) {
    EXPECT_EQ(0, std::memcmp(a.data() + 16 * g, b.data() + 18 * g + 2, 16));
    EXPECT_EQ(0, std::memcmp(a.data() + 64 + 2 * g, b.data() + 18 * g, 2));
  }
}

// q4_tiled_to_block rebuilds q4_block's encoding from q4_tiled's, piece by piece in any order.
TEST(RoundTrip, Q4TiledToBlockInPieces) {
  const Shape s{9, 96};  // 27 groups
  const auto v = testing::gaussian(9 * 96, 10);
  const auto block = encode(DType::Q4Block, s, v), tiled = encode(DType::Q4Tiled, s, v);
  std::vector<uint8_t> out(tiled.size(), 0xAB);
  for (auto [b, e] : {std::pair<uint64_t, uint64_t>{20, 27}, {0, 5}, {5, 5}, {5, 20}})
    q4_tiled_to_block(tiled, out, b, e);
  EXPECT_EQ(out, block);
  EXPECT_THROW(q4_tiled_to_block(tiled, out, 3, 28), Error);
  EXPECT_THROW(q4_tiled_to_block(tiled, out, 4, 3), Error);
  std::vector<uint8_t> shorter(out.size() - 18);
  EXPECT_THROW(q4_tiled_to_block(tiled, shorter, 0, 1), Error);
  const std::vector<uint8_t> odd(17);
  std::vector<uint8_t> odd_out(17);
  EXPECT_THROW(q4_tiled_to_block(odd, odd_out, 0, 0), Error);
}

TEST(RoundTrip, VBitAndVBitRo) {
  for (DType t : {DType::VBit, DType::VBitRo}) {
    for (float mb : {3.0f, 4.25f, 8.0f}) {
      EncodeOptions o;
      o.mean_bits = mb;
      const Shape s{8, 64};
      for (const auto& c : cases(512)) {
        const auto p = encode(t, s, c.v, o);
        const VBitView view = vbit_view(t, s, p, "w");
        std::vector<float> w(512);
        decode(t, s, p, w);
        for (uint64_t e = 0; e < 512; ++e)
          ASSERT_LE(std::fabs(w[e] - c.v[e]), 0.5f * view.scale(e / 64, (e % 64) / 32) * (1 + 1e-6f))
              << dtype_name(t) << " " << c.name << " " << e;
      }
    }
  }
  // Width allocation: equal rows get the snapped mean; a 2^k louder row gets k more bits.
  std::vector<float> v(4 * 32, 1.0f);
  for (int i = 0; i < 32; ++i) v[32 + i] = 4.0f, v[64 + i] = 1.0f / 64, v[96 + i] = 1024.0f;
  EncodeOptions o;
  o.mean_bits = 5.0f;
  const auto p = encode(DType::VBit, Shape{4, 32}, v, o);
  // amplitudes log2: 0, 2, -6, 10 → mean 1.5 → targets 3.5, 5.5, -2.5, 13.5 → 3 (tie low), 5, 3, 8.
  EXPECT_EQ(p[0], 3);
  EXPECT_EQ(p[1], 5);
  EXPECT_EQ(p[2], 3);
  EXPECT_EQ(p[3], 8);
  o.mean_bits = 7.0f;  // exact 7 → tie between 6 and 8 → 6 (decision 11: 7 is never written)
  EXPECT_EQ(encode(DType::VBit, Shape{1, 32}, std::vector<float>(32, 1.0f), o)[0], 6);
}

/// Per-element bound of q4tp/q2tp from the stored ladder rung.
float tp_bound(DType t, const std::vector<uint8_t>& p, const std::vector<float>& v, uint64_t rows,
               uint64_t in, uint64_t e) {
  const TpView view = tp_view(t, Shape{rows, in}, p, "w");
  const uint64_t r = e / in, g = (e % in) / 32;
  float lad[32];
  if (t == DType::Q4TP)
    q4tp_ladder(view.lo_f16(r), view.step_f16(r), lad);
  else
    q2tp_ladder(view.lo_f16(r), view.step_f16(r), lad);
  const float s = lad[q4tp_code(view.row_codes(r), g)];
  const float a = tile_absmax(v, e);
  if (t == DType::Q4TP) return std::max(0.5f * s, a - 7 * s);
  if (s == 0.0f) return a;
  return std::max(0.5f * s, a - 1.5f * s);
}

double rel_rms(DType t, const Shape& s, const std::vector<float>& v, const EncodeOptions& o = {}) {
  std::vector<float> w(v.size());
  decode(t, s, encode(t, s, v, o), w);
  double num = 0, den = 0;
  for (size_t i = 0; i < v.size(); ++i) num += (w[i] - v[i]) * (w[i] - v[i]), den += v[i] * v[i];
  return std::sqrt(num / den);
}

TEST(RoundTrip, Q4tpQ2tp) {
  for (DType t : {DType::Q4TP, DType::Q2TP})
    for (bool search : {true, false}) {
      EncodeOptions o;
      o.ladder_search = search;
      const Shape s{4, 320};
      for (const auto& c : cases(1280)) {
        const auto p = encode(t, s, c.v, o);
        std::vector<float> w(1280);
        decode(t, s, p, w);
        for (uint64_t e = 0; e < 1280; ++e)
          ASSERT_LE(std::fabs(w[e] - c.v[e]), tp_bound(t, p, c.v, 4, 320, e) * (1 + 1e-6f))
              << dtype_name(t) << " " << c.name << " " << e;
      }
    }
  // Quality: q4tp stays close to q4_tiled; the search never loses to the nominal rungs.
  auto v = testing::gaussian(16 * 256, 21);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] *= 1.0f + static_cast<float>(i % 256) / 16;  // varied tile scales
  const Shape s{16, 256};
  EncodeOptions off;
  off.ladder_search = false;
  const double q4t = rel_rms(DType::Q4Tiled, s, v), q4tp = rel_rms(DType::Q4TP, s, v);
  const double q4tp_nom = rel_rms(DType::Q4TP, s, v, off);
  EXPECT_LT(q4tp, 1.1 * q4t) << q4tp << " vs " << q4t;
  EXPECT_LE(q4tp, q4tp_nom);
  const double q2 = rel_rms(DType::Q2TP, s, v), q2_nom = rel_rms(DType::Q2TP, s, v, off);
  EXPECT_LT(q2, 0.45);
  EXPECT_LE(q2, q2_nom);
}

TEST(RoundTrip, Q4tpStoredParamsFollowTheRule) {
  const auto v = testing::gaussian(8 * 128, 31);
  const Shape s{8, 128};
  const auto p = encode(DType::Q4TP, s, v);
  const TpView view = tp_view(DType::Q4TP, s, p, "w");
  for (uint64_t r = 0; r < 8; ++r) {
    float lo = INFINITY, hi = -INFINITY;
    for (uint64_t g = 0; g < 4; ++g) {
      const float lg = std::log2(f16_scale(tile_absmax(v, r * 128 + g * 32) / 7.0f));
      lo = std::min(lo, lg), hi = std::max(hi, lg);
    }
    EXPECT_EQ(view.lo_f16(r), f32_to_f16(lo));
    const float lo_r = f16_to_f32(view.lo_f16(r)), st = f16_to_f32(view.step_f16(r));
    EXPECT_GT(st, 0.0f);
    EXPECT_GE(lo_r + 31.0f * st, hi);
    // Minimality: one ULP less would violate the rule (or be the unbumped value).
    const float st_less = f16_to_f32(static_cast<uint16_t>(view.step_f16(r) - 1));
    const bool less_ok = st_less > 0 && lo_r + 31.0f * st_less >= hi;
    EXPECT_TRUE(!less_ok || view.step_f16(r) == f32_to_f16((hi - lo_r) / 31.0f));
    // Rungs lie in nominal−2..nominal+1 and nibbles are rne(w·(1/t)) against the stored ladder.
    float lad[32];
    q4tp_ladder(view.lo_f16(r), view.step_f16(r), lad);
    for (uint64_t g = 0; g < 4; ++g) {
      const float lg = std::log2(f16_scale(tile_absmax(v, r * 128 + g * 32) / 7.0f));
      const int nom = static_cast<int>(std::clamp(std::nearbyint((lg - lo_r) / st), 0.0f, 31.0f));
      const int code = static_cast<int>(q4tp_code(view.row_codes(r), g));
      EXPECT_GE(code, std::max(0, nom - 2));
      EXPECT_LE(code, std::min(31, nom + 1));
      const float inv = 1.0f / lad[code];
      for (int j = 0; j < 32; ++j) {
        const float w = v[r * 128 + g * 32 + j];
        const int want = static_cast<int>(std::clamp(std::nearbyint(w * inv), -8.0f, 7.0f)) + 8;
        const uint8_t byte = view.row_weights(r)[g * 16 + j / 2];
        EXPECT_EQ((byte >> (4 * (j % 2))) & 0xF, want) << r << "," << g << "," << j;
      }
    }
  }
}

TEST(RoundTrip, Q1Family) {
  const Shape s{8, 128};
  const auto v = testing::gaussian(1024, 41);
  const double q1 = rel_rms(DType::Q1, s, v);
  EXPECT_LT(q1, 0.65);  // 1-bit sign·mean|w| on a Gaussian: sqrt(1 − 2/π) ≈ 0.60
  EXPECT_GT(q1, 0.5);
  // Plain q1: scale = f16_scale(mean|w|), bit = sign.
  const auto p = encode(DType::Q1, s, v);
  for (uint64_t g = 0; g < 32; ++g) {
    double m = 0;
    for (int j = 0; j < 32; ++j) m += std::fabs(v[g * 32 + j]);
    EXPECT_EQ(h(p.data() + 6 * g), f16_scale(static_cast<float>(m / 32)));
  }
  // q1p error diffusion: the running error along a row stays bounded.
  EncodeOptions o;
  o.q1_error_diffusion = true;
  std::vector<float> w(1024);
  decode(DType::Q1, s, encode(DType::Q1, s, v, o), w);
  for (uint64_t r = 0; r < 8; ++r) {
    double run = 0, amax = 0;
    for (uint64_t c = 0; c < 128; ++c) amax = std::max(amax, static_cast<double>(std::fabs(v[r * 128 + c])));
    for (uint64_t c = 0; c < 128; ++c) {
      run += v[r * 128 + c] - w[r * 128 + c];
      ASSERT_LE(std::fabs(run), 2 * amax + 1e-3) << r << "," << c;
    }
  }
  // q1s: outliers restored to f16 precision, better than q1 on heavy-tailed rows.
  auto heavy = testing::gaussian(1024, 43);
  for (size_t i = 0; i < heavy.size(); i += 103) heavy[i] = 50.0f * (i % 2 ? 1 : -1);
  const double q1_heavy = rel_rms(DType::Q1, s, heavy), q1s_heavy = rel_rms(DType::Q1S, s, heavy);
  EXPECT_LT(q1s_heavy, 0.5 * q1_heavy);
  std::vector<float> ws(1024);
  const auto ps = encode(DType::Q1S, s, heavy);
  decode(DType::Q1S, s, ps, ws);
  for (size_t i = 0; i < heavy.size(); i += 103) EXPECT_EQ(ws[i], heavy[i]);
  EXPECT_EQ(q1s_view(s, ps, "w").count, 10u);  // floor(0.01 · 1024)
  EncodeOptions none;
  none.q1s_keep_frac = 0.0f;
  EXPECT_EQ(q1s_view(s, encode(DType::Q1S, s, heavy, none), "w").count, 0u);
  none.q1s_keep_frac = 0.9f;  // clamped to 0.25
  EXPECT_EQ(q1s_view(s, encode(DType::Q1S, s, heavy, none), "w").count, 256u);
  // q1t: ternary beats binary on Gaussian rows; zeros decode to zeros; no overlay entries.
  const double q1t = rel_rms(DType::Q1T, s, v);
  EXPECT_LT(q1t, q1);
  EXPECT_LT(q1t, 0.55);
  const auto pt = encode(DType::Q1T, s, v);
  EXPECT_EQ(q1t_view(s, pt, "w").ptr(8), 0u);
  for (DType t : {DType::Q1, DType::Q1S, DType::Q1T}) {
    for (const auto& c : cases(1024)) {
      std::vector<float> out(1024);
      decode(t, s, encode(t, s, c.v), out);
      for (float x : out) ASSERT_TRUE(std::isfinite(x)) << dtype_name(t) << " " << c.name;
      if (c.name == "subnormal" || c.name == "zeros") {  // scale floor 2^-14 bounds the error
        for (size_t i = 0; i < out.size(); ++i)
          ASSERT_LE(std::fabs(out[i] - c.v[i]), 0x1p-14f * 2) << dtype_name(t) << " " << c.name;
      }
    }
  }
}

TEST(RoundTrip, NonFiniteRefused) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto t = static_cast<DType>(i);
    if (!dtype_has_codec(t) || t == DType::F32 || t == DType::F16 || t == DType::BF16) continue;
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      auto v = testing::gaussian(128, 1);
      v[37] = bad;
      try {
        (void)encode(t, Shape{2, 64}, v);
        ADD_FAILURE() << dtype_name(t);
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(e.message().find("element 37"), std::string::npos) << e.message();
      }
    }
  }
}

TEST(RoundTrip, ShapesAndDtypesRefused) {
  const auto v = testing::gaussian(96, 1);
  for (DType t : {DType::Q4Tiled, DType::Q4TP, DType::Q2TP, DType::VBit, DType::VBitRo, DType::Q1, DType::Q1S,
                  DType::Q1T})
    EXPECT_THROW((void)encode(t, Shape{2, 48}, v), Error) << dtype_name(t);
  for (DType t : {DType::Q8Row, DType::Q8_2F, DType::Q4TP, DType::VBit, DType::Q1T})
    EXPECT_THROW((void)encode(t, Shape{96}, v), Error) << dtype_name(t);
  for (DType t : {DType::U8, DType::Mix8_4, DType::Q4Col}) EXPECT_THROW((void)encode(t, Shape{96}, v), Error);
  EXPECT_THROW((void)encode(DType::Q8Row, Shape{2, 47}, v), Error);  // value count mismatch
  // Values whose scale would overflow f16 are refused rather than stored as Inf.
  std::vector<float> big(32, 1e9f);
  EXPECT_THROW((void)encode(DType::Q4Block, Shape{32}, big), Error);
  // 1-D accepted where documented.
  (void)encode(DType::Q4Tiled, Shape{96}, v);
  (void)encode(DType::Q1, Shape{96}, v);
  (void)encode(DType::Q4Block, Shape{96}, v);
}

}  // namespace
}  // namespace cortiq::quant

namespace cortiq::quant {
namespace {

/// A 2×64 q1s payload (base from a fixed gaussian) with the given (flat index, value) entries.
std::vector<uint8_t> q1s_with_entries(const std::vector<std::pair<uint32_t, float>>& entries) {
  const std::vector<uint64_t> s{2, 64};
  EncodeOptions none;
  none.q1s_keep_frac = 0.0f;
  std::vector<uint8_t> p = encode(DType::Q1S, s, testing::gaussian(128, 61), none);
  const size_t head = p.size() - 4;  // the encoder wrote count = 0 last
  store_le<uint32_t>(p.data() + head, static_cast<uint32_t>(entries.size()));
  for (const auto& [i, v] : entries) {
    const size_t at = p.size();
    p.resize(at + 6);
    store_le<uint32_t>(p.data() + at, i);
    store_le<uint16_t>(p.data() + at + 4, f32_to_f16(v));
  }
  return p;
}

// q1s entries replace the base value, a later duplicate wins, and any order is legal: a row range
// decoded alone (binary search when ascending, a scan otherwise) equals that range of the full decode.
TEST(CodecQ1s, EntriesOverwriteInAnyOrderAndRowRangesAgree) {
  const std::vector<uint64_t> s{2, 64};
  const auto asc = q1s_with_entries({{5, -2.0f}, {70, 1.5f}, {100, 0.25f}});
  const auto unordered = q1s_with_entries({{70, 1.5f}, {5, -2.0f}, {100, 0.5f}, {70, 3.0f}});
  EXPECT_TRUE(q1s_view(s, asc, "w").ascending);
  EXPECT_FALSE(q1s_view(s, unordered, "w").ascending);
  for (const auto* p : {&asc, &unordered}) {
    std::vector<float> full(128), row1(64), row0(64);
    decode(DType::Q1S, s, *p, full);
    EXPECT_EQ(full[5], -2.0f);
    EXPECT_EQ(full[70], p == &asc ? 1.5f : 3.0f);
    EXPECT_EQ(full[100], p == &asc ? 0.25f : 0.5f);
    decode_rows(DType::Q1S, s, *p, 1, 1, row1);
    decode_rows(DType::Q1S, s, *p, 0, 1, row0);
    for (size_t c = 0; c < 64; ++c) {
      EXPECT_EQ(row0[c], full[c]) << c;
      EXPECT_EQ(row1[c], full[64 + c]) << c;
    }
  }
}

// RowDecoder (the payload parsed once, rows decoded many times) gives exactly decode_rows' values
// for every codec and any row range; q1s with unordered entries and a triple duplicate keeps the
// last one; a range outside the tensor or a malformed payload throws.
TEST(CodecRowDecoder, EqualsDecodeRowsForEveryCodec) {
  const std::vector<uint64_t> s{37, 96};
  const auto v = testing::gaussian(37 * 96, 77);
  for (DType t :
       {DType::F32, DType::F16, DType::BF16, DType::Q8Row, DType::Q8_2F, DType::Q4Block, DType::Q4Tiled,
        DType::Q1, DType::Q1S, DType::Q1T, DType::VBit, DType::VBitRo, DType::Q4TP, DType::Q2TP}) {
    const std::vector<uint8_t> p = encode(t, s, v);
    std::vector<float> full(37 * 96);
    decode(t, s, p, full);
    const RowDecoder dec(t, s, p, "w");
    EXPECT_EQ(dec.rows(), 37u);
    EXPECT_EQ(dec.cols(), 96u);
    for (const auto& [r0, cnt] :
         std::vector<std::pair<uint64_t, uint64_t>>{{0, 37}, {0, 1}, {36, 1}, {5, 16}, {21, 16}}) {
      std::vector<float> a(cnt * 96), b(cnt * 96);
      dec.decode(r0, cnt, a);
      decode_rows(t, s, p, r0, cnt, b);
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i])) << dtype_name(t) << " " << r0;
        ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(full[r0 * 96 + i])) << dtype_name(t);
      }
    }
    std::vector<float> one(96);
    EXPECT_THROW(dec.decode(37, 1, one), Error) << dtype_name(t);
    EXPECT_THROW(dec.decode(36, 2, one), Error) << dtype_name(t);
  }
  const std::vector<uint64_t> s2{2, 64};
  const auto p =
      q1s_with_entries({{70, 1.5f}, {5, -2.0f}, {70, 3.0f}, {100, 0.5f}, {127, 2.0f}, {70, -1.0f}});
  const RowDecoder dec(DType::Q1S, s2, p, "w");
  std::vector<float> row0(64), row1(64), both(128);
  dec.decode(0, 1, row0);
  dec.decode(1, 1, row1);
  dec.decode(0, 2, both);
  EXPECT_EQ(row0[5], -2.0f);
  EXPECT_EQ(row1[70 - 64], -1.0f);  // the last of three entries for index 70
  EXPECT_EQ(row1[100 - 64], 0.5f);
  EXPECT_EQ(row1[127 - 64], 2.0f);
  for (size_t c = 0; c < 64; ++c) {
    EXPECT_EQ(both[c], row0[c]);
    EXPECT_EQ(both[64 + c], row1[c]);
  }
  // A malformed payload is refused when the decoder is made (vbit width 7 in row 0).
  std::vector<uint8_t> bad = encode(DType::VBit, s, v);
  bad[0] = 7;
  EXPECT_THROW(RowDecoder(DType::VBit, s, bad, "w"), Error);
  EXPECT_THROW(RowDecoder(DType::U8, s, bad, "w"), Error);
}

}  // namespace
}  // namespace cortiq::quant
