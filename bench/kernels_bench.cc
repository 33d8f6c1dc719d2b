// Google Benchmark of the matvec/matmul kernels (issue 6): every dtype × real Qwen2.5-0.5B shapes
// (896×4864, 4864×896, 151936×896; and 896×896, which stays in L2: the compute ceiling) ×
// {reference, SIMD exact, SIMD int8} × {1, 2} threads; `matvec_cold` streams the layer shapes from
// DRAM as a decode step does (a different copy per call), `matmul_n4` is a 4-sequence serve step;
// reporting weight bytes read per second (bytes_per_second = payload bytes × calls / s), plus a
// plain streaming memory read (same threads) as the roofline, and a few batched-prefill (matmul) runs.
// `avx2/…` runs the AVX2 tier (matvec and a 64-token matmul, both paths) on the layer shapes.
//
// Payloads are random bytes of the exact payload size (random f32/f16/bf16 values for the float
// dtypes), which is valid for timing: every fixed-size layout accepts any bytes.
//   ./kernels_bench --benchmark_filter=q4tp      (run a subset)
#include <benchmark/benchmark.h>
// GCC 12 false positive on its own _mm512_undefined_* placeholders (see avx512/matvec_internal.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/simd_avx2.h"
#include "kernels/simd_matvec.h"
#include "quant/dtype.h"
#include "quant/layout.h"
#include "util/half.h"

namespace {

/// Allocator of 2 MiB-aligned, madvise(MADV_HUGEPAGE)'d memory: the weights of `cortiq run
/// --no-mmap` and the bandwidth buffer of `cortiq bench` live in transparent huge pages, and with
/// 4 KiB pages the TLB misses cut a streaming read to about two thirds — so the benchmark measures
/// the kernels in the same memory as the runtime.
template <class T>
struct HugeAlloc {
  using value_type = T;
  HugeAlloc() = default;
  template <class U>
  HugeAlloc(const HugeAlloc<U>&) noexcept {}
  T* allocate(size_t n) {
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t bytes = (n * sizeof(T) + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, bytes);
    if (!p) throw std::bad_alloc();
    (void)::madvise(p, bytes, MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept { std::free(p); }
  template <class U>
  bool operator==(const HugeAlloc<U>&) const noexcept {
    return true;
  }
};
using HugeBytes = std::vector<uint8_t, HugeAlloc<uint8_t>>;

using cortiq::kernels::ThreadPool;
using cortiq::kernels::WeightView;
using cortiq::quant::DType;

ThreadPool& pool_of(size_t threads) {
  static ThreadPool p1(1), p2(2);
  return threads == 1 ? p1 : p2;
}

/// One tensor at a time (the 151936×896 f32 payload alone is 545 MB).
struct Tensor {
  DType t{};
  uint64_t rows = 0, cols = 0;
  HugeBytes bytes;
  WeightView view;
};
Tensor& tensor(DType t, uint64_t rows, uint64_t cols) {
  static Tensor cur;
  if (cur.t == t && cur.rows == rows && cur.cols == cols && !cur.bytes.empty()) return cur;
  cur.bytes.clear();
  cur.bytes.shrink_to_fit();
  std::vector<uint64_t> shape{rows, cols};
  std::mt19937_64 g(42 + static_cast<int>(t));
  std::normal_distribution<float> nd(0.0f, 0.05f);
  if (t == DType::Q1T) {  // variable size: canonical base-3 tiles and an empty overlay
    const uint64_t tiles = rows * cols / 32, tb = cortiq::quant::kQ1tTileBytes;
    cur.bytes.assign(tiles * tb + 4 * (rows + 1), 0);
    for (uint64_t i = 0; i < tiles; ++i) {
      uint8_t* p = cur.bytes.data() + i * tb;
      cortiq::store_le<uint16_t>(p, cortiq::f32_to_f16(std::fabs(nd(g))));
      const uint64_t r = g();
      for (int j = 0; j < 6; ++j) p[2 + j] = static_cast<uint8_t>(((r >> (8 * j)) & 0xFF) % 243);
      p[8] = static_cast<uint8_t>((r >> 56) % 9);
    }
  } else if (t == DType::VBit) {  // widths cycling 3,4,5,6,8 (mean 5.2 bits), random codes
    constexpr uint8_t kW[5] = {3, 4, 5, 6, 8};
    uint64_t packed = 0;
    for (uint64_t r = 0; r < rows; ++r) packed += cols * kW[r % 5] / 8;
    const uint64_t scales = rows, pk = rows + 2 * rows * (cols / 32);
    cur.bytes.resize(pk + packed);
    for (uint64_t r = 0; r < rows; ++r) cur.bytes[r] = kW[r % 5];
    for (uint64_t i = scales; i < pk; i += 2)
      cortiq::store_le<uint16_t>(cur.bytes.data() + i, cortiq::f32_to_f16(0.01f));
    for (uint64_t i = pk; i < cur.bytes.size(); ++i) cur.bytes[i] = static_cast<uint8_t>(g());
  } else if (t == DType::Q1S) {  // random q1 base, 1% outliers (the encoder's default), ascending
    const uint64_t tb = cortiq::quant::kQ1TileBytes, base = rows * cols / 32 * tb, count = rows * cols / 100;
    cur.bytes.resize(base + 4 + 6 * count);
    for (uint64_t i = 0; i < base; i += tb) {
      const uint64_t r = g();
      cortiq::store_le<uint16_t>(cur.bytes.data() + i, cortiq::f32_to_f16(std::fabs(nd(g))));
      std::memcpy(cur.bytes.data() + i + 2, &r, 4);
    }
    cortiq::store_le<uint32_t>(cur.bytes.data() + base, static_cast<uint32_t>(count));
    for (uint64_t k = 0; k < count; ++k) {
      uint8_t* e = cur.bytes.data() + base + 4 + 6 * k;
      cortiq::store_le<uint32_t>(e, static_cast<uint32_t>(k * 100 + g() % 100));
      cortiq::store_le<uint16_t>(e + 4, cortiq::f32_to_f16(nd(g) * 10.0f));
    }
  } else if (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
    const uint64_t el = rows * cols;
    cur.bytes.resize(4 * el / (t == DType::F32 ? 1 : 2));
    for (uint64_t i = 0; i < el; ++i) {
      const float v = nd(g);
      if (t == DType::F32)
        std::memcpy(cur.bytes.data() + 4 * i, &v, 4);
      else
        cortiq::store_le<uint16_t>(cur.bytes.data() + 2 * i,
                                   t == DType::F16 ? cortiq::f32_to_f16(v) : cortiq::f32_to_bf16(v));
    }
  } else {
    const uint64_t n = *cortiq::quant::expected_nbytes(t, shape);
    cur.bytes.resize(n);
    for (uint64_t i = 0; i + 8 <= n; i += 8) {
      const uint64_t r = g();
      std::memcpy(cur.bytes.data() + i, &r, 8);
    }
  }
  cur.t = t;
  cur.rows = rows;
  cur.cols = cols;
  cur.view = WeightView{t, shape, cur.bytes, "bench"};
  cortiq::kernels::prepare_weight(cur.view);  // as the model binds its tensors
  return cur;
}

enum class Path { Ref, Exact, Int8 };

void BM_matvec(benchmark::State& st, DType t, uint64_t rows, uint64_t cols, Path path, size_t threads) {
  Tensor& w = tensor(t, rows, cols);
  std::vector<float> x(cols), y(rows);
  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(g);
  ThreadPool& pool = pool_of(threads);
  for (auto _ : st) {
    if (path == Path::Ref)
      cortiq::kernels::matvec_rows_ref(w.view, 0, rows, x.data(), y.data(), pool);
    else
      cortiq::kernels::matvec_rows_simd(w.view, 0, rows, x.data(), y.data(), pool, path == Path::Exact);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  // one token per call (same counter set in every benchmark keeps --benchmark_format=csv valid)
  st.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(w.bytes.size()));
}

/// Times `product(w, x, y, pool)` on the [rows, cols] tensor of dtype t and n Gaussian activation
/// rows x [n, cols] into y [n, rows]; reports tok/s (n per call) and the weight bytes read per call.
template <class Product>
void time_product(benchmark::State& st, DType t, uint64_t rows, uint64_t cols, size_t n, size_t threads,
                  Product product) {
  Tensor& w = tensor(t, rows, cols);
  std::vector<float> x(n * cols), y(n * rows);
  std::mt19937 g(2);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(g);
  ThreadPool& pool = pool_of(threads);
  for (auto _ : st) {
    product(w.view, x.data(), y.data(), pool);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  st.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(st.iterations() * n), benchmark::Counter::kIsRate);
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(w.bytes.size()));
}

void BM_matmul(benchmark::State& st, DType t, uint64_t rows, uint64_t cols, size_t n, bool exact,
               size_t threads) {
  time_product(st, t, rows, cols, n, threads, [&](const auto& w, const float* x, float* y, ThreadPool& pool) {
    cortiq::kernels::matmul_simd(w, x, n, y, pool, exact);
  });
}

/// The AVX2 tier (simd_avx2.h) on the same tensors: n = 1 is a matvec (matvec_rows_avx2), n > 1 a
/// batched matmul (matmul_avx2); `exact` picks the f32-activation path. Skipped (not registered) on
/// CPUs without AVX2 + FMA + F16C.
void BM_avx2(benchmark::State& st, DType t, uint64_t rows, uint64_t cols, size_t n, bool exact,
             size_t threads) {
  time_product(st, t, rows, cols, n, threads, [&](const auto& w, const float* x, float* y, ThreadPool& pool) {
    if (n == 1)
      cortiq::kernels::matvec_rows_avx2(w, 0, rows, x, y, pool, exact);
    else
      cortiq::kernels::matmul_avx2(w, x, n, y, pool, exact);
  });
}

/// Decode-like streaming: the same matvec over `copies` distinct copies of one random tensor (≥ 384 MiB
/// in all, so every call reads its weights from DRAM as a decode step does), one copy per call, int8
/// path. Reports the weight bytes streamed per second.
void BM_matvec_cold(benchmark::State& st, DType t, uint64_t rows, uint64_t cols, size_t threads) {
  const Tensor& w = tensor(t, rows, cols);
  const size_t bytes = w.bytes.size(), copies = std::max<size_t>(2, (size_t{384} << 20) / bytes + 1);
  static HugeBytes pool_bytes;
  pool_bytes.assign(copies * bytes, 0);
  std::vector<WeightView> views;
  for (size_t i = 0; i < copies; ++i) {
    std::memcpy(pool_bytes.data() + i * bytes, w.bytes.data(), bytes);
    views.push_back(
        WeightView{t, w.view.shape, std::span<const uint8_t>(pool_bytes.data() + i * bytes, bytes), "bench"});
    cortiq::kernels::prepare_weight(views.back());
  }
  std::vector<float> x(cols), y(rows);
  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(g);
  ThreadPool& pool = pool_of(threads);
  size_t i = 0;
  for (auto _ : st) {
    cortiq::kernels::matvec_rows_simd(views[i], 0, rows, x.data(), y.data(), pool, false);
    i = (i + 1) % copies;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  st.counters["tok/s"] = benchmark::Counter(0.0);
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(bytes));
}

__attribute__((target("avx512f"))) float sum_bytes(const uint8_t* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 256 <= n; i += 256) {
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 64));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 128));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 192));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/// Plain streaming read of a 512 MB buffer split over the pool: the memory-bandwidth roofline.
void BM_memread(benchmark::State& st, size_t threads) {
  static HugeBytes buf = [] {
    HugeBytes b(size_t{512} << 20);
    for (size_t i = 0; i < b.size(); i += 4096) b[i] = static_cast<uint8_t>(i >> 12);
    return b;
  }();
  ThreadPool& pool = pool_of(threads);
  const size_t chunk = size_t{1} << 20;
  for (auto _ : st) {
    std::vector<float> part(buf.size() / chunk);
    pool.parallel_for(part.size(), [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) part[i] = sum_bytes(buf.data() + i * chunk, chunk);
    });
    benchmark::DoNotOptimize(part.data());
  }
  st.counters["tok/s"] = benchmark::Counter(0.0);
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(buf.size()));
}

/// The int8 path's compute ceiling: vpdpbusd zmm (64 u8×s8 products summed into 16 int32 lanes)
/// back to back on 12 independent accumulators, one thread — enough chains to cover the
/// instruction's latency, so the rate is its throughput. Every int8 kernel does at least one per 64
/// weights per token, so rows·cols·tokens / 64 ÷ this rate is a matmul's compute floor (compare
/// with bytes ÷ memread for its memory floor). Reports vpdpbusd/s (items) and the int8 MACs/s.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void BM_vnni_peak(benchmark::State& st) {
  if (!__builtin_cpu_supports("avx512vnni")) {
    st.SkipWithError("no AVX-512 VNNI on this CPU");
    return;
  }
  constexpr int kChains = 12, kRounds = 1024;
  __m512i acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_epi32(i);
  __m512i a = _mm512_set1_epi8(3);
  const __m512i b = _mm512_set1_epi8(-5);
  for (auto _ : st) {
    for (int r = 0; r < kRounds; ++r) {
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
      __asm__ volatile("" : "+v"(a));  // the operand is not loop-invariant to the compiler
    }
  }
  for (int i = 0; i < kChains; ++i) benchmark::DoNotOptimize(acc[i]);
  const auto n = static_cast<int64_t>(st.iterations()) * kChains * kRounds;
  st.SetItemsProcessed(n);
  st.counters["int8_MAC/s"] = benchmark::Counter(static_cast<double>(n) * 64, benchmark::Counter::kIsRate);
}

/// The f32 FMA ceiling of one core: vfmadd231ps zmm back to back on 12 independent chains (enough to
/// cover the latency), one thread. FLOP/s = 2 × 16 × FMAs/s: the peak the exact GEMM is measured
/// against (bench/README.md "Exact GEMM").
__attribute__((target("avx512f,fma"))) void BM_fma_peak(benchmark::State& st) {
  if (!__builtin_cpu_supports("avx512f")) {
    st.SkipWithError("no AVX-512 on this CPU");
    return;
  }
  constexpr int kChains = 12, kRounds = 1024;
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  __m512 a = _mm512_set1_ps(0.999f);
  const __m512 b = _mm512_set1_ps(1e-3f);
  for (auto _ : st) {
    for (int r = 0; r < kRounds; ++r) {
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
      __asm__ volatile("" : "+v"(a));
    }
  }
  for (int i = 0; i < kChains; ++i) benchmark::DoNotOptimize(acc[i]);
  const auto n = static_cast<int64_t>(st.iterations()) * kChains * kRounds;
  st.SetItemsProcessed(n);
  st.counters["FLOP/s"] = benchmark::Counter(static_cast<double>(n) * 32, benchmark::Counter::kIsRate);
}

/// The exact batched product (`--exact` matmul) of an f32 weight [rows, cols] against n activation
/// rows: the trainer's shapes. n ≥ kGemmExactMinRows takes the register-tiled GEMM
/// (simd_gemm_exact.h), smaller n the 2×2 dot tile. Reports FLOP/s = 2·rows·cols·n per call.
void BM_gemm_exact(benchmark::State& st, DType t, uint64_t rows, uint64_t cols, size_t n, size_t threads) {
  Tensor& w = tensor(t, rows, cols);
  std::vector<float> x(n * cols), y(n * rows);
  std::mt19937 g(3);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(g);
  ThreadPool& pool = pool_of(threads);
  for (auto _ : st) {
    cortiq::kernels::matmul_simd(w.view, x.data(), n, y.data(), pool, true);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  st.counters["FLOP/s"] =
      benchmark::Counter(static_cast<double>(st.iterations()) * 2.0 * static_cast<double>(rows * cols * n),
                         benchmark::Counter::kIsRate);
}

}  // namespace

int main(int argc, char** argv) {
  constexpr DType kTypes[] = {DType::F32,     DType::F16,     DType::BF16, DType::Q8Row, DType::Q8_2F,
                              DType::Q4Block, DType::Q4Tiled, DType::Q4TP, DType::Q2TP,  DType::Q1,
                              DType::Q1S,     DType::Q1T,     DType::VBit};
  struct Shape {
    uint64_t rows, cols;
  };
  // 896×896 stays in L2 (≤ 3.2 MB in f32, ≤ 0.8 MB quantized): the kernel's compute ceiling.
  constexpr Shape kShapes[] = {{896, 4864}, {4864, 896}, {151936, 896}, {896, 896}};
  benchmark::RegisterBenchmark("vnni_peak/threads:1", BM_vnni_peak)->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("fma_peak/threads:1", BM_fma_peak)->Unit(benchmark::kMicrosecond);
  // The trainer's exact products (testbed: hidden 256, FFN 768, vocab 4096, 256 tokens per sequence),
  // and a token sweep at 256×256 for the GEMM's threshold.
  for (const auto& sh : {Shape{256, 256}, Shape{768, 256}, Shape{256, 768}, Shape{4096, 256}})
    for (size_t th : {1, 2})
      benchmark::RegisterBenchmark(("gemm_exact/f32/" + std::to_string(sh.rows) + "x" +
                                    std::to_string(sh.cols) + "/n256/threads:" + std::to_string(th))
                                       .c_str(),
                                   BM_gemm_exact, DType::F32, sh.rows, sh.cols, 256, th)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
  for (size_t n : {2, 3, 4, 5, 6, 7, 8, 12, 16, 32})
    benchmark::RegisterBenchmark(("gemm_exact/f32/256x256/n" + std::to_string(n) + "/threads:1").c_str(),
                                 BM_gemm_exact, DType::F32, 256, 256, n, 1)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("gemm_exact/bf16/768x256/n256/threads:1", BM_gemm_exact, DType::BF16, 768, 256,
                               256, 1)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  // Prefill of the Qwen2.5-0.5B shapes (q/o, gate/up, down) with float weights: 128 prompt tokens.
  for (DType t : {DType::F32, DType::F16})
    for (const auto& sh : {Shape{896, 896}, Shape{4864, 896}, Shape{896, 4864}})
      benchmark::RegisterBenchmark(
          ("gemm_exact/" + std::string(cortiq::quant::dtype_name(t)) + "/" + std::to_string(sh.rows) + "x" +
           std::to_string(sh.cols) + "/n128/threads:1")
              .c_str(),
          BM_gemm_exact, t, sh.rows, sh.cols, 128, 1)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
  for (size_t th : {1, 2})
    benchmark::RegisterBenchmark(("memread/threads:" + std::to_string(th)).c_str(), BM_memread, th)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  for (const auto& sh : kShapes)
    for (DType t : kTypes)
      for (Path p : {Path::Ref, Path::Exact, Path::Int8}) {
        if (p != Path::Ref && !cortiq::kernels::simd_supported(t)) continue;
        const bool floatw = t == DType::F32 || t == DType::F16 || t == DType::BF16;
        if (p == Path::Int8 && floatw) continue;  // same as exact
        for (size_t th : {1, 2}) {
          const std::string name = "matvec/" + std::string(cortiq::quant::dtype_name(t)) + "/" +
                                   std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + "/" +
                                   (p == Path::Ref     ? "ref"
                                    : p == Path::Exact ? "exact"
                                                       : "int8") +
                                   "/threads:" + std::to_string(th);
          auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_matvec, t, sh.rows, sh.cols, p, th);
          b->UseRealTime()->Unit(benchmark::kMicrosecond);
          if (p == Path::Ref) b->MinTime(0.05);
        }
      }
  for (const auto& sh : {Shape{4864, 896}, Shape{896, 4864}})
    for (DType t : {DType::F16, DType::Q8Row, DType::Q8_2F, DType::Q4Tiled, DType::Q4TP, DType::Q2TP,
                    DType::Q1, DType::Q1S, DType::Q1T, DType::VBit})
      for (bool exact : {true, false})
        for (size_t th : {1, 2}) {
          if (!cortiq::kernels::simd_supported(t)) continue;
          const std::string name = "matmul_n64/" + std::string(cortiq::quant::dtype_name(t)) + "/" +
                                   std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + "/" +
                                   (exact ? "exact" : "int8") + "/threads:" + std::to_string(th);
          benchmark::RegisterBenchmark(name.c_str(), BM_matmul, t, sh.rows, sh.cols, 64, exact, th)
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
  // Decode-like: every call on a different copy, so the weights come from DRAM (the 0.5B layer shapes).
  for (const auto& sh : {Shape{896, 896}, Shape{4864, 896}, Shape{896, 4864}})
    for (DType t : {DType::Q8Row, DType::Q4Tiled, DType::Q4TP})
      for (size_t th : {1, 2}) {
        if (!cortiq::kernels::simd_supported(t)) continue;
        const std::string name = "matvec_cold/" + std::string(cortiq::quant::dtype_name(t)) + "/" +
                                 std::to_string(sh.rows) + "x" + std::to_string(sh.cols) +
                                 "/int8/threads:" + std::to_string(th);
        benchmark::RegisterBenchmark(name.c_str(), BM_matvec_cold, t, sh.rows, sh.cols, th)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
  // The AVX2 tier: every codec it implements, matvec (n = 1) and a 64-token matmul, both paths.
  for (const auto& sh : {Shape{4864, 896}, Shape{896, 4864}})
    for (DType t : kTypes)
      for (size_t n : {size_t{1}, size_t{64}})
        for (bool exact : {true, false})
          for (size_t th : {1, 2}) {
            const bool floatw = t == DType::F32 || t == DType::F16 || t == DType::BF16;
            if (!cortiq::kernels::avx2_supported(t) || (floatw && !exact)) continue;
            const std::string name = "avx2/" + std::string(n == 1 ? "matvec" : "matmul_n64") + "/" +
                                     std::string(cortiq::quant::dtype_name(t)) + "/" +
                                     std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + "/" +
                                     (exact ? "exact" : "int8") + "/threads:" + std::to_string(th);
            benchmark::RegisterBenchmark(name.c_str(), BM_avx2, t, sh.rows, sh.cols, n, exact, th)
                ->UseRealTime()
                ->Unit(benchmark::kMicrosecond);
          }
  // A continuous-batching decode step of 4 sequences (cortiq serve --parallel ≥ 4).
  for (const auto& sh : {Shape{4864, 896}, Shape{896, 4864}})
    for (DType t : {DType::Q8Row, DType::Q4Tiled, DType::Q4TP})
      for (size_t th : {1, 2}) {
        const std::string name = "matmul_n4/" + std::string(cortiq::quant::dtype_name(t)) + "/" +
                                 std::to_string(sh.rows) + "x" + std::to_string(sh.cols) +
                                 "/int8/threads:" + std::to_string(th);
        benchmark::RegisterBenchmark(name.c_str(), BM_matmul, t, sh.rows, sh.cols, 4, false, th)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Attention of one query position (decode) at the Qwen2.5-0.5B shape: 14 query heads, 2 kv heads,
// head_dim 64, over `keys` stored keys (KV f32 or f16): the reference (`_ref`), the AVX-512 tier
// (`_simd`, simd_attention.h) and the AVX2 tier (`_avx2`, simd_avx2_attention.h).
// bytes_per_second counts the K and V bytes read per call.
#include "kernels/simd_attention.h"
#include "kernels/simd_avx2.h"
#include "kernels/simd_avx2_attention.h"

namespace {

enum class AttnTier { Ref, Avx512, Avx2 };

void BM_attention(benchmark::State& st, size_t keys, bool f16, AttnTier tier) {
  cortiq::kernels::AttentionParams p;
  p.n_heads = 14;
  p.n_kv_heads = 2;
  p.head_dim = 64;
  p.scale = 0.125f;
  const size_t n = p.n_kv_heads * keys * p.head_dim;
  std::mt19937 g(3);
  std::normal_distribution<float> nd;
  std::vector<float> q(p.n_heads * p.head_dim), out(q.size()), kf(n), vf(n);
  std::vector<uint16_t> kh(n), vh(n);
  for (auto& v : q) v = nd(g);
  for (size_t i = 0; i < n; ++i) {
    kf[i] = nd(g);
    vf[i] = nd(g);
    kh[i] = cortiq::f32_to_f16(kf[i]);
    vh[i] = cortiq::f32_to_f16(vf[i]);
  }
  cortiq::kernels::KvLayerView kv;
  kv.k = f16 ? static_cast<const void*>(kh.data()) : kf.data();
  kv.v = f16 ? static_cast<const void*>(vh.data()) : vf.data();
  kv.f16 = f16;
  kv.capacity = keys;
  if (tier == AttnTier::Avx512 && !cortiq::kernels::simd_cpu_ok()) {
    st.SkipWithError("CPU lacks AVX-512");
    return;
  }
  if (tier == AttnTier::Avx2 && !cortiq::kernels::avx2_cpu_ok()) {
    st.SkipWithError("CPU lacks AVX2");
    return;
  }
  for (auto _ : st) {
    if (tier == AttnTier::Avx512)
      cortiq::kernels::attention_simd(q.data(), kv, 0, keys, p, nullptr, out.data());
    else if (tier == AttnTier::Avx2)
      cortiq::kernels::attention_avx2(q.data(), kv, 0, keys, p, nullptr, out.data());
    else
      cortiq::kernels::attention_ref(q.data(), kv, 0, keys, p, nullptr, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  st.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(2 * n * (f16 ? 2 : 4)));
}

BENCHMARK_CAPTURE(BM_attention, qwen05b_256keys_f32_ref, 256, false, AttnTier::Ref)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_attention, qwen05b_256keys_f32_simd, 256, false, AttnTier::Avx512)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_attention, qwen05b_256keys_f32_avx2, 256, false, AttnTier::Avx2)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_attention, qwen05b_256keys_f16_ref, 256, true, AttnTier::Ref)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_attention, qwen05b_256keys_f16_simd, 256, true, AttnTier::Avx512)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_attention, qwen05b_256keys_f16_avx2, 256, true, AttnTier::Avx2)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_attention, qwen05b_4096keys_f32_ref, 4096, false, AttnTier::Ref)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_attention, qwen05b_4096keys_f32_simd, 4096, false, AttnTier::Avx512)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_attention, qwen05b_4096keys_f32_avx2, 4096, false, AttnTier::Avx2)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_attention, qwen05b_4096keys_f16_ref, 4096, true, AttnTier::Ref)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_attention, qwen05b_4096keys_f16_simd, 4096, true, AttnTier::Avx512)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_attention, qwen05b_4096keys_f16_avx2, 4096, true, AttnTier::Avx2)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
