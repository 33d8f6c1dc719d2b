// kernels::prepare_weight (kernels.h): the q4tp/q2tp ladder bases it derives once per tensor, and the
// products of a prepared view, which must equal those of an unprepared one bit for bit on every tier.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/simd_avx2.h"
#include "kernels/simd_matvec.h"
#include "kernels/simd_test_support.h"
#include "quant/codec.h"
#include "quant/layout.h"
#include "util/error.h"

namespace cortiq::kernels {
namespace {

using quant::DType;
using test::gaussian;
using test::make;

/// Rows spread over 2^-12…2^4 so the rows' lo and step (and their exp2) differ widely.
std::vector<float> spread(uint64_t rows, uint64_t cols, uint32_t seed) {
  std::vector<float> v = gaussian(rows * cols, seed);
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c = 0; c < cols; ++c) v[r * cols + c] *= std::ldexp(1.0f, static_cast<int>(r % 17) - 12);
  return v;
}

TEST(PrepareWeight, BasesAreTheLaddersFirstRungAndRatio) {
  for (DType t : {DType::Q4TP, DType::Q2TP}) {
    const uint64_t rows = 37, cols = 96;
    test::Tensor w = make(t, rows, cols, spread(rows, cols, 7));
    prepare_weight(w.view);
    ASSERT_TRUE(w.view.prepared) << quant::dtype_name(t);
    ASSERT_EQ(w.view.prepared->size(), 2 * rows);
    const quant::TpView tp = quant::tp_view(t, w.view.shape, w.view.payload, "w");
    for (uint64_t r = 0; r < rows; ++r) {
      float lad[32];
      quant::q4tp_ladder(tp.lo_f16(r), tp.step_f16(r), lad);
      const float t0 = (*w.view.prepared)[r], ratio = (*w.view.prepared)[rows + r];
      EXPECT_EQ(std::memcmp(&t0, &lad[0], 4), 0) << "row " << r;
      const float next = t0 * ratio;  // the ladder's rung 1 is this product (FORMAT-NOTES §1.8)
      EXPECT_EQ(std::memcmp(&next, &lad[1], 4), 0) << "row " << r;
    }
  }
}

TEST(PrepareWeight, OtherDtypesStayUnprepared) {
  for (DType t : {DType::Q8Row, DType::Q4Block, DType::F32}) {
    test::Tensor w = make(t, 4, 64, gaussian(256, 8));
    const uint8_t* before = w.view.payload.data();
    prepare_weight(w.view);
    EXPECT_FALSE(w.view.prepared) << quant::dtype_name(t);
    EXPECT_FALSE(w.view.storage) << quant::dtype_name(t);
    EXPECT_EQ(w.view.dtype, t);
    EXPECT_EQ(w.view.payload.data(), before);
  }
}

// q4_tiled is copied into q4_block layout: the bytes convert() writes for q4_block, the same decoded
// values, and every source byte handed to `release` once, in order, in pieces of about 1 MiB split
// at 64 KiB-aligned addresses.
// 2048 × 1024 (1.2 MB) takes two pieces.
TEST(PrepareWeight, Q4TiledBecomesQ4BlockOfTheSameValues) {
  for (auto [rows, cols] : {std::pair<uint64_t, uint64_t>{1, 32}, {37, 96}, {2048, 1024}}) {
    const std::vector<float> v = spread(rows, cols, 21);
    const test::Tensor tiled = make(DType::Q4Tiled, rows, cols, v);
    const test::Tensor block = make(DType::Q4Block, rows, cols, v);
    WeightView w = tiled.view;
    std::vector<std::span<const uint8_t>> released;
    HugeArena arena(size_t{1} << 20);
    prepare_weight(
        w, {[&](std::span<const uint8_t> b) { released.push_back(b); }, rows == 37 ? &arena : nullptr});
    EXPECT_EQ(w.dtype, DType::Q4Block);
    ASSERT_TRUE(w.storage);
    EXPECT_FALSE(w.prepared);
    EXPECT_EQ(w.shape, tiled.view.shape);
    ASSERT_EQ(w.payload.size(), block.view.payload.size());
    EXPECT_EQ(std::memcmp(w.payload.data(), block.view.payload.data(), w.payload.size()), 0)
        << rows << "x" << cols;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(w.payload.data()) % 64, 0u);
    std::vector<float> a(rows * cols), b(rows * cols);
    decode_rows(tiled.view, 0, rows, a.data());
    decode_rows(w, 0, rows, b.data());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), 4 * a.size()), 0);
    ASSERT_FALSE(released.empty());
    const uint8_t* next = tiled.view.payload.data();
    for (const auto& r : released) {
      EXPECT_EQ(r.data(), next);
      EXPECT_LE(r.size(), (size_t{1} << 20) + (size_t{64} << 10));
      next = r.data() + r.size();
      if (&r != &released.back()) {  // split only at 64 KiB-aligned addresses
        EXPECT_EQ(reinterpret_cast<uintptr_t>(next) % (uintptr_t{64} << 10), 0u);
      }
    }
    EXPECT_EQ(next, tiled.view.payload.data() + tiled.view.payload.size());
    if (rows == 2048) {
      EXPECT_GT(released.size(), 1u);
    }
    prepare_weight(w);  // a prepared view is q4_block: preparing it again changes nothing
    EXPECT_EQ(w.dtype, DType::Q4Block);
    EXPECT_EQ(std::memcmp(w.payload.data(), block.view.payload.data(), w.payload.size()), 0);
  }
}

TEST(PrepareWeight, ParseErrorOnABadPayload) {
  for (DType t : {DType::Q4TP, DType::Q4Tiled}) {
    test::Tensor w = make(t, 4, 64, gaussian(256, 9));
    WeightView bad = w.view;
    bad.payload = bad.payload.first(bad.payload.size() - 1);
    try {
      prepare_weight(bad);
      ADD_FAILURE() << quant::dtype_name(t) << ": no throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Parse) << e.what();
      EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
    }
  }
}

using Product = std::function<void(const WeightView&, const float*, size_t, float*, ThreadPool&, bool)>;

/// One SIMD tier's product: its matvec_rows over every row for n = 1, else its matmul.
template <auto MatvecRows, auto Matmul>
Product tier_product() {
  return [](const WeightView& w, const float* x, size_t n, float* y, ThreadPool& p, bool exact) {
    if (n == 1)
      MatvecRows(w, 0, w.rows(), x, y, p, exact);
    else
      Matmul(w, x, n, y, p, exact);
  };
}

/// The dispatching product (kernels.h, the tier the CPU has) and each SIMD tier this CPU runs.
std::vector<std::pair<const char*, Product>> tiers() {
  std::vector<std::pair<const char*, Product>> v;
  v.emplace_back("dispatch",
                 [](const WeightView& w, const float* x, size_t n, float* y, ThreadPool& p, bool) {
                   if (n == 1)
                     matvec(w, x, y, p);
                   else
                     matmul(w, x, n, y, p);
                 });
  if (simd_cpu_ok()) v.emplace_back("avx512", tier_product<matvec_rows_simd, matmul_simd>());
  if (avx2_cpu_ok()) v.emplace_back("avx2", tier_product<matvec_rows_avx2, matmul_avx2>());
  return v;
}

// 37 × 96: NIB superblocks only, a 5-row tail of the last 16-row block; 70 × 1024: NIBQ quads and
// ladder batches of 64 rows plus a tail; both exact and int8, one and several tokens, 1 and 3 threads.
TEST(PrepareWeight, PreparedProductsEqualUnpreparedBitwise) {
  ThreadPool pool3(3);
  for (DType t : {DType::Q4TP, DType::Q2TP})
    for (auto [rows, cols] : {std::pair<uint64_t, uint64_t>{37, 96}, {70, 1024}}) {
      const test::Tensor w = make(t, rows, cols, spread(rows, cols, 11));
      WeightView prepared = w.view;
      prepare_weight(prepared);
      ASSERT_TRUE(prepared.prepared);
      for (size_t n : {1, 5}) {
        const std::vector<float> x = gaussian(n * cols, 12);
        for (const auto& [tier, product] : tiers())
          for (bool exact : {false, true})
            for (ThreadPool* pool : {&serial_pool(), &pool3}) {
              std::vector<float> a(n * rows, -1.0f), b(n * rows, -2.0f);
              product(w.view, x.data(), n, a.data(), *pool, exact);
              product(prepared, x.data(), n, b.data(), *pool, exact);
              EXPECT_EQ(std::memcmp(a.data(), b.data(), 4 * a.size()), 0)
                  << quant::dtype_name(t) << " " << rows << "x" << cols << " n=" << n << " " << tier
                  << (exact ? " exact" : " int8") << " threads=" << pool->size();
            }
      }
    }
}

TEST(PrepareWeight, PreparedDataOfAnotherShapeIsRejected) {
  test::Tensor w = make(DType::Q4TP, 16, 64, gaussian(16 * 64, 13));
  prepare_weight(w.view);
  test::Tensor other = make(DType::Q4TP, 32, 64, gaussian(32 * 64, 14));
  other.view.prepared = w.view.prepared;  // 2·16 values for 32 rows
  const std::vector<float> x = gaussian(64, 15);
  std::vector<float> y(32);
  for (const auto& [tier, product] : tiers()) {
    if (std::string(tier) == "dispatch") continue;
    try {
      product(other.view, x.data(), 1, y.data(), serial_pool(), false);
      ADD_FAILURE() << tier << ": no throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << tier << ": " << e.what();
    }
  }
}

// prepare_weight leaves a kernel plan (weight_plan.h) on every dtype with a SIMD kernel; the
// products of the planned view equal those of the same view with its plan dropped (which the tiers
// parse per call) bit for bit, for every such dtype, exact and int8, one and several tokens.
TEST(PrepareWeight, PlannedProductsEqualUnplannedBitwiseForEveryDtype) {
  ThreadPool pool3(3);
  for (DType t : test::kSimdDtypes) {
    const uint64_t rows = 37, cols = 96;
    const test::Tensor w = make(t, rows, cols, spread(rows, cols, 31));
    WeightView planned = w.view;
    prepare_weight(planned);
    ASSERT_TRUE(planned.plan) << quant::dtype_name(t);
    WeightView unplanned = planned;
    unplanned.plan.reset();
    for (size_t n : {1, 4}) {
      const std::vector<float> x = gaussian(n * cols, 32);
      for (const auto& [tier, product] : tiers())
        for (bool exact : {false, true})
          for (ThreadPool* pool : {&serial_pool(), &pool3}) {
            std::vector<float> a(n * rows, -1.0f), b(n * rows, -2.0f);
            product(unplanned, x.data(), n, a.data(), *pool, exact);
            product(planned, x.data(), n, b.data(), *pool, exact);
            EXPECT_EQ(std::memcmp(a.data(), b.data(), 4 * a.size()), 0)
                << quant::dtype_name(t) << " n=" << n << " " << tier << (exact ? " exact" : " int8")
                << " threads=" << pool->size();
          }
    }
  }
}

// q1s outliers that do not ascend: the plan records it, and the planned product still equals the
// unplanned one (both end in the reference path).
TEST(PrepareWeight, PlannedUnorderedQ1sEqualsUnplanned) {
  const test::Tensor base = make(DType::Q1S, 16, 64, gaussian(16 * 64, 33));
  const std::vector<uint8_t> bytes = test::q1s_unordered(base);
  WeightView planned{DType::Q1S, base.view.shape, bytes, "w"};
  prepare_weight(planned);
  ASSERT_TRUE(planned.plan);
  WeightView unplanned = planned;
  unplanned.plan.reset();
  const std::vector<float> x = gaussian(64, 34);
  for (const auto& [tier, product] : tiers()) {
    std::vector<float> a(16, -1.0f), b(16, -2.0f);
    product(unplanned, x.data(), 1, a.data(), serial_pool(), false);
    product(planned, x.data(), 1, b.data(), serial_pool(), false);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), 4 * a.size()), 0) << tier;
  }
}

// A view copied from a planned one and pointed at other bytes keeps a plan that describes another
// tensor: the products refuse it, naming the tensor, instead of reading the old layout.
TEST(PrepareWeight, APlanOfOtherBytesIsRefused) {
  test::Tensor w = make(DType::Q8Row, 16, 64, gaussian(16 * 64, 35));
  test::Tensor other = make(DType::Q8Row, 16, 64, gaussian(16 * 64, 36));
  prepare_weight(w.view);
  WeightView stale = w.view;
  stale.payload = other.view.payload;
  const std::vector<float> x = gaussian(64, 37);
  std::vector<float> y(16);
  for (const auto& [tier, product] : tiers()) {
    try {
      product(stale, x.data(), 1, y.data(), serial_pool(), false);
      ADD_FAILURE() << tier << ": no throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << tier << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace cortiq::kernels
