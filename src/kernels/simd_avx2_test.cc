// AVX2 matvec/matmul (simd_avx2.h) against the scalar double-accumulating reference (matvec_rows_ref) on
// random and adversarial inputs, with the error bounds documented in simd_avx2.h; thread-count and
// matmul-vs-matvec bit identity; error kinds.
#include "kernels/simd_avx2.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "kernels/kernels.h"
#include "kernels/simd_test_support.h"
#include "quant/codec.h"
#include "quant/layout.h"
#include "util/error.h"
#include "util/half.h"

namespace cortiq::kernels {
namespace {

using quant::DType;

using test::any_cols;
using test::gaussian;
using test::make;
using test::Tensor;
using test::vbit_width_sweep;
using test::widths_seen;
/// The SIMD dtypes this tier implements: all of them.
std::vector<DType> avx2_dtypes() {
  return {std::begin(test::kSimdDtypes), std::end(test::kSimdDtypes)};
}

/// Whether exact = false uses an int8 kernel for (t, cols) (simd_avx2.h file comment).
bool has_int8(DType t, uint64_t cols) {
  if (t == DType::Q8Row || t == DType::Q8_2F || t == DType::Q2TP || t == DType::Q1T || t == DType::VBit ||
      t == DType::VBitRo)
    return true;
  return (t == DType::Q4Block || t == DType::Q4Tiled || t == DType::Q4TP || t == DType::Q1 ||
          t == DType::Q1S) &&
         cols % 32 == 0;
}

/// The documented exact-path bound of this tier for output row r (simd_avx2.h).
double exact_bound(const Tensor& w, uint64_t r, const float* x, double ref) {
  return test::exact_path_bound(w, r, x, ref, 16, 4);
}

/// The documented int8-path bound (simd_avx2.h).
double int8_bound(const Tensor& w, uint64_t r, const float* x, double ref) {
  return test::int8_path_bound(w, r, x, exact_bound(w, r, x, ref));
}

/// Checks matvec_rows_avx2 on rows [rb, rb+rc) against the reference, and 2/3 threads against 1 thread
/// bitwise; returns the 1-thread result.
std::vector<float> check_matvec(const Tensor& w, uint64_t rb, uint64_t rc, const std::vector<float>& x,
                                bool exact) {
  const bool int8 = !exact && has_int8(w.view.dtype, w.view.cols());
  std::vector<float> ref(rc), y1(rc);
  matvec_rows_ref(w.view, rb, rc, x.data(), ref.data(), serial_pool());
  matvec_rows_avx2(w.view, rb, rc, x.data(), y1.data(), serial_pool(), exact);
  for (uint64_t i = 0; i < rc; ++i) {
    const double bound =
        int8 ? int8_bound(w, rb + i, x.data(), ref[i]) : exact_bound(w, rb + i, x.data(), ref[i]);
    EXPECT_LE(std::fabs(static_cast<double>(y1[i]) - ref[i]), bound)
        << "row " << rb + i << " y " << y1[i] << " ref " << ref[i] << " exact " << exact;
  }
  for (size_t th : {2, 3}) {
    ThreadPool pool(th);
    std::vector<float> yt(rc, -1.0f);
    matvec_rows_avx2(w.view, rb, rc, x.data(), yt.data(), pool, exact);
    EXPECT_EQ(0, std::memcmp(yt.data(), y1.data(), rc * 4)) << th << " threads differ, exact " << exact;
  }
  // no int8 kernel: exact = false must be the exact path, bit for bit
  if (!exact && !int8) {
    std::vector<float> ye(rc);
    matvec_rows_avx2(w.view, rb, rc, x.data(), ye.data(), serial_pool(), true);
    EXPECT_EQ(0, std::memcmp(ye.data(), y1.data(), rc * 4));
  }
  return y1;
}

struct Shape {
  uint64_t rows, cols;
};

class Avx2Dtype : public ::testing::TestWithParam<DType> {};

TEST_P(Avx2Dtype, RandomShapesBothPathsMatchReference) {
  const DType t = GetParam();
  if (!avx2_supported(t)) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU";
  std::vector<Shape> shapes = {{37, 160}, {5, 32}, {20, 96}, {18, 896}, {3, 288}, {17, 256}, {16, 64}};
  // odd tails: cols not a multiple of 8/16/32 where the codec allows it
  if (any_cols(t))
    shapes.insert(shapes.end(), {{13, 77}, {4, 1}, {9, 100}, {3, 15}, {6, 8}, {7, 24}, {5, 40}});
  uint32_t seed = 1;
  for (const auto& sh : shapes) {
    SCOPED_TRACE(std::string(quant::dtype_name(t)) + " " + std::to_string(sh.rows) + "x" +
                 std::to_string(sh.cols));
    const Tensor w = make(t, sh.rows, sh.cols, gaussian(sh.rows * sh.cols, seed++, 0.05f));
    const auto x = gaussian(sh.cols, seed++);
    for (bool exact : {true, false}) {
      check_matvec(w, 0, sh.rows, x, exact);
      if (sh.rows > 4) check_matvec(w, 2, sh.rows - 3, x, exact);  // a range starting mid-block
    }
  }
}

TEST_P(Avx2Dtype, AdversarialInputs) {
  const DType t = GetParam();
  if (!avx2_supported(t)) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU";
  const uint64_t rows = 21, cols = any_cols(t) ? 200 : 192;
  const Tensor w = make(t, rows, cols, test::adversarial_weights(rows, cols));
  const auto x = test::adversarial_activation(cols);
  for (bool exact : {true, false}) {
    SCOPED_TRACE(std::string(quant::dtype_name(t)) + (exact ? " exact" : " int8"));
    const auto y = check_matvec(w, 0, rows, x, exact);
    if (t != DType::Q1 && t != DType::Q1S) {  // q1 (q1s's base) cannot encode 0 (±2^-14 floor scale)
      EXPECT_EQ(y[3], 0.0f);
    }
    const std::vector<float> zero(cols, 0.0f);
    const auto yz = check_matvec(w, 0, rows, zero, exact);
    for (float f : yz) EXPECT_EQ(f, 0.0f);
  }
}

// Activations that the int8 quantizer represents exactly (integers/128 with ±127/128 in every block, so d =
// 1/128 and q = 128·x): the int8 path must then agree with the exact product to float rounding.
TEST_P(Avx2Dtype, Int8PathIsExactOnRepresentableActivations) {
  const DType t = GetParam();
  if (!avx2_supported(t) || t == DType::Q8_2F) GTEST_SKIP();  // q8_2f rescales x by its column field
  const uint64_t rows = 11, cols = 352;
  const Tensor w = make(t, rows, cols, gaussian(rows * cols, 11, 0.1f));
  const auto x = test::int8_representable_activation(cols);
  std::vector<float> ref(rows), yi(rows);
  matvec_rows_ref(w.view, 0, rows, x.data(), ref.data(), serial_pool());
  matvec_rows_avx2(w.view, 0, rows, x.data(), yi.data(), serial_pool(), false);
  for (uint64_t r = 0; r < rows; ++r) {
    double mag = 0;
    for (uint64_t c = 0; c < cols; ++c) mag += std::fabs(static_cast<double>(w.deq[r * cols + c]) * x[c]);
    EXPECT_NEAR(yi[r], ref[r], 3e-6 * mag + 1e-30) << r;
  }
}

// Where the file comment documents an int8 kernel, exact = false really takes it (the int8 rounding of a
// gaussian activation shows in some output; check_matvec already demands bit identity elsewhere).
TEST_P(Avx2Dtype, Int8PathIsTakenWhereDocumented) {
  const DType t = GetParam();
  if (!avx2_supported(t)) GTEST_SKIP();
  for (uint64_t cols : {uint64_t{96}, uint64_t{896}}) {
    if (!has_int8(t, cols)) continue;
    const uint64_t rows = 8;
    const Tensor w = make(t, rows, cols, gaussian(rows * cols, 71, 0.1f));
    const auto x = gaussian(cols, 72);
    std::vector<float> ye(rows), yi(rows);
    matvec_rows_avx2(w.view, 0, rows, x.data(), ye.data(), serial_pool(), true);
    matvec_rows_avx2(w.view, 0, rows, x.data(), yi.data(), serial_pool(), false);
    EXPECT_NE(0, std::memcmp(ye.data(), yi.data(), rows * 4)) << "cols " << cols;
  }
}

// The batched kernels work in tiles of 2 rows × 2 tokens (int8: q2tp 4 × 2, q1 / q1s 2 × 4 when n % 4 ==
// 0; matvec 4 rows × 1): every row/token tail combination and a row sub-range must give exactly the
// matvec result, for 1–3 threads.
TEST_P(Avx2Dtype, MatmulEqualsMatvecsBitwise) {
  const DType t = GetParam();
  if (!avx2_supported(t)) GTEST_SKIP();
  const uint64_t rows = 37, cols = any_cols(t) ? 201 : 224;
  const Tensor w = make(t, rows, cols, gaussian(rows * cols, 31, 0.1f));
  for (size_t n : {1, 2, 3, 5, 8}) {
    const auto X = gaussian(n * cols, 32 + static_cast<uint32_t>(n));
    for (bool exact : {true, false}) {
      std::vector<float> y(rows), yr(rows);
      std::vector<std::vector<float>> Ys;
      for (size_t th : {1, 2, 3}) {
        ThreadPool pool(th);
        Ys.emplace_back(n * rows, -1.0f);
        matmul_avx2(w.view, X.data(), n, Ys.back().data(), pool, exact);
        EXPECT_EQ(0, std::memcmp(Ys.back().data(), Ys[0].data(), n * rows * 4)) << th << " threads, n " << n;
      }
      for (size_t i = 0; i < n; ++i) {
        const float* xi = X.data() + i * cols;
        matvec_rows_avx2(w.view, 0, rows, xi, y.data(), serial_pool(), exact);
        EXPECT_EQ(0, std::memcmp(y.data(), Ys[0].data() + i * rows, rows * 4))
            << "n " << n << " token " << i << " exact " << exact;
        matvec_rows_avx2(w.view, 5, 30, xi, yr.data(), serial_pool(), exact);
        EXPECT_EQ(0, std::memcmp(yr.data(), y.data() + 5, 30 * 4)) << "n " << n << " token " << i;
      }
    }
  }
}

// x = e_c makes every exact output the decoded weight itself (one nonzero product, the rest ±0): the exact
// path must reproduce quant::decode bit for bit, in matvec and in matmul.
TEST_P(Avx2Dtype, OneHotActivationGivesTheDecodedWeight) {
  const DType t = GetParam();
  if (!avx2_supported(t)) GTEST_SKIP();
  for (uint64_t cols : {any_cols(t) ? uint64_t{203} : uint64_t{224}, uint64_t{64}}) {
    const uint64_t rows = 19;
    const Tensor w = make(t, rows, cols, gaussian(rows * cols, 61, 0.1f));
    const std::vector<uint64_t> cs = {0, 1, 7, 8, 31, 32, cols / 2, cols - 2, cols - 1};
    std::vector<float> X(cs.size() * cols, 0.0f), Y(cs.size() * rows), y(rows);
    for (size_t i = 0; i < cs.size(); ++i) X[i * cols + cs[i]] = 1.0f;
    matmul_avx2(w.view, X.data(), cs.size(), Y.data(), serial_pool(), true);
    for (size_t i = 0; i < cs.size(); ++i) {
      matvec_rows_avx2(w.view, 0, rows, X.data() + i * cols, y.data(), serial_pool(), true);
      for (uint64_t r = 0; r < rows; ++r) {
        EXPECT_EQ(y[r], w.deq[r * cols + cs[i]]) << "row " << r << " col " << cs[i] << " cols " << cols;
        EXPECT_EQ(Y[i * rows + r], w.deq[r * cols + cs[i]]) << "row " << r << " col " << cs[i];
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, Avx2Dtype, ::testing::ValuesIn(avx2_dtypes()),
                         [](const auto& info) { return std::string(quant::dtype_name(info.param)); });

// A hand-computed q8_row product: row scale f16(1/127)·q, activation exactly representable.
TEST(Avx2, Q8RowHandComputedValue) {
  if (!avx2_supported(DType::Q8Row)) GTEST_SKIP();
  const uint64_t rows = 2, cols = 40;  // one full block + a ragged block of 8
  std::vector<float> v(rows * cols);
  for (uint64_t c = 0; c < cols; ++c) {
    v[c] = static_cast<float>(static_cast<int>(c % 7) - 3) / 3.0f;  // q = rne(v·127) after the row scale
    v[cols + c] = c == 33 ? -1.0f : 0.0f;
  }
  const Tensor w = make(DType::Q8Row, rows, cols, v);
  std::vector<float> x(cols);
  for (uint64_t c = 0; c < cols; ++c) x[c] = (c % 32 == 0) ? 1.0f : 0.5f;
  // int8, lane blocks (one chunk: lane j = columns 4j…4j+3 and 32+4j…32+4j+3): lane 0 holds x[0] =
  // x[32] = 1 → d = 1/127, q = 127 (x = 1) or rne(63.5) = 64 (x = 0.5); lanes 1–7 hold only 0.5 → d =
  // 0.5/127, q = 127: exact.
  double want0 = 0, want_q = 0;
  for (uint64_t c = 0; c < cols; ++c) {
    want0 += static_cast<double>(w.deq[c]) * x[c];
    want_q += static_cast<double>(w.deq[c]) * (c % 32 >= 4 ? 0.5 : (c % 32 == 0 ? 127.0 : 64.0) / 127.0);
  }
  std::vector<float> y(2);
  matvec_rows_avx2(w.view, 0, 2, x.data(), y.data(), serial_pool(), true);
  EXPECT_NEAR(y[0], want0, 1e-6);
  EXPECT_EQ(y[1], 0.5f * w.deq[cols + 33]);  // a single nonzero product: exact
  matvec_rows_avx2(w.view, 0, 2, x.data(), y.data(), serial_pool(), false);
  EXPECT_NEAR(y[0], want_q, 1e-6);
  EXPECT_GT(std::fabs(want_q - want0), 1e-4);  // the int8 rounding is visible: the check means something
  EXPECT_FLOAT_EQ(y[1], static_cast<float>(w.deq[cols + 33] * (64.0 / 127.0)));
}

// vbit rows of every width (vbit_width_sweep), both layouts: the AVX2 unpacking
// decodes exactly the reference's f32 weights (one-hot activations over every column, so the last
// row's codes whose 8-byte read would pass the payload's end are checked too).
TEST(Avx2, VbitEveryWidthDecodesExactly) {
  if (!avx2_supported(DType::VBit)) GTEST_SKIP();
  const uint64_t rows = 26, cols = 160;
  const auto v = vbit_width_sweep(rows, cols, /*rising=*/false);
  for (DType t : {DType::VBit, DType::VBitRo}) {
    SCOPED_TRACE(quant::dtype_name(t));
    const Tensor w = make(t, rows, cols, v);
    const quant::VBitView vb = quant::vbit_view(t, w.view.shape, w.bytes, "w");
    const auto seen = widths_seen(vb);
    for (uint32_t b : {3u, 4u, 5u, 6u, 8u}) EXPECT_TRUE(seen[b]) << "no row of width " << b;
    EXPECT_LT(vb.width(rows - 1), 8u);  // the last row's tail takes the scalar codes
    std::vector<float> one(cols, 0.0f), y(rows);
    for (uint64_t c = 0; c < cols; ++c) {
      one[c] = 1.0f;
      matvec_rows_avx2(w.view, 0, rows, one.data(), y.data(), serial_pool(), true);
      for (uint64_t r = 0; r < rows; ++r) ASSERT_EQ(y[r], w.deq[r * cols + c]) << r << "," << c;
      one[c] = 0.0f;
    }
  }
}

/// The int8 path's value for one row, computed independently: the activation quantized per 32-column
/// block as documented (d = absmax/127, q = rne(x·(127/absmax)) in f32), then Σ_g d_g·s_g·Σ (u − L)·q
/// with the integer dot exact (int64) and the rest in double. `mag` gets Σ_g |d_g·s_g|·Σ |u − L|·|q|.
double vbit_int8_ref(const quant::VBitView& vb, uint64_t r, const float* x, double& mag) {
  const uint32_t b = vb.width(r);
  const int64_t L = (int64_t{1} << (b - 1)) - 1;
  double y = 0;
  mag = 0;
  for (uint64_t g = 0; g < vb.in / 32; ++g) {
    float amax = 0;
    for (uint64_t c = 32 * g; c < 32 * g + 32; ++c) amax = std::max(amax, std::fabs(x[c]));
    const float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
    int64_t dot = 0, adot = 0;
    for (uint64_t c = 32 * g; c < 32 * g + 32; ++c) {
      const int64_t q = static_cast<int64_t>(std::nearbyint(x[c] * id));
      const int64_t w = static_cast<int64_t>(quant::vbit_code(vb.row(r), c, b)) - L;
      dot += w * q;
      adot += std::abs(w * q);
    }
    const double sc = static_cast<double>(d) * vb.scale(r, g);
    y += sc * static_cast<double>(dot);
    mag += std::fabs(sc) * static_cast<double>(adot);
  }
  return y;
}

/// A hand-built vbit (ro = false) or vbit_ro payload `[rows, cols]`: row r has width b[r], code
/// code(r, c) and every group scale f16 `scale_bits`.
template <class Code>
std::vector<uint8_t> vbit_bytes(bool ro, uint64_t cols, const std::vector<uint32_t>& b, Code code,
                                uint16_t scale_bits) {
  const uint64_t rows = b.size();
  std::vector<uint8_t> out;
  for (uint32_t w : b) out.push_back(static_cast<uint8_t>(w));
  for (uint64_t i = 0; i < rows * (cols / 32); ++i) {
    out.push_back(static_cast<uint8_t>(scale_bits & 0xFF));
    out.push_back(static_cast<uint8_t>(scale_bits >> 8));
  }
  std::vector<uint8_t> packed;
  std::vector<uint32_t> off = {0};
  for (uint64_t r = 0; r < rows; ++r) {
    std::vector<uint8_t> row(quant::vbit_row_bytes(cols, b[r]), 0);
    for (uint64_t c = 0; c < cols; ++c)
      for (uint32_t i = 0; i < b[r]; ++i)  // MSB-first stream
        if ((code(r, c) >> (b[r] - 1 - i)) & 1u) {
          const uint64_t bit = c * b[r] + i;
          row[bit / 8] = static_cast<uint8_t>(row[bit / 8] | (0x80u >> (bit % 8)));
        }
    packed.insert(packed.end(), row.begin(), row.end());
    off.push_back(static_cast<uint32_t>(packed.size()));
  }
  if (ro)
    for (uint32_t o : off)
      for (int k = 0; k < 4; ++k) out.push_back(static_cast<uint8_t>(o >> (8 * k)));
  out.insert(out.end(), packed.begin(), packed.end());
  return out;
}

// 8-bit rows whose codes are all 255 (weight +128·s) or all 0 (−127·s), and extremes next to 6-bit
// rows, against full-scale activations (every q = ±127): a plain maddubs(u8 code, s8 q) would
// saturate its int16 pair sums (2·255·127 > 32767). The int8 path must give the hand value
// Σ (u − L)·q·d·s, in matvec (4-row tiles) and matmul (2 × 2, 2 × 4 tiles), both layouts.
TEST(Avx2, VbitInt8EightBitCodesDoNotSaturate) {
  if (!avx2_supported(DType::VBit)) GTEST_SKIP();
  const uint64_t cols = 96;
  const std::vector<uint32_t> b = {8, 8, 8, 6, 8, 3};
  const auto code = [](uint64_t r, uint64_t c) -> uint32_t {
    switch (r) {
      case 0:
        return 255;
      case 1:
        return 0;
      case 2:
        return c % 2 ? 255 : 0;
      case 3:
        return 63;
      case 4:
        return c < 48 ? 255 : 128;
      default:
        return 7;
    }
  };
  const uint64_t rows = b.size();
  // activations: ±1 (q = ±127, d = 1/127), per token a different sign pattern
  const size_t n = 4;
  std::vector<float> X(n * cols);
  for (size_t i = 0; i < n; ++i)
    for (uint64_t c = 0; c < cols; ++c)
      X[i * cols + c] = i == 0   ? 1.0f
                        : i == 1 ? -1.0f
                        : i == 2 ? (c % 2 ? 1.0f : -1.0f)
                                 : (c < 40 ? 1.0f : -1.0f);
  for (bool ro : {false, true}) {
    const DType t = ro ? DType::VBitRo : DType::VBit;
    SCOPED_TRACE(quant::dtype_name(t));
    const auto bytes = vbit_bytes(ro, cols, b, code, 0x3800);  // scale 0.5
    const WeightView w{t, {rows, cols}, bytes, "w"};
    std::vector<float> Y(n * rows), y(rows);
    matmul_avx2(w, X.data(), n, Y.data(), serial_pool(), false);
    for (size_t i = 0; i < n; ++i) {
      matvec_rows_avx2(w, 0, rows, X.data() + i * cols, y.data(), serial_pool(), false);
      for (uint64_t r = 0; r < rows; ++r) {
        const int64_t L = (int64_t{1} << (b[r] - 1)) - 1;
        double want = 0;  // q = 127·sign(x), d = 1/127: Σ (u − L)·sign(x)·0.5
        for (uint64_t c = 0; c < cols; ++c)
          want += static_cast<double>(static_cast<int64_t>(code(r, c)) - L) * X[i * cols + c] * 0.5;
        EXPECT_NEAR(y[r], want, 1e-5 * std::fabs(want) + 1e-6) << "row " << r << " token " << i;
        EXPECT_NEAR(Y[i * rows + r], want, 1e-5 * std::fabs(want) + 1e-6) << "row " << r << " token " << i;
      }
    }
    EXPECT_FLOAT_EQ(y[0], 128.0f * 0.5f * (40 - 56));  // token 3: q = +127 for c < 40, −127 after
    matvec_rows_avx2(w, 0, rows, X.data(), y.data(), serial_pool(), false);  // token 0: all q = 127
    EXPECT_FLOAT_EQ(y[0], 128.0f * 0.5f * cols);
    EXPECT_FLOAT_EQ(y[1], -127.0f * 0.5f * cols);
  }
}

// Rows of every width 3..8 mixed within the int8 tiles (vbit_width_sweep; both orders so the payload's
// last row is once narrow — its groups near the end go through the padded copy — and once 8-bit): each
// output equals the independently computed quantized-activation product (vbit_int8_ref) to f32
// rounding, for matvec (4 × 1 tiles, odd row ranges) and matmul (2 × 2 and 2 × 4 tiles).
TEST(Avx2, VbitInt8MixedWidthsMatchQuantizedReference) {
  if (!avx2_supported(DType::VBit)) GTEST_SKIP();
  const uint64_t rows = 27, cols = 224;
  for (bool rising : {false, true}) {
    const auto v = vbit_width_sweep(rows, cols, rising);
    for (DType t : {DType::VBit, DType::VBitRo}) {
      SCOPED_TRACE(std::string(quant::dtype_name(t)) + (rising ? " rising" : " falling"));
      const Tensor tw = make(t, rows, cols, v);
      // an exact-size copy of the payload: under ASan a read past its end (the last row's groups) is caught
      const std::vector<uint8_t> bytes(tw.bytes.begin(), tw.bytes.end());
      const WeightView wv{t, tw.view.shape, bytes, "w"};
      const quant::VBitView vb = quant::vbit_view(t, wv.shape, bytes, "w");
      const auto seen = widths_seen(vb);
      for (uint32_t b : {3u, 4u, 5u, 6u, 8u}) EXPECT_TRUE(seen[b]) << "no row of width " << b;
      for (size_t n : {1, 3, 4}) {
        const auto X = gaussian(n * cols, 90 + static_cast<uint32_t>(n));
        std::vector<float> Y(n * rows);
        matmul_avx2(wv, X.data(), n, Y.data(), serial_pool(), false);
        for (size_t i = 0; i < n; ++i) {
          std::vector<float> y(rows - 1);
          matvec_rows_avx2(wv, 1, rows - 1, X.data() + i * cols, y.data(), serial_pool(), false);
          for (uint64_t r = 0; r < rows; ++r) {
            double mag = 0;
            const double want = vbit_int8_ref(vb, r, X.data() + i * cols, mag);
            EXPECT_NEAR(Y[i * rows + r], want, 1e-6 * mag + 1e-30) << "row " << r << " token " << i;
            if (r >= 1) {
              EXPECT_NEAR(y[r - 1], want, 1e-6 * mag + 1e-30) << "row " << r << " token " << i;
            }
          }
        }
      }
    }
  }
}

TEST(Avx2, Errors) {
  if (!avx2_cpu_ok()) GTEST_SKIP();
  EXPECT_TRUE(avx2_supported(DType::VBit));
  EXPECT_TRUE(avx2_supported(DType::VBitRo));
  EXPECT_TRUE(avx2_supported(DType::Q1S));
  EXPECT_FALSE(avx2_supported(DType::U8));
  EXPECT_TRUE(avx2_supported(DType::Q8Row));
  // a q1t base code byte that is not base-3 (≥ 243) is a Parse error, not a wrong product
  {
    const Tensor q = make(DType::Q1T, 2, 64, gaussian(128, 44));
    std::vector<uint8_t> bytes = q.bytes;
    bytes[quant::kQ1tTileBytes + 3] = 250;  // row 0, group 1, code byte 1
    const WeightView qv{DType::Q1T, q.view.shape, bytes, "q1t"};
    const auto xq = gaussian(64, 45);
    std::vector<float> yq(2);
    for (bool exact : {true, false}) {
      try {
        matvec_rows_avx2(qv, 0, 2, xq.data(), yq.data(), serial_pool(), exact);
        ADD_FAILURE() << "no throw";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Parse) << e.what();
      }
    }
  }
  {  // a q1t overlay entry outside its row is a Parse error (checked as each row is decoded)
    const std::vector<uint8_t> bytes = test::q1t_with_overlay_col_out_of_range();
    const WeightView qv{DType::Q1T, {2, 64}, bytes, "q1t"};
    const auto xq = gaussian(2 * 64, 47);
    std::vector<float> yq(4);
    for (bool exact : {true, false})
      for (size_t n : {size_t{1}, size_t{2}}) {
        try {
          if (n == 1)
            matvec_rows_avx2(qv, 0, 2, xq.data(), yq.data(), serial_pool(), exact);
          else
            matmul_avx2(qv, xq.data(), n, yq.data(), serial_pool(), exact);
          ADD_FAILURE() << "no throw";
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::Parse) << e.what();
        }
      }
  }
  const Tensor w = make(DType::Q8Row, 4, 64, gaussian(256, 41));
  const auto x = gaussian(64, 42);
  std::vector<float> y(4);
  for (bool exact : {true, false}) {
    for (auto [rb, rc] : {std::pair<uint64_t, uint64_t>{2, 3}, {5, 0}, {0, 5}}) {
      try {
        matvec_rows_avx2(w.view, rb, rc, x.data(), y.data(), serial_pool(), exact);
        ADD_FAILURE() << "no throw for rows " << rb << "+" << rc;
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Bounds);
      }
    }
  }
  // an empty range at the end is fine and writes nothing
  y.assign(4, 7.0f);
  matvec_rows_avx2(w.view, 4, 0, x.data(), y.data(), serial_pool(), true);
  EXPECT_EQ(y[0], 7.0f);
  WeightView bad = w.view;
  bad.payload = bad.payload.first(bad.payload.size() - 1);
  for (bool exact : {true, false}) {
    try {
      matvec_rows_avx2(bad, 0, 1, x.data(), y.data(), serial_pool(), exact);
      ADD_FAILURE() << "no throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Parse);
    }
    try {
      matmul_avx2(bad, x.data(), 1, y.data(), serial_pool(), exact);
      ADD_FAILURE() << "no throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Parse);
    }
  }
  // vbit: a row width outside {3,4,5,6,8} is the layout's Parse error naming the row.
  Tensor v = make(DType::VBit, 4, 64, gaussian(256, 43));
  v.bytes[2] = 7;
  v.view.payload = v.bytes;
  try {
    matvec_rows_avx2(v.view, 0, 1, x.data(), y.data(), serial_pool(), true);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Parse);
    EXPECT_NE(std::string(e.what()).find("row 2"), std::string::npos) << e.what();
  }
}

// A non-finite activation makes the int8 block scale NaN: the output is NaN, never a finite lie — for
// every int8 kernel, in matvec and matmul, and whether the bad value sits in the first or the last
// block (q2tp: 160 columns end in a ragged 4-group superblock).
TEST(Avx2, NonFiniteActivationGivesNaN) {
  if (!avx2_cpu_ok()) GTEST_SKIP();
  const uint64_t rows = 5, cols = 160;
  for (DType t : {DType::Q8Row, DType::Q8_2F, DType::Q4Tiled, DType::Q4Block, DType::Q4TP, DType::Q2TP,
                  DType::Q1, DType::Q1S, DType::Q1T, DType::VBit, DType::VBitRo}) {
    ASSERT_TRUE(has_int8(t, cols));
    const Tensor w = make(t, rows, cols, gaussian(rows * cols, 51, 0.1f));
    for (uint64_t c : {uint64_t{3}, uint64_t{140}}) {
      for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
        auto X = gaussian(2 * cols, 52);
        X[c] = bad;
        X[cols + c] = -bad;
        std::vector<float> y(rows), Y(2 * rows);
        matvec_rows_avx2(w.view, 0, rows, X.data(), y.data(), serial_pool(), false);
        matmul_avx2(w.view, X.data(), 2, Y.data(), serial_pool(), false);
        for (float f : y) EXPECT_TRUE(std::isnan(f)) << quant::dtype_name(t) << " col " << c << " " << f;
        for (float f : Y) EXPECT_TRUE(std::isnan(f)) << quant::dtype_name(t) << " col " << c << " " << f;
      }
    }
  }
}

// q1t's int8 kernel checks every tile's code bytes (bytes 0..5 < 243, the two-code byte 6 < 9) as the
// exact path does: a bad byte is a Parse error naming its row and group, in matvec (4-row tiles) and in
// matmul (2 × 2 and 2 × 4 tiles), on both paths.
TEST(Avx2, Q1tBadCodeByteNamesRowAndGroup) {
  if (!avx2_supported(DType::Q1T)) GTEST_SKIP();
  const uint64_t rows = 3, cols = 320;
  const Tensor q = make(DType::Q1T, rows, cols, gaussian(rows * cols, 48));
  struct Case {
    uint64_t row, group, byte;
    uint8_t value;
  };
  for (const Case c : {Case{1, 3, 5, 243}, Case{2, 9, 6, 9}, Case{0, 7, 6, 200}, Case{2, 0, 0, 255}}) {
    std::vector<uint8_t> bytes = q.bytes;
    bytes[(c.row * cols / 32 + c.group) * quant::kQ1tTileBytes + 2 + c.byte] = c.value;
    const WeightView qv{DType::Q1T, q.view.shape, bytes, "q1t"};
    const auto x = gaussian(cols * 4, 49);
    std::vector<float> y(rows * 4);
    const std::string want = "row " + std::to_string(c.row) + ", group " + std::to_string(c.group);
    for (bool exact : {true, false})
      for (size_t n : {size_t{1}, size_t{2}, size_t{4}}) {
        try {
          if (n == 1)
            matvec_rows_avx2(qv, 0, rows, x.data(), y.data(), serial_pool(), exact);
          else
            matmul_avx2(qv, x.data(), n, y.data(), serial_pool(), exact);
          ADD_FAILURE() << "no throw: " << want;
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::Parse) << e.what();
          EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what() << " / " << want;
        }
      }
  }
}

// The q1t overlay (sparse f16 values over base code 0) is added in f32 after the int8 base: values
// within the int8 bound of the reference (which decodes the overlay), 1–3 threads bitwise equal, matmul
// (n = 5: 2 × 2 tiles, n = 4: 2 × 4) bitwise equal to matvecs, and the overlay really applied.
TEST(Avx2, Q1tOverlayOnBothPaths) {
  if (!avx2_supported(DType::Q1T)) GTEST_SKIP();
  const uint64_t rows = 21, cols = 288;
  const Tensor w = test::q1t_with_overlay(rows, cols, 50);
  ASSERT_GT(w.bytes.size(), rows * cols / 32 * quant::kQ1tTileBytes + 4 * (rows + 1) + 4 * 30);
  const auto X = gaussian(5 * cols, 51);
  for (bool exact : {true, false}) {
    SCOPED_TRACE(exact ? "exact" : "int8");
    const auto y = check_matvec(w, 0, rows, X, exact);
    check_matvec(w, 3, 15, X, exact);
    EXPECT_GT(std::fabs(y[0]), 10.0f);  // the overlay value 100 dominates row 0
    for (size_t n : {size_t{4}, size_t{5}}) {
      std::vector<float> Y(n * rows), yi(rows);
      matmul_avx2(w.view, X.data(), n, Y.data(), serial_pool(), exact);
      for (size_t i = 0; i < n; ++i) {
        matvec_rows_avx2(w.view, 0, rows, X.data() + i * cols, yi.data(), serial_pool(), exact);
        EXPECT_EQ(0, std::memcmp(yi.data(), Y.data() + i * rows, rows * 4)) << "n " << n << " token " << i;
      }
    }
  }
  // int8 with x = e_c at an overlay column of row 0 and 0 elsewhere: only the overlay term is nonzero
  // (the int8 base multiplies code 0 there), so y[0] is exactly the overlay value.
  const quant::Q1tView v = quant::q1t_view(w.view.shape, w.bytes, "w");
  ASSERT_GE(v.ptr(1), 3u);
  for (uint32_t e = 0; e < 3; ++e) {
    std::vector<float> one(cols, 0.0f), y(rows);
    one[v.col(e)] = 1.0f;
    matvec_rows_avx2(w.view, 0, rows, one.data(), y.data(), serial_pool(), false);
    EXPECT_EQ(y[0], v.value(e)) << "entry " << e;
    EXPECT_EQ(y[0], w.deq[v.col(e)]);
  }
}

// Every base-3 code byte value at every code position: a q1t row of 32-column tiles whose code bytes run
// through 0..242 (byte 6: 0..8), one-hot activations x_c = 127/128 (d = 1/128, q = 127 exactly): the int8
// result is the decoded weight (the tile's ±s or 0) times 127/128 exactly (a single nonzero product of
// exact factors), so the digit mapping is checked weight by weight.
TEST(Avx2, Q1tInt8DigitMappingEveryByte) {
  if (!avx2_supported(DType::Q1T)) GTEST_SKIP();
  const uint64_t rows = 4, cols = 32 * 61;  // 4·61 = 244 tiles ≥ 243 code byte values per position
  Tensor w = make(DType::Q1T, rows, cols, gaussian(rows * cols, 81, 0.1f));
  const uint64_t gpr = cols / 32;
  for (uint64_t t = 0; t < rows * gpr; ++t) {
    uint8_t* tile = w.bytes.data() + t * quant::kQ1tTileBytes;
    for (int j = 0; j < 6; ++j) tile[2 + j] = static_cast<uint8_t>((t + 37 * j) % 243);
    tile[8] = static_cast<uint8_t>(t % 9);
  }
  w.view.payload = w.bytes;
  quant::decode(DType::Q1T, w.view.shape, w.bytes, w.deq);
  std::vector<float> X(64 * cols, 0.0f), Y(64 * rows), y(rows);
  for (uint64_t c0 = 0; c0 < cols; c0 += 64) {
    const uint64_t m = std::min<uint64_t>(64, cols - c0);
    std::fill(X.begin(), X.end(), 0.0f);
    for (uint64_t i = 0; i < m; ++i) X[i * cols + c0 + i] = 127.0f / 128.0f;
    matmul_avx2(w.view, X.data(), m, Y.data(), serial_pool(), false);
    for (uint64_t i = 0; i < m; ++i)
      for (uint64_t r = 0; r < rows; ++r) {
        const float want = w.deq[r * cols + c0 + i];
        ASSERT_EQ(Y[i * rows + r], want * (127.0f / 128.0f)) << "row " << r << " col " << c0 + i;
        const uint8_t* tile = w.bytes.data() + (r * gpr + (c0 + i) / 32) * quant::kQ1tTileBytes;
        const uint32_t code = quant::q1t_code(tile, static_cast<uint32_t>((c0 + i) % 32));
        const float s = f16_to_f32(load_le<uint16_t>(tile));
        ASSERT_EQ(want, code == 0 ? 0.0f : code == 1 ? s : -s);
      }
  }
}

// Rows with many q1s outliers (25%: ~256 per 1024-column row; the other tests' rows hold ~1%): the
// int8 base plus the outliers in f32 within the int8 bound, matmul bitwise equal to matvecs.
TEST(Avx2, Q1sManyOutliersPerRow) {
  if (!avx2_supported(DType::Q1S)) GTEST_SKIP();
  const uint64_t rows = 7, cols = 1024;
  quant::EncodeOptions eo;
  eo.q1s_keep_frac = 0.25f;
  const Tensor w = make(DType::Q1S, rows, cols, gaussian(rows * cols, 61, 0.05f), eo);
  const quant::Q1sView v = quant::q1s_view(w.view.shape, w.bytes, "w");
  ASSERT_TRUE(v.ascending);
  ASSERT_GE(v.count, rows * 200);
  const auto x = gaussian(cols, 62);
  check_matvec(w, 0, rows, x, false);
  check_matvec(w, 3, 4, x, false);
  const auto X = gaussian(3 * cols, 63);
  std::vector<float> Y(3 * rows), yi(rows);
  matmul_avx2(w.view, X.data(), 3, Y.data(), serial_pool(), false);
  for (size_t i = 0; i < 3; ++i) {
    matvec_rows_avx2(w.view, 0, rows, X.data() + i * cols, yi.data(), serial_pool(), false);
    EXPECT_EQ(0, std::memcmp(yi.data(), Y.data() + i * rows, rows * 4)) << "token " << i;
  }
  // the outliers matter: without them (the q1 base alone) the product is far off
  std::vector<float> base(rows * cols);
  quant::decode(DType::Q1, w.view.shape,
                std::span<const uint8_t>(w.bytes.data(), rows * cols / 32 * quant::kQ1TileBytes), base);
  double d0 = 0;
  for (uint64_t c = 0; c < cols; ++c) d0 += (static_cast<double>(w.deq[c]) - base[c]) * x[c];
  EXPECT_GT(std::fabs(d0), 1e-2);
}

// q1s outliers in any order are legal (a later duplicate wins): the int8 path's binary search needs
// ascending indices, so such a payload takes the exact path (quant::RowDecoder) for exact = false too —
// bit for bit the exact result, within the exact bound of the reference, matmul equal to matvecs.
TEST(Avx2, Q1sUnorderedOutliersTakeTheExactPath) {
  if (!avx2_supported(DType::Q1S)) GTEST_SKIP();
  const uint64_t rows = 9, cols = 128;
  const Tensor w = make(DType::Q1S, rows, cols, gaussian(rows * cols, 52, 0.1f));
  ASSERT_GE(quant::q1s_view(w.view.shape, w.bytes, "w").count, 4u);
  Tensor u;
  u.bytes = test::q1s_unordered(w);
  u.view = WeightView{DType::Q1S, w.view.shape, u.bytes, "w"};
  ASSERT_FALSE(quant::q1s_view(u.view.shape, u.bytes, "w").ascending);
  u.deq.resize(rows * cols);
  quant::decode(DType::Q1S, u.view.shape, u.bytes, u.deq);
  ASSERT_NE(u.deq, w.deq);  // the duplicate really changed a weight
  const auto X = gaussian(2 * cols, 53);
  const std::vector<float> x(X.begin(), X.begin() + cols);
  const auto ye = check_matvec(u, 0, rows, x, true);
  std::vector<float> yi(rows), Y(2 * rows);
  matvec_rows_avx2(u.view, 0, rows, x.data(), yi.data(), serial_pool(), false);
  EXPECT_EQ(0, std::memcmp(ye.data(), yi.data(), rows * 4));
  matmul_avx2(u.view, X.data(), 2, Y.data(), serial_pool(), false);
  EXPECT_EQ(0, std::memcmp(ye.data(), Y.data(), rows * 4));
}

}  // namespace
}  // namespace cortiq::kernels
