#include "kernels/kernels.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "kernels/simd_avx2.h"
#include "kernels/simd_matvec.h"
#include "quant/codec.h"
#include "util/error.h"

namespace cortiq::kernels {
namespace {

std::vector<float> randv(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

struct Owned {
  std::vector<uint8_t> bytes;
  WeightView view;
};

Owned make(quant::DType t, uint64_t rows, uint64_t cols, const std::vector<float>& v) {
  Owned o;
  std::vector<uint64_t> shape{rows, cols};
  o.bytes = quant::encode(t, shape, v);
  o.view = WeightView{t, shape, o.bytes, "w"};
  return o;
}

TEST(Kernels, MatvecEveryDtypeEqualsDecodedDoubleDot) {
  // The reference mode is bit-exact against a double dot; the SIMD modes are tested against it
  // with their documented bounds in simd_matvec_test.cc.
  ScopedMatmulMode mode(MatmulMode::Reference);
  const uint64_t rows = 37, cols = 96;
  const auto w = randv(rows * cols, 1), x = randv(cols, 2);
  ThreadPool pool(3);
  for (int id = 0; id < quant::kNumDTypes; ++id) {
    const auto t = *quant::dtype_from_id(static_cast<uint8_t>(id));
    if (!has_kernel(t)) continue;
    SCOPED_TRACE(std::string(quant::dtype_name(t)));
    auto o = make(t, rows, cols, w);
    check_weight(o.view);
    std::vector<float> deq(rows * cols);
    quant::decode(t, o.view.shape, o.bytes, deq);
    std::vector<float> y(rows), y1(rows);
    matvec(o.view, x.data(), y.data(), pool);
    matvec(o.view, x.data(), y1.data(), serial_pool());
    for (uint64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (uint64_t c = 0; c < cols; ++c) s += static_cast<double>(deq[r * cols + c]) * x[c];
      EXPECT_EQ(y[r], static_cast<float>(s)) << r;
      EXPECT_EQ(y[r], y1[r]);  // thread-count independent
    }
    // Batched matmul is bit-identical to per-row matvec; a row slice too.
    const auto X = randv(3 * cols, 3);
    std::vector<float> Y(3 * rows), yy(rows), ys(5);
    matmul(o.view, X.data(), 3, Y.data(), pool);
    for (int i = 0; i < 3; ++i) {
      matvec(o.view, X.data() + i * cols, yy.data(), pool);
      for (uint64_t r = 0; r < rows; ++r) EXPECT_EQ(Y[i * rows + r], yy[r]);
    }
    matvec_rows(o.view, 10, 5, x.data(), ys.data(), pool);
    for (int r = 0; r < 5; ++r) EXPECT_EQ(ys[r], y[10 + r]);
  }
}

// The public matvec/matmul run exactly the kernel of the selected tier (bit for bit), the tier
// never rises above what the CPU has, and kernel_name reports what runs.
TEST(Kernels, SimdTierSelectsTheKernel) {
  using quant::DType;
  const auto w = make(DType::Q8Row, 37, 96, randv(37 * 96, 5));
  const auto x = randv(2 * 96, 6);
  std::vector<float> got(2 * 37), want(2 * 37);
  ThreadPool pool(2);
  for (SimdTier t : {SimdTier::Avx512, SimdTier::Avx2, SimdTier::Scalar}) {
    ScopedSimdTier scoped(t);
    EXPECT_EQ(simd_tier(), std::min(t, best_simd_tier()));
    const SimdTier used = simd_tier();
    for (MatmulMode mode : {MatmulMode::Fast, MatmulMode::Exact}) {
      ScopedMatmulMode m(mode);
      const bool exact = mode == MatmulMode::Exact;
      matmul(w.view, x.data(), 2, got.data(), pool);
      if (used == SimdTier::Avx512) {
        EXPECT_STREQ(kernel_name(DType::Q8Row), "avx512");
        matmul_simd(w.view, x.data(), 2, want.data(), pool, exact);
      } else if (used == SimdTier::Avx2) {
        EXPECT_STREQ(kernel_name(DType::Q8Row), "avx2");
        matmul_avx2(w.view, x.data(), 2, want.data(), pool, exact);
      } else {
        EXPECT_STREQ(kernel_name(DType::Q8Row), "reference");
        matmul_ref(w.view, x.data(), 2, want.data(), pool);
      }
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << simd_tier_name(used);
      matvec(w.view, x.data(), got.data(), pool);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), 37 * sizeof(float))) << simd_tier_name(used);
    }
  }
  {
    ScopedMatmulMode m(MatmulMode::Reference);
    EXPECT_STREQ(kernel_name(DType::Q8Row), "reference");
  }
  {
    ScopedSimdTier st(SimdTier::Avx2);
    EXPECT_STREQ(kernel_name(DType::VBit), "avx2");  // the AVX2 tier unpacks vbit too (no VBMI needed)
    EXPECT_STREQ(kernel_name(DType::U8), "reference");
  }
}

// matmul_multi equals separate matmul calls bit for bit in every tier and mode, with dtypes that
// need per-product scratch in one call: two q8_2f column fields (each folds its own into the
// activation, so they must not share it) and vbit before q4tp (int8 layouts that differ).
TEST(Kernels, MatmulMultiEqualsSeparateMatmuls) {
  using quant::DType;
  const uint64_t cols = 160;
  const auto a = make(DType::Q8_2F, 40, cols, randv(40 * cols, 11));
  const auto b = make(DType::Q8_2F, 24, cols, randv(24 * cols, 12, 3.0f));
  const auto c = make(DType::Q4TP, 33, cols, randv(33 * cols, 13));
  const auto d = make(DType::F16, 17, cols, randv(17 * cols, 14));
  // vbit: the reference in the AVX2 and scalar tiers, a per-product scratch view in AVX-512's
  const auto e = make(DType::VBit, 9, cols, randv(9 * cols, 15));
  const auto g = make(DType::Q4Block, 11, cols, randv(11 * cols, 18));
  const std::vector<const WeightView*> ws{&a.view, &b.view, &e.view, &c.view, &g.view, &d.view};
  ThreadPool pool(2);
  for (SimdTier t : {SimdTier::Avx512, SimdTier::Avx2, SimdTier::Scalar})
    for (MatmulMode mode : {MatmulMode::Fast, MatmulMode::Exact})
      for (size_t n : {size_t{1}, size_t{3}})
        for (size_t m : {size_t{4}, size_t{6}}) {  // 6 > the AVX-512 call's scratch slots
          ScopedSimdTier st(t);
          ScopedMatmulMode sm(mode);
          const auto x = randv(n * cols, 16);
          std::vector<std::vector<float>> got(m), want(m);
          std::vector<float*> ys;
          for (size_t j = 0; j < m; ++j) {
            got[j].assign(n * ws[j]->rows(), -1.0f);
            want[j].assign(n * ws[j]->rows(), -2.0f);
            ys.push_back(got[j].data());
            matmul(*ws[j], x.data(), n, want[j].data(), pool);
          }
          matmul_multi(std::span(ws.data(), m), x.data(), n, ys, pool);
          for (size_t j = 0; j < m; ++j)
            EXPECT_EQ(0, std::memcmp(got[j].data(), want[j].data(), got[j].size() * sizeof(float)))
                << simd_tier_name(t) << " exact=" << (mode == MatmulMode::Exact) << " n=" << n << " j=" << j;
        }
  const auto narrow = make(DType::F16, 4, 64, randv(256, 17));
  const std::vector<const WeightView*> bad{&a.view, &narrow.view};
  std::vector<float> y1(40), y2(4);
  const std::vector<float*> ys{y1.data(), y2.data()};
  const auto x = randv(cols, 18);
  EXPECT_THROW(matmul_multi(bad, x.data(), 1, ys, pool), Error);
  EXPECT_THROW(matmul_multi(std::span(ws.data(), 2), x.data(), 1, std::span(ys.data(), 1), pool), Error);
}

TEST(Kernels, UnsupportedDtypeNamesTensor) {
  WeightView w{quant::DType::Mix8_4, {4, 4}, {}, "model.layers.3.mlp.up_proj.weight"};
  try {
    check_weight(w);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("model.layers.3.mlp.up_proj.weight"), std::string::npos);
  }
}

TEST(Kernels, RmsNormStyles) {
  const float x[4] = {1, -2, 3, -4};
  const float w[4] = {0.5f, 1, 2, -1};
  float q[4], g[4], n[4];
  rmsnorm(x, w, 4, 1e-6, NormStyle::Qwen, q);
  rmsnorm(x, w, 4, 1e-6, NormStyle::Gemma, g);
  rmsnorm(x, nullptr, 4, 1e-6, NormStyle::Qwen, n);
  const double inv = 1.0 / std::sqrt(30.0 / 4 + 1e-6);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(n[i], x[i] * inv, 1e-6);
    EXPECT_NEAR(q[i], x[i] * inv * w[i], 1e-6);
    EXPECT_NEAR(g[i], x[i] * inv * (1 + w[i]), 1e-6);
  }
}

TEST(Kernels, Activations) {
  EXPECT_NEAR(silu(1.0f), 0.7310585786f, 1e-7);
  EXPECT_NEAR(gelu_tanh(1.0f), 0.8411920071f, 1e-7);  // torch gelu(approximate='tanh')
  EXPECT_NEAR(gelu_tanh(-2.0f), -0.0454023f, 1e-6);
  float v[3] = {1, 2, 3};
  softmax(v, 3);
  EXPECT_NEAR(v[0], 0.09003057f, 1e-7);
  EXPECT_NEAR(v[2], 0.66524096f, 1e-7);
  float c[2] = {100.0f, -1.0f};
  softcap(c, 2, 30.0f);
  EXPECT_NEAR(c[0], 30.0 * std::tanh(100.0 / 30.0), 1e-5);
}

// PITFALLS RUN-1: Llama-3.2-1B rope_scaling → inv_freq values.
TEST(Kernels, Llama3RopeScaling) {
  const auto ff = llama3_freq_factors(64, 500000.0, 32.0, 1.0, 4.0, 8192.0);
  auto t = make_rope(64, 500000.0, 1.0, std::nullopt, ff);
  ASSERT_EQ(t.inv_freq.size(), 32u);
  EXPECT_NEAR(t.inv_freq[14], 3.211445995e-3, 3.211445995e-3 * 1e-6);
  EXPECT_NEAR(t.inv_freq[15], 1.290547928e-3, 1.290547928e-3 * 1e-5);
  EXPECT_NEAR(t.inv_freq[16], 4.295567966e-4, 4.295567966e-4 * 1e-5);
  EXPECT_NEAR(t.inv_freq[17], 9.708287803e-5, 9.708287803e-5 * 1e-5);
  EXPECT_NEAR(t.inv_freq[18], 1.946163818e-5, 1.946163818e-5 * 1e-6);
  EXPECT_NEAR(t.inv_freq[31], 9.418306725e-8, 9.418306725e-8 * 1e-6);
}

TEST(Kernels, RopeHalfSplitAndPartial) {
  auto t = make_rope(8, 10000.0, 0.5, std::nullopt, {});
  ASSERT_EQ(t.rotary_dim, 4u);
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  rope(x, 1, 8, t, 3);
  // pair (0,2) with inv_freq 1, pair (1,3) with inv_freq 1/100
  const double a0 = 3.0, a1 = 3.0 / 100.0;
  EXPECT_NEAR(x[0], 1 * std::cos(a0) - 3 * std::sin(a0), 1e-6);
  EXPECT_NEAR(x[2], 3 * std::cos(a0) + 1 * std::sin(a0), 1e-6);
  EXPECT_NEAR(x[1], 2 * std::cos(a1) - 4 * std::sin(a1), 1e-6);
  EXPECT_NEAR(x[3], 4 * std::cos(a1) + 2 * std::sin(a1), 1e-6);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(x[i], i + 1);  // pass-through tail
}

TEST(Kernels, YarnRampBlendsFrequencies) {
  YarnParams y{4.0, 64.0, 32.0, 1.0, 1.5};
  auto base = make_rope(16, 10000.0, 1.0, std::nullopt, {});
  auto t = make_rope(16, 10000.0, 1.0, y, {});
  EXPECT_EQ(t.scale, 1.5f);
  EXPECT_FLOAT_EQ(t.inv_freq[0], base.inv_freq[0]);         // high frequency: extrapolated
  EXPECT_FLOAT_EQ(t.inv_freq[7], base.inv_freq[7] / 4.0f);  // low frequency: interpolated
}

TEST(Kernels, AttentionGqaWindowSoftcapMatchesNaive) {
  const size_t nh = 4, nkv = 2, hd = 8, cap = 10, npos = 7;
  auto K = randv(nkv * cap * hd, 5), Vv = randv(nkv * cap * hd, 6), q = randv(nh * hd, 7);
  KvLayerView kv{K.data(), Vv.data(), false, cap};
  AttentionParams p{nh, nkv, hd, 0.35f, 2.0f};
  const uint8_t alive[4] = {1, 0, 1, 1};
  std::vector<float> out(nh * hd);
  attention(q.data(), kv, 2, npos, p, alive, out.data());
  for (size_t h = 0; h < nh; ++h) {
    const size_t g = h / 2;
    std::vector<double> s;
    for (size_t j = 2; j < npos; ++j) {
      double d = 0;
      for (size_t c = 0; c < hd; ++c) d += q[h * hd + c] * K[(g * cap + j) * hd + c];
      s.push_back(2.0 * std::tanh(d * 0.35 / 2.0));
    }
    double mx = *std::max_element(s.begin(), s.end()), sum = 0;
    for (auto& x : s) sum += (x = std::exp(x - mx));
    for (size_t c = 0; c < hd; ++c) {
      double o = 0;
      for (size_t j = 2; j < npos; ++j) o += s[j - 2] / sum * Vv[(g * cap + j) * hd + c];
      EXPECT_NEAR(out[h * hd + c], h == 1 ? 0.0 : o, 1e-6);
    }
  }
}

TEST(Kernels, ThreadPoolCoversRangeAndPropagatesErrors) {
  ThreadPool pool(4);
  std::vector<int> hit(1000, 0);
  pool.parallel_for(1000, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) hit[i]++;
  });
  for (int h : hit) EXPECT_EQ(h, 1);
  EXPECT_THROW(pool.parallel_for(100,
                                 [&](size_t b, size_t) {
                                   if (b > 0) throw std::runtime_error("x");
                                 }),
               std::runtime_error);
  pool.parallel_for(10, [&](size_t, size_t) {});  // still usable
}

// Back-to-back jobs smaller than the pool (idle workers must not pick up the next job's fields as
// their own), jobs after the workers went to sleep, and a caller-side exception.
TEST(Kernels, ThreadPoolRapidSmallJobsRunEachIndexOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hit(4);
  for (int rep = 0; rep < 20000; ++rep) {
    const size_t n = 1 + static_cast<size_t>(rep % 4);
    pool.parallel_for(n, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) hit[i].fetch_add(1, std::memory_order_relaxed);
    });
  }
  // index i is in a job of size n > i: sizes 1..4 cycle 5000 times each.
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(hit[i].load(), 5000 * static_cast<int>(4 - i)) << i;
  std::this_thread::sleep_for(std::chrono::milliseconds(10));  // past the spin window: workers block
  std::atomic<int> total{0};
  pool.parallel_for(400, [&](size_t b, size_t e) { total += static_cast<int>(e - b); });
  EXPECT_EQ(total.load(), 400);
  EXPECT_THROW(pool.parallel_for(4,
                                 [&](size_t b, size_t) {
                                   if (b == 0) throw std::runtime_error("caller");
                                 }),
               std::runtime_error);
  total = 0;
  pool.parallel_for(8, [&](size_t b, size_t e) { total += static_cast<int>(e - b); });
  EXPECT_EQ(total.load(), 8);
}

// Jobs with ≥ kSplit·grain indices per thread are claimed in pieces and stolen: every index still
// runs once, ranges stay ≥ grain (but the one ending at n), and back-to-back jobs do not leak claims
// into each other. A job of exactly size() indices keeps one index per thread (the bandwidth probe
// relies on it), and a worker that stalls in its first piece leaves all the rest to the caller.
TEST(Kernels, ThreadPoolOnDemandRangesCoverEachIndexOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hit(500);
  int expect_total = 0;
  for (int rep = 0; rep < 3000; ++rep) {
    const size_t n = 12 + static_cast<size_t>(rep * 7 % 480), grain = 1 + static_cast<size_t>(rep % 3);
    expect_total += static_cast<int>(n);
    std::atomic<int> short_ranges{0};
    pool.parallel_for(
        n,
        [&](size_t b, size_t e) {
          if (e - b < grain && e != n) short_ranges.fetch_add(1);
          for (size_t i = b; i < e; ++i) hit[i].fetch_add(1, std::memory_order_relaxed);
        },
        grain);
    ASSERT_EQ(short_ranges.load(), 0) << "n " << n << " grain " << grain;
  }
  int total = 0;
  for (auto& h : hit) total += h.load();
  EXPECT_EQ(total, expect_total);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(hit[i].load(), 3000) << i;  // every job covers 0..11
  std::mutex mu;
  std::set<std::thread::id> ids;
  for (int rep = 0; rep < 200; ++rep) {
    ids.clear();
    pool.parallel_for(3, [&](size_t b, size_t e) {
      ASSERT_EQ(e - b, 1u);
      std::lock_guard<std::mutex> lk(mu);
      ids.insert(std::this_thread::get_id());
    });
    ASSERT_EQ(ids.size(), 3u);
  }
  ThreadPool two(2);
  const auto caller = std::this_thread::get_id();
  std::atomic<size_t> by_caller{0};
  std::atomic<bool> stalled{false};
  two.parallel_for(64, [&](size_t b, size_t e) {
    if (std::this_thread::get_id() == caller)
      by_caller += e - b;
    else if (!stalled.exchange(true))
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  });
  // the worker's first piece is 64 / (2 · kPieces) = 4 indices; the caller steals the rest of its
  // range (a split into fixed ranges would leave the caller 32, chunks of 16 on demand 48)
  EXPECT_GE(by_caller.load(), 56u);
}

}  // namespace
}  // namespace cortiq::kernels
