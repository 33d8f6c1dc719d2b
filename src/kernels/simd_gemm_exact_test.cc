// The AVX-512 exact GEMM (simd_gemm_exact.h) against the decode-shaped exact dot of
// avx512/exact.cc, bit for bit: matvec_rows_simd (one row × one token, dot_exact_tile<1, 1>) is the
// oracle for every output, over shapes whose columns, rows and tokens are not multiples of the
// chunk (16), the phase block (64), the register tile (4 × 6) or the cache block (48).
#include "kernels/simd_gemm_exact.h"

// GCC 12 false positive on its own _mm512_undefined_* placeholders (see avx512/matvec_internal.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <gtest/gtest.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/simd_matvec.h"
#include "kernels/simd_test_support.h"
#include "util/error.h"

namespace cortiq::kernels {
namespace {

using quant::DType;
using test::gaussian;
using test::make;
using test::Tensor;

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx512f"))) float reduce_one(const float* v) {
  return _mm512_reduce_add_ps(_mm512_loadu_ps(v));
}
#endif

/// Values whose sums round differently under any other pairing: magnitudes 2^-20 … 2^20, signs
/// mixed, some exact cancellations, zeros of both signs.
std::vector<float> spread_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> e(-20, 20), s(0, 1), kind(0, 15);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const int k = kind(rng);
    v[i] = k == 0 ? 0.0f : k == 1 ? -0.0f : (s(rng) ? -1.0f : 1.0f) * std::ldexp(1.0f + 0.37f * k, e(rng));
  }
  return v;
}

#if defined(__x86_64__) || defined(__i386__)
TEST(GemmExact, Reduce16EqualsReduceAddPs) {
  if (!simd_cpu_ok()) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    auto v = spread_values(256, seed);
    if (seed == 7) v[5] = std::numeric_limits<float>::infinity();
    if (seed == 8) v[17] = std::numeric_limits<float>::quiet_NaN();
    if (seed == 9) std::fill(v.begin(), v.begin() + 16, -0.0f);  // −0 survives only the same pairing
    float got[16];
    simd_detail::reduce16_avx512(v.data(), got);
    for (int o = 0; o < 16; ++o) {
      const float want = reduce_one(v.data() + 16 * o);
      EXPECT_EQ(0, std::memcmp(&want, &got[o], 4))
          << "seed " << seed << " output " << o << ": " << got[o] << " vs " << want;
    }
  }
}
#endif  // x86

/// Checks gemm_exact_avx512 on rows [r0, r0+rc) of w, n tokens, into a strided output at column
/// j0, against matvec_rows_simd per token (the exact dot of avx512/exact.cc).
void check_direct(const Tensor& w, uint64_t r0, uint64_t rc, size_t n, uint32_t seed) {
  const uint64_t cols = w.view.shape[1];
  const auto X = gaussian(n * cols, seed);
  const size_t y_stride = rc + 5, j0 = 3;
  std::vector<float> Y(n * y_stride, -7.0f), y(rc);
  const uint64_t esz = w.view.dtype == DType::F32 ? 4 : 2;
  simd_detail::gemm_exact_avx512(w.view.dtype, w.bytes.data() + esz * r0 * cols, rc, cols, X.data(), n,
                                 Y.data(), y_stride, j0);
  for (size_t i = 0; i < n; ++i) {
    matvec_rows_simd(w.view, r0, rc, X.data() + i * cols, y.data(), serial_pool(), true);
    EXPECT_EQ(0, std::memcmp(y.data(), Y.data() + i * y_stride + j0, rc * 4))
        << quant::dtype_name(w.view.dtype) << " cols " << cols << " rows " << rc << " n " << n << " token "
        << i;
    for (size_t j = 0; j < j0; ++j) EXPECT_EQ(Y[i * y_stride + j], -7.0f) << "wrote outside its columns";
    for (size_t j = j0 + rc; j < y_stride; ++j) EXPECT_EQ(Y[i * y_stride + j], -7.0f) << "wrote outside";
  }
}

TEST(GemmExact, EqualsExactDotBitwiseOverShapes) {
  if (!simd_cpu_ok()) GTEST_SKIP() << "no AVX-512 on this CPU";
  uint32_t seed = 100;
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (uint64_t cols : {1, 15, 16, 17, 48, 63, 64, 65, 100, 129, 256, 300, 768}) {
      const uint64_t rows = 21;
      const Tensor w = make(t, rows, cols, gaussian(rows * cols, ++seed, 0.3f));
      for (size_t n : {1, 5, 6, 7, 13, 16, 47, 48, 49, 97})
        for (auto [r0, rc] : {std::pair<uint64_t, uint64_t>{0, 16}, {2, 1}, {3, 7}, {0, 21}, {5, 4}})
          check_direct(w, r0, rc, n, ++seed);
    }
}

/// Rows longer than one column panel (1024) take the panelled driver, whose chains continue across
/// panel boundaries: the same bits as the unsplit exact dot, with the leftover chunks and the
/// masked tail in the last panel (4864 = the FFN down projection of Qwen2.5-0.5B).
TEST(GemmExact, EqualsExactDotBitwiseAcrossColumnPanels) {
  if (!simd_cpu_ok()) GTEST_SKIP() << "no AVX-512 on this CPU";
  uint32_t seed = 900;
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (uint64_t cols : {1025, 1040, 1088, 2047, 2048, 2113, 4864}) {
      const uint64_t rows = 21;
      const Tensor w = make(t, rows, cols, gaussian(rows * cols, ++seed, 0.3f));
      for (size_t n : {1, 6, 13})
        for (auto [r0, rc] : {std::pair<uint64_t, uint64_t>{0, 16}, {3, 7}, {0, 21}})
          check_direct(w, r0, rc, n, ++seed);
    }
}

TEST(GemmExact, SpecialValuesBitwise) {
  if (!simd_cpu_ok()) GTEST_SKIP() << "no AVX-512 on this CPU";
  const uint64_t rows = 9, cols = 70;
  auto v = spread_values(rows * cols, 3);
  for (uint64_t c = 0; c < cols; ++c) v[4 * cols + c] = -0.0f;  // an all −0 row
  v[6 * cols + 11] = std::numeric_limits<float>::infinity();
  v[7 * cols + 69] = std::numeric_limits<float>::quiet_NaN();  // in the tail chunk
  const Tensor w = make(DType::F32, rows, cols, v);
  check_direct(w, 0, rows, 13, 5);
}

/// The public path: matmul_simd (row blocks over the pool, the GEMM from kGemmExactMinRows
/// tokens) equals matvecs bitwise at 1 and 3 threads, for f32 / f16 / bf16 and q8_row (rows
/// decoded first).
TEST(GemmExact, MatmulEqualsMatvecsAtOneAndThreeThreads) {
  if (!simd_cpu_ok()) GTEST_SKIP() << "no AVX-512 on this CPU";
  ThreadPool three(3);
  uint32_t seed = 500;
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8Row})
    for (auto [rows, cols] : {std::pair<uint64_t, uint64_t>{37, 200}, {130, 257}, {6, 768}}) {
      const Tensor w = make(t, rows, cols, gaussian(rows * cols, ++seed, 0.1f));
      for (size_t n : {simd_detail::kGemmExactMinRows, size_t{11}, size_t{50}}) {
        const auto X = gaussian(n * cols, ++seed);
        std::vector<float> y(rows), Y1(n * rows), Y3(n * rows);
        matmul_simd(w.view, X.data(), n, Y1.data(), serial_pool(), true);
        matmul_simd(w.view, X.data(), n, Y3.data(), three, true);
        EXPECT_EQ(0, std::memcmp(Y1.data(), Y3.data(), Y1.size() * 4)) << "threads differ";
        for (size_t i = 0; i < n; ++i) {
          matvec_rows_simd(w.view, 0, rows, X.data() + i * cols, y.data(), serial_pool(), true);
          EXPECT_EQ(0, std::memcmp(y.data(), Y1.data() + i * rows, rows * 4))
              << quant::dtype_name(t) << " " << rows << "x" << cols << " n " << n << " token " << i;
        }
      }
    }
}

TEST(GemmExact, OtherDtypeIsUnsupported) {
  if (!simd_cpu_ok()) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::vector<uint8_t> b(64);
  std::vector<float> x(16 * 6), y(6);
  EXPECT_THROW(simd_detail::gemm_exact_avx512(DType::Q8Row, b.data(), 1, 16, x.data(), 6, y.data(), 1, 0),
               Error);
}

}  // namespace
}  // namespace cortiq::kernels
