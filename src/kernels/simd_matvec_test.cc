// SIMD matvec/matmul (simd_matvec.h) against the scalar reference (matvec_rows_ref) on random and
// adversarial inputs, with the error bounds documented in simd_matvec.h.
#include "kernels/simd_matvec.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "kernels/kernels.h"
#include "kernels/simd_test_support.h"
#include "quant/codec.h"
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
constexpr auto& kAll = test::kSimdDtypes;

/// The documented exact-path bound of this tier for output row r (simd_matvec.h).
double exact_bound(const Tensor& w, uint64_t r, const float* x, double ref) {
  return test::exact_path_bound(w, r, x, ref, 64, 7);
}

/// The documented int8-path bound (simd_matvec.h).
double int8_bound(const Tensor& w, uint64_t r, const float* x, double ref) {
  return test::int8_path_bound(w, r, x, exact_bound(w, r, x, ref));
}

enum class Path { Exact, Int8 };

/// Checks matvec_rows_simd on rows [rb, rb+rc) for 1/2/3 threads, returns the 1-thread result.
std::vector<float> check_matvec(const Tensor& w, uint64_t rb, uint64_t rc, const std::vector<float>& x,
                                Path path) {
  const bool exact = path == Path::Exact;
  std::vector<float> ref(rc), y1(rc);
  matvec_rows_ref(w.view, rb, rc, x.data(), ref.data(), serial_pool());
  matvec_rows_simd(w.view, rb, rc, x.data(), y1.data(), serial_pool(), exact);
  for (uint64_t i = 0; i < rc; ++i) {
    const double bound =
        exact ? exact_bound(w, rb + i, x.data(), ref[i]) : int8_bound(w, rb + i, x.data(), ref[i]);
    EXPECT_LE(std::fabs(static_cast<double>(y1[i]) - ref[i]), bound)
        << "row " << rb + i << " y " << y1[i] << " ref " << ref[i];
  }
  for (size_t th : {2, 3}) {
    ThreadPool pool(th);
    std::vector<float> yt(rc, -1.0f);
    matvec_rows_simd(w.view, rb, rc, x.data(), yt.data(), pool, exact);
    EXPECT_EQ(0, std::memcmp(yt.data(), y1.data(), rc * 4)) << th << " threads differ";
  }
  return y1;
}

struct Shape {
  uint64_t rows, cols;
};

class SimdDtype : public ::testing::TestWithParam<DType> {};

TEST_P(SimdDtype, RandomShapesBothPathsMatchReference) {
  const DType t = GetParam();
  if (!simd_supported(t)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::vector<Shape> shapes = {{37, 160}, {5, 32}, {20, 96}, {18, 896}, {3, 288}, {17, 256}};
  if (any_cols(t)) shapes.insert(shapes.end(), {{13, 77}, {4, 1}, {9, 100}, {3, 15}});
  uint32_t seed = 1;
  for (const auto& sh : shapes) {
    SCOPED_TRACE(std::string(quant::dtype_name(t)) + " " + std::to_string(sh.rows) + "x" +
                 std::to_string(sh.cols));
    const Tensor w = make(t, sh.rows, sh.cols, gaussian(sh.rows * sh.cols, seed++, 0.05f));
    const auto x = gaussian(sh.cols, seed++);
    for (Path p : {Path::Exact, Path::Int8}) {
      check_matvec(w, 0, sh.rows, x, p);
      if (sh.rows > 4) check_matvec(w, 2, sh.rows - 3, x, p);  // a row range
    }
  }
}

TEST_P(SimdDtype, AdversarialInputs) {
  const DType t = GetParam();
  if (!simd_supported(t)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  const uint64_t rows = 21, cols = any_cols(t) ? 200 : 192;
  const Tensor w = make(t, rows, cols, test::adversarial_weights(rows, cols));
  const auto x = test::adversarial_activation(cols);
  for (Path p : {Path::Exact, Path::Int8}) {
    SCOPED_TRACE(std::string(quant::dtype_name(t)) + (p == Path::Exact ? " exact" : " int8"));
    const auto y = check_matvec(w, 0, rows, x, p);
    if (t != DType::Q1 && t != DType::Q1S) {  // q1 (q1s's base) cannot encode 0 (±2^-14 floor scale)
      EXPECT_EQ(y[3], 0.0f);
    }
    const std::vector<float> zero(cols, 0.0f);
    const auto yz = check_matvec(w, 0, rows, zero, p);
    for (float f : yz) EXPECT_EQ(f, 0.0f);
  }
}

// Activations that the int8 quantizer represents exactly (integers·2^-7 with ±127/128 in every
// block): the int8 path must then agree with the exact product to float rounding.
TEST_P(SimdDtype, Int8PathIsExactOnRepresentableActivations) {
  const DType t = GetParam();
  if (!simd_supported(t) || t == DType::Q8_2F) GTEST_SKIP();  // q8_2f rescales x by its column field
  // 29 groups: q4tp's NIBQ quad, pair and a full and a partial NIB superblock
  const uint64_t rows = 11, cols = 928;
  const Tensor w = make(t, rows, cols, gaussian(rows * cols, 11, 0.1f));
  const auto x = test::int8_representable_activation(cols);
  std::vector<float> ref(rows), yi(rows);
  matvec_rows_ref(w.view, 0, rows, x.data(), ref.data(), serial_pool());
  matvec_rows_simd(w.view, 0, rows, x.data(), yi.data(), serial_pool(), false);
  for (uint64_t r = 0; r < rows; ++r) {
    double mag = 0;
    for (uint64_t c = 0; c < cols; ++c) mag += std::fabs(static_cast<double>(w.deq[r * cols + c]) * x[c]);
    EXPECT_NEAR(yi[r], ref[r], 2e-6 * mag + 1e-30) << r;
  }
}

// A NaN or infinite activation makes the output non-finite on both paths, never a finite lie: the int8
// quantizer must not let a later finite value hide the NaN from the block's absmax, nor round
// inf·0 to a code. Placed in the middle of a block and in the last (partial) one, 1 and 4 tokens.
TEST_P(SimdDtype, NonFiniteActivationGivesNaN) {
  const DType t = GetParam();
  if (!simd_supported(t)) GTEST_SKIP();
  const uint64_t rows = 5, cols = any_cols(t) ? 600 : 576;
  const Tensor w = make(t, rows, cols, gaussian(rows * cols, 53, 0.1f));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()})
    for (uint64_t at : {uint64_t{40}, cols - 3})
      for (Path p : {Path::Exact, Path::Int8}) {
        SCOPED_TRACE(fmt::format("{} x[{}] = {} {}", quant::dtype_name(t), at, bad,
                                 p == Path::Exact ? "exact" : "int8"));
        const size_t n = 4;
        auto x = gaussian(n * cols, 54);
        x[at] = bad;             // token 0
        x[3 * cols + at] = bad;  // token 3
        std::vector<float> y1(rows), yb(n * rows);
        matvec_rows_simd(w.view, 0, rows, x.data(), y1.data(), serial_pool(), p == Path::Exact);
        matmul_simd(w.view, x.data(), n, yb.data(), serial_pool(), p == Path::Exact);
        for (uint64_t r = 0; r < rows; ++r) {
          EXPECT_FALSE(std::isfinite(y1[r])) << "matvec row " << r << ": " << y1[r];
          EXPECT_FALSE(std::isfinite(yb[r])) << "matmul token 0 row " << r << ": " << yb[r];
          EXPECT_FALSE(std::isfinite(yb[3 * rows + r]))
              << "matmul token 3 row " << r << ": " << yb[3 * rows + r];
          EXPECT_TRUE(std::isfinite(yb[rows + r])) << "matmul token 1 row " << r;
        }
      }
}

TEST_P(SimdDtype, MatmulEqualsMatvecsBitwise) {
  const DType t = GetParam();
  if (!simd_supported(t)) GTEST_SKIP();
  const uint64_t rows = 45, cols = any_cols(t) ? 129 : 160;
  const size_t n = 5;
  const Tensor w = make(t, rows, cols, gaussian(rows * cols, 21, 0.1f));
  const auto X = gaussian(n * cols, 22);
  for (bool exact : {true, false}) {
    for (size_t th : {1, 2, 3}) {
      ThreadPool pool(th);
      std::vector<float> Y(n * rows), y(rows);
      matmul_simd(w.view, X.data(), n, Y.data(), pool, exact);
      for (size_t i = 0; i < n; ++i) {
        matvec_rows_simd(w.view, 0, rows, X.data() + i * cols, y.data(), serial_pool(), exact);
        EXPECT_EQ(0, std::memcmp(y.data(), Y.data() + i * rows, rows * 4))
            << "token " << i << " exact " << exact;
      }
    }
  }
}

// The batched kernels work in tiles of several weight rows × several tokens (and matvec in tiles of
// several rows); every row/token tail combination and a row sub-range must still give exactly the
// matvec result, and the values must match the reference within the path's bound.
TEST_P(SimdDtype, MatmulTileTailsEqualMatvecsBitwise) {
  const DType t = GetParam();
  if (!simd_supported(t)) GTEST_SKIP();
  // 800 = 25 groups: q4tp's NIBQ quad and pair, then a partial NIB superblock
  const uint64_t rows = 37, cols = any_cols(t) ? 200 : 800;
  const Tensor w = make(t, rows, cols, gaussian(rows * cols, 31, 0.1f));
  for (size_t n : {2, 3, 4, 7, 8, 9, 17}) {  // 17: q8 block_q8_reuse (n ≥ 16), three nibq_few groups
    const auto X = gaussian(n * cols, 32 + static_cast<uint32_t>(n));
    for (bool exact : {true, false}) {
      std::vector<float> Y(n * rows), y(rows), yr(rows);
      matmul_simd(w.view, X.data(), n, Y.data(), serial_pool(), exact);
      for (size_t i = 0; i < n; ++i) {
        const float* xi = X.data() + i * cols;
        matvec_rows_simd(w.view, 0, rows, xi, y.data(), serial_pool(), exact);
        EXPECT_EQ(0, std::memcmp(y.data(), Y.data() + i * rows, rows * 4))
            << "n " << n << " token " << i << " exact " << exact;
        // a sub-range starting mid-tile gives the same values as the full product
        matvec_rows_simd(w.view, 5, 30, xi, yr.data(), serial_pool(), exact);
        EXPECT_EQ(0, std::memcmp(yr.data(), y.data() + 5, 30 * 4))
            << "n " << n << " token " << i << " exact " << exact;
        matvec_rows_ref(w.view, 0, rows, xi, yr.data(), serial_pool());
        for (uint64_t r = 0; r < rows; ++r) {
          const double bound = exact ? exact_bound(w, r, xi, yr[r]) : int8_bound(w, r, xi, yr[r]);
          EXPECT_NEAR(y[r], yr[r], bound) << "row " << r << " exact " << exact;
        }
      }
    }
  }
}

// Rows of 2048 columns or more take other matvec row tiles than short rows (4 rows instead of 8 for
// q4tp and q4_block); matvec must still equal every token of a matmul bit for bit and stay within
// the int8 bound of the reference.
TEST_P(SimdDtype, LongRowMatvecEqualsMatmulBitwise) {
  const DType t = GetParam();
  if (!simd_supported(t)) GTEST_SKIP();
  const uint64_t rows = 11, cols = 2080;  // 65 groups of 32: four NIBQ quads and a NIB superblock
  const Tensor w = make(t, rows, cols, gaussian(rows * cols, 41, 0.1f));
  const size_t n = 3;
  const auto X = gaussian(n * cols, 42);
  std::vector<float> Y(n * rows), y(rows), yr(rows);
  matmul_simd(w.view, X.data(), n, Y.data(), serial_pool(), false);
  for (size_t i = 0; i < n; ++i) {
    const float* xi = X.data() + i * cols;
    matvec_rows_simd(w.view, 0, rows, xi, y.data(), serial_pool(), false);
    EXPECT_EQ(0, std::memcmp(y.data(), Y.data() + i * rows, rows * 4)) << "token " << i;
    matvec_rows_ref(w.view, 0, rows, xi, yr.data(), serial_pool());
    for (uint64_t r = 0; r < rows; ++r) EXPECT_NEAR(y[r], yr[r], int8_bound(w, r, xi, yr[r])) << "row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(All, SimdDtype, ::testing::ValuesIn(kAll),
                         [](const auto& info) { return std::string(quant::dtype_name(info.param)); });

TEST(Simd, Q4BlockWithUnalignedColsUsesTheReference) {
  if (!simd_supported(DType::Q4Block)) GTEST_SKIP();
  const Tensor w = make(DType::Q4Block, 7, 45, gaussian(7 * 45, 31));
  const auto x = gaussian(45, 32);
  std::vector<float> ref(7), y(7);
  matvec_rows_ref(w.view, 0, 7, x.data(), ref.data(), serial_pool());
  matvec_rows_simd(w.view, 0, 7, x.data(), y.data(), serial_pool(), false);
  EXPECT_EQ(0, std::memcmp(ref.data(), y.data(), 28));
}

// q1t's int8 kernel gathers 8 tiles per superblock: a bad code byte anywhere (byte 5 ≥ 243, the
// two-code byte 6 ≥ 9) must be reported with its row and group, also in a partial last superblock,
// exactly as the exact path reports it.
TEST(Simd, Q1tBadCodeByteNamesRowAndGroup) {
  if (!simd_cpu_ok()) GTEST_SKIP();
  const uint64_t rows = 3, cols = 320;  // 10 groups: one full superblock of 8 and a partial one
  const Tensor q = make(DType::Q1T, rows, cols, gaussian(rows * cols, 48));
  struct Case {
    uint64_t row, group, byte;
    uint8_t value;
  };
  for (const Case c : {Case{1, 3, 5, 243}, Case{2, 9, 6, 9}, Case{0, 7, 6, 200}}) {
    std::vector<uint8_t> bytes = q.bytes;
    bytes[(c.row * cols / 32 + c.group) * quant::kQ1tTileBytes + 2 + c.byte] = c.value;
    const WeightView qv{DType::Q1T, q.view.shape, bytes, "q1t"};
    const auto x = gaussian(cols * 3, 49);
    std::vector<float> y(rows * 3);
    const std::string want = fmt::format("row {}, group {}", c.row, c.group);
    for (bool exact : {true, false})
      for (size_t n : {size_t{1}, size_t{3}}) {
        try {
          matmul_simd(qv, x.data(), n, y.data(), serial_pool(), exact);
          ADD_FAILURE() << "no throw: " << want;
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::Parse) << e.what();
          EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what() << " / " << want;
        }
      }
  }
}

// The q1t overlay (sparse f16 values over base code 0) is added in f32 on the int8 path: values
// within the int8 bound of the reference (which decodes the overlay), matmul == matvec bitwise.
TEST(Simd, Q1tOverlayOnBothPaths) {
  if (!simd_cpu_ok()) GTEST_SKIP();
  const uint64_t rows = 21, cols = 288;
  const Tensor w = test::q1t_with_overlay(rows, cols, 50);
  ASSERT_GT(w.bytes.size(), rows * cols / 32 * quant::kQ1tTileBytes + 4 * (rows + 1) + 4 * 30);
  const auto X = gaussian(5 * cols, 51);
  for (Path p : {Path::Exact, Path::Int8}) {
    SCOPED_TRACE(p == Path::Exact ? "exact" : "int8");
    const auto y = check_matvec(w, 0, rows, X, p);
    // an overlay value of 100 dominates its row: the overlay is really applied
    EXPECT_GT(std::fabs(y[0]), 10.0f);
    std::vector<float> Y(5 * rows), yi(rows);
    matmul_simd(w.view, X.data(), 5, Y.data(), serial_pool(), p == Path::Exact);
    for (size_t i = 0; i < 5; ++i) {
      matvec_rows_simd(w.view, 0, rows, X.data() + i * cols, yi.data(), serial_pool(), p == Path::Exact);
      EXPECT_EQ(0, std::memcmp(yi.data(), Y.data() + i * rows, rows * 4)) << "token " << i;
    }
  }
}

// Rows with many q1s outliers (25%: ~256 per 1024-column row; the other tests' rows hold ~1%)
// against the reference within the int8 bound, and matmul bitwise equal to matvecs.
TEST(Simd, Q1sManyOutliersPerRow) {
  if (!simd_supported(DType::Q1S)) GTEST_SKIP();
  const uint64_t rows = 7, cols = 1024;
  quant::EncodeOptions eo;
  eo.q1s_keep_frac = 0.25f;
  const Tensor w = make(DType::Q1S, rows, cols, gaussian(rows * cols, 61, 0.05f), eo);
  const quant::Q1sView v = quant::q1s_view(w.view.shape, w.bytes, "w");
  ASSERT_TRUE(v.ascending);
  ASSERT_GE(v.count, rows * 200);
  const auto x = gaussian(cols, 62);
  const auto y = check_matvec(w, 0, rows, x, Path::Int8);
  const auto X = gaussian(3 * cols, 63);
  std::vector<float> Y(3 * rows), yi(rows);
  matmul_simd(w.view, X.data(), 3, Y.data(), serial_pool(), false);
  for (size_t i = 0; i < 3; ++i) {
    matvec_rows_simd(w.view, 0, rows, X.data() + i * cols, yi.data(), serial_pool(), false);
    EXPECT_EQ(0, std::memcmp(yi.data(), Y.data() + i * rows, rows * 4)) << "token " << i;
  }
}

// q1s outliers in any order are legal (a later duplicate wins): such a payload takes the reference,
// bit for bit, while the ascending original runs the SIMD kernels within their bound.
TEST(Simd, Q1sUnorderedOutliersTakeTheReference) {
  if (!simd_cpu_ok()) GTEST_SKIP();
  const uint64_t rows = 9, cols = 128;
  const Tensor w = make(DType::Q1S, rows, cols, gaussian(rows * cols, 52, 0.1f));
  const quant::Q1sView v = quant::q1s_view(w.view.shape, w.bytes, "w");
  ASSERT_TRUE(v.ascending);
  ASSERT_GE(v.count, 4u);
  const std::vector<uint8_t> bytes = test::q1s_unordered(w);
  const WeightView uv{DType::Q1S, w.view.shape, bytes, "w"};
  ASSERT_FALSE(quant::q1s_view(uv.shape, bytes, "w").ascending);
  const auto x = gaussian(cols, 53);
  std::vector<float> ref(rows), y(rows);
  matvec_rows_ref(uv, 0, rows, x.data(), ref.data(), serial_pool());
  for (bool exact : {true, false}) {
    matvec_rows_simd(uv, 0, rows, x.data(), y.data(), serial_pool(), exact);
    EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), rows * 4)) << "exact " << exact;
  }
  // the duplicate really changed a row: the unordered tensor differs from the original there
  std::vector<float> orig(rows);
  matvec_rows_ref(w.view, 0, rows, x.data(), orig.data(), serial_pool());
  EXPECT_NE(0, std::memcmp(orig.data(), ref.data(), rows * 4));
  // the kernels check the entries in their row blocks (a slice each): an index past the tensor is a
  // Parse error for any thread count, row range and batch
  std::vector<uint8_t> oob = w.bytes;
  store_le<uint32_t>(oob.data() + oob.size() - 6, static_cast<uint32_t>(rows * cols));  // last entry
  const WeightView ov{DType::Q1S, w.view.shape, oob, "w"};
  const auto X = gaussian(3 * cols, 56);
  std::vector<float> Y(3 * rows);
  for (size_t th : {1, 2, 3})
    for (bool exact : {true, false})
      for (size_t n : {size_t{1}, size_t{3}}) {
        ThreadPool pool(th);
        try {
          if (n == 1)
            matvec_rows_simd(ov, 1, rows - 1, X.data(), Y.data(), pool, exact);
          else
            matmul_simd(ov, X.data(), n, Y.data(), pool, exact);
          ADD_FAILURE() << "no throw";
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::Parse);
          EXPECT_NE(std::string(e.what()).find("flat index"), std::string::npos) << e.what();
        }
      }
}

// vbit rows carry their own width (3, 4, 5, 6 or 8 bits; the encoder picks it from the row's
// magnitude): rows scaled 2^-6 … 2^6 get every width, each decoded by its own unpacking tables.
TEST(Simd, VbitEveryWidth) {
  if (!simd_supported(DType::VBit)) GTEST_SKIP() << "no AVX-512 VBMI";
  const uint64_t rows = 26, cols = 160;  // 2 full 64-code superblocks and a 32-code tail
  const auto v = vbit_width_sweep(rows, cols, /*rising=*/true);
  for (DType t : {DType::VBit, DType::VBitRo}) {
    SCOPED_TRACE(quant::dtype_name(t));
    const Tensor w = make(t, rows, cols, v);
    const auto seen = widths_seen(quant::vbit_view(t, w.view.shape, w.bytes, "w"));
    for (uint32_t b : {3u, 4u, 5u, 6u, 8u}) EXPECT_TRUE(seen[b]) << "no row of width " << b;
    const auto X = gaussian(3 * cols, 55);
    for (Path p : {Path::Exact, Path::Int8}) {
      check_matvec(w, 0, rows, X, p);
      if (p == Path::Exact) {  // the exact path decodes exactly the reference's f32 weights
        std::vector<float> one(cols, 0.0f), y(rows);
        for (uint64_t c : {uint64_t{0}, uint64_t{77}, cols - 1}) {
          one[c] = 1.0f;
          matvec_rows_simd(w.view, 0, rows, one.data(), y.data(), serial_pool(), true);
          for (uint64_t r = 0; r < rows; ++r) EXPECT_EQ(y[r], w.deq[r * cols + c]) << r << "," << c;
          one[c] = 0.0f;
        }
      }
      std::vector<float> Y(3 * rows), yi(rows);
      matmul_simd(w.view, X.data(), 3, Y.data(), serial_pool(), p == Path::Exact);
      for (size_t i = 0; i < 3; ++i) {
        matvec_rows_simd(w.view, 0, rows, X.data() + i * cols, yi.data(), serial_pool(), p == Path::Exact);
        EXPECT_EQ(0, std::memcmp(yi.data(), Y.data() + i * rows, rows * 4)) << "token " << i;
      }
    }
  }
}

TEST(Simd, Errors) {
  if (!simd_cpu_ok()) GTEST_SKIP();
  EXPECT_EQ(simd_supported(DType::VBit), simd_vbmi_ok());
  EXPECT_EQ(simd_supported(DType::VBitRo), simd_vbmi_ok());
  EXPECT_FALSE(simd_supported(DType::U8));
  {  // a q1t base code byte that is not base-3 (≥ 243) is a Parse error, not a wrong product
    const Tensor q = make(DType::Q1T, 2, 64, gaussian(128, 44));
    std::vector<uint8_t> bytes = q.bytes;
    bytes[quant::kQ1tTileBytes + 3] = 250;  // row 0, group 1, code byte 1
    const WeightView qv{DType::Q1T, q.view.shape, bytes, "q1t"};
    const auto xq = gaussian(64, 45);
    std::vector<float> yq(2);
    for (bool exact : {true, false}) {
      try {
        matvec_rows_simd(qv, 0, 2, xq.data(), yq.data(), serial_pool(), exact);
        ADD_FAILURE() << "no throw";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Parse) << e.what();
      }
    }
  }
  {  // a q1t overlay entry outside the row is a Parse error on every path (checked per decoded row)
    const std::vector<uint8_t> bytes = test::q1t_with_overlay_col_out_of_range();
    ASSERT_EQ(bytes.size(), 2 * 2 * quant::kQ1tTileBytes + 12 + 4);
    const WeightView qv{DType::Q1T, {2, 64}, bytes, "q1t"};
    const auto xq = gaussian(2 * 64, 47);
    std::vector<float> yq(4);
    for (bool exact : {true, false}) {
      for (size_t n : {size_t{1}, size_t{2}}) {
        try {
          if (n == 1)
            matvec_rows_simd(qv, 0, 2, xq.data(), yq.data(), serial_pool(), exact);
          else
            matmul_simd(qv, xq.data(), n, yq.data(), serial_pool(), exact);
          ADD_FAILURE() << "no throw";
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::Parse) << e.what();
          EXPECT_NE(std::string(e.what()).find("q1t"), std::string::npos) << e.what();
        }
      }
    }
  }
  const Tensor w = make(DType::Q8Row, 4, 64, gaussian(256, 41));
  const auto x = gaussian(64, 42);
  std::vector<float> y(4);
  try {
    matvec_rows_simd(w.view, 2, 3, x.data(), y.data(), serial_pool(), true);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Bounds);
  }
  WeightView bad = w.view;
  bad.payload = bad.payload.first(bad.payload.size() - 1);
  try {
    matvec_rows_simd(bad, 0, 1, x.data(), y.data(), serial_pool(), true);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Parse);
  }
  const std::vector<uint8_t> raw(256, 1);
  const WeightView u8{DType::U8, {4, 64}, raw, "u8"};
  try {
    matvec_rows_simd(u8, 0, 1, x.data(), y.data(), serial_pool(), true);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
  }
  if (simd_supported(DType::VBit)) {  // a row width outside {3,4,5,6,8} is a Parse error naming the row
    const Tensor v = make(DType::VBit, 4, 64, gaussian(256, 43));
    std::vector<uint8_t> vb = v.bytes;
    vb[2] = 7;  // row 2's width byte
    const WeightView bv{DType::VBit, v.view.shape, vb, "vbit"};
    for (bool exact : {true, false}) {
      try {
        matvec_rows_simd(bv, 0, 4, x.data(), y.data(), serial_pool(), exact);
        ADD_FAILURE() << "no throw";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Parse);
        EXPECT_NE(std::string(e.what()).find("row 2"), std::string::npos) << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace cortiq::kernels
