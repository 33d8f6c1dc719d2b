// kernels::Ops: a table dispatches on its own config, not the process globals — two tables of
// different modes and tiers, used alternately and from two threads at once, each give exactly what
// the free functions give while the globals are set to that table's config.
#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "kernels/simd_test_support.h"

namespace cortiq::kernels {
namespace {

using test::make;

/// y[n, rows] from the free function under the given global mode and tier.
std::vector<float> global_matmul(const WeightView& w, const std::vector<float>& x, size_t n, KernelConfig c,
                                 ThreadPool& pool) {
  const ScopedMatmulMode m(c.mode);
  const ScopedSimdTier t(c.tier);
  std::vector<float> y(n * w.rows());
  matmul(w, x.data(), n, y.data(), pool);
  return y;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Ops, TablesOfDifferentModesAndTiersDispatchOnTheirOwnConfig) {
  ThreadPool pool(1);
  const uint64_t rows = 48, cols = 256;
  const size_t n = 3;
  const std::vector<float> x = test::gaussian(n * cols, 7);
  std::vector<KernelConfig> configs;
  for (MatmulMode m : {MatmulMode::Fast, MatmulMode::Exact, MatmulMode::Reference})
    for (SimdTier t : {SimdTier::Scalar, SimdTier::Avx2, SimdTier::Avx512})
      if (t <= best_simd_tier()) configs.push_back({m, t});
  for (quant::DType dt : {quant::DType::Q8Row, quant::DType::Q4Block, quant::DType::F16}) {
    const test::Tensor w = make(dt, rows, cols, test::gaussian(rows * cols, 11, 0.05f));
    std::vector<std::vector<float>> want;
    for (const KernelConfig& c : configs) want.push_back(global_matmul(w.view, x, n, c, pool));
    // Fast and Exact differ where an int8 path exists, so a table that read the globals would fail.
    auto at = [&](MatmulMode m) {
      for (size_t i = 0; i < configs.size(); ++i)
        if (configs[i].mode == m && configs[i].tier == best_simd_tier()) return i;
      return size_t{0};
    };
    if (dt != quant::DType::F16 && best_simd_tier() != SimdTier::Scalar) {
      EXPECT_FALSE(same_bits(want[at(MatmulMode::Fast)], want[at(MatmulMode::Exact)]));
    }
    // The globals now say Fast on the best tier; every table ignores them.
    for (size_t round = 0; round < 2; ++round)
      for (size_t i = 0; i < configs.size(); ++i) {
        const Ops ops(configs[i]);
        std::vector<float> y(n * rows);
        ops.matmul(w.view, x.data(), n, y.data(), pool);
        EXPECT_TRUE(same_bits(y, want[i])) << quant::dtype_name(dt) << " config " << i;
        std::vector<float> y1(rows);
        ops.matvec_rows(w.view, 0, rows, x.data(), y1.data(), pool);
        EXPECT_EQ(std::memcmp(y1.data(), want[i].data(), rows * sizeof(float)), 0)
            << "matvec_rows, config " << i;
      }
    // Two tables at once from two threads (each with its own pool).
    const size_t a = at(MatmulMode::Fast), b = at(MatmulMode::Exact);
    std::vector<float> ya(n * rows), yb(n * rows);
    std::thread ta([&] {
      ThreadPool p(1);
      for (int k = 0; k < 20; ++k) Ops(configs[a]).matmul(w.view, x.data(), n, ya.data(), p);
    });
    std::thread tb([&] {
      ThreadPool p(1);
      for (int k = 0; k < 20; ++k) Ops(configs[b]).matmul(w.view, x.data(), n, yb.data(), p);
    });
    ta.join();
    tb.join();
    EXPECT_TRUE(same_bits(ya, want[a]));
    EXPECT_TRUE(same_bits(yb, want[b]));
  }
}

TEST(Ops, TierIsClampedToTheCpuAndNamesFollowTheTable) {
  const Ops top({MatmulMode::Fast, SimdTier::Avx512});
  EXPECT_EQ(top.config().tier, best_simd_tier());
  EXPECT_STREQ(Ops({MatmulMode::Reference, SimdTier::Avx512}).kernel_name(quant::DType::Q8Row), "reference");
  EXPECT_STREQ(Ops({MatmulMode::Fast, SimdTier::Scalar}).kernel_name(quant::DType::Q8Row), "reference");
  {
    const ScopedSimdTier s(SimdTier::Scalar);  // the globals do not reach a table
    EXPECT_STREQ(top.kernel_name(quant::DType::Q8Row), best_simd_tier() == SimdTier::Avx512 ? "avx512"
                                                       : best_simd_tier() == SimdTier::Avx2 ? "avx2"
                                                                                            : "reference");
  }
}

}  // namespace
}  // namespace cortiq::kernels
