// Scalar reference implementations of kernels.h, and the process-wide matmul mode and SIMD tier
// that the free functions dispatch on (the dispatch itself: ops.cc).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numbers>
#include <optional>
#include <string_view>

#include "kernels/kernels.h"
#include "kernels/simd_activation.h"
#include "kernels/simd_attention.h"
#include "kernels/simd_avx2.h"
#include "kernels/simd_avx2_attention.h"
#include "kernels/simd_matvec.h"
#include "kernels/weight_plan.h"
#include "quant/codec.h"
#include "quant/layout.h"
#include "util/error.h"
#include "util/half.h"
#include "util/mmap_file.h"

namespace cortiq::kernels {

using quant::DType;

bool has_kernel(DType t) noexcept {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
      return true;
    case DType::Mix8_4:
    case DType::U8:
    case DType::Q4Col:
      return false;
    default:
      return true;
  }
}

void check_weight(const WeightView& w) {
  if (!has_kernel(w.dtype))
    fail(ErrorKind::Unsupported, "tensor '{}': dtype {} has no compute kernel", w.name,
         quant::dtype_name(w.dtype));
  const auto n = quant::expected_nbytes(w.dtype, w.shape);
  if (n && *n != w.payload.size())
    fail(ErrorKind::Parse, "tensor '{}': payload is {} bytes, dtype {} with this shape needs {}", w.name,
         w.payload.size(), quant::dtype_name(w.dtype), *n);
}

namespace {

/// prepare_weight for q4_tiled: the payload copied into q4_block layout, ~1 MiB of source at a time.
void relayout_q4_tiled(WeightView& w, const PrepareOptions& opt) {
  const uint64_t groups = (w.numel() + 31) / 32;
  if (w.payload.size() != 18 * groups)
    fail(ErrorKind::Parse, "tensor '{}': payload is {} bytes, dtype q4_tiled with this shape needs {}",
         w.name, w.payload.size(), 18 * groups);
  HugeArena own(0);  // chunk 0: every piece gets a buffer of its own size
  const std::string what = fmt::format("tensor '{}'", w.name);
  HugeArena::Piece dst = (opt.arena ? opt.arena : &own)->allocate(w.payload.size(), what);
  constexpr uint64_t kPiece = (uint64_t{1} << 20) / 18;  // groups per piece (~1 MiB of source)
  constexpr uintptr_t kAlign = uintptr_t{64} << 10;      // release boundaries (any page size ≤ 64 KiB)
  const uintptr_t base = reinterpret_cast<uintptr_t>(w.payload.data());
  uint64_t released = 0;  // bytes of the source handed to opt.release so far
  for (uint64_t g = 0; g < groups; g += kPiece) {
    const uint64_t e = std::min(groups, g + kPiece);
    quant::q4_tiled_to_block(w.payload, dst.bytes, g, e);
    if (!opt.release) continue;
    // Up to the last 64 KiB boundary inside what is copied, or to the end after the last piece.
    uint64_t upto = w.payload.size();
    if (e < groups) {
      const uintptr_t end = (base + 18 * e) & ~(kAlign - 1);
      upto = end > base ? end - base : 0;
    }
    if (upto > released) {
      opt.release(w.payload.subspan(released, upto - released));
      released = upto;
    }
  }
  w.payload = dst.bytes;
  w.dtype = DType::Q4Block;
  w.storage = std::move(dst.owner);
}

}  // namespace

void prepare_weight(WeightView& w, const PrepareOptions& opt) {
  w.prepared.reset();
  w.plan.reset();
  if (w.dtype == DType::Q4Tiled) {
    relayout_q4_tiled(w, opt);
  } else if (w.dtype == DType::Q4TP || w.dtype == DType::Q2TP) {
    const quant::TpView tp = quant::tp_view(w.dtype, w.shape, w.payload, w.name);
    auto bases = std::make_shared<std::vector<float>>(2 * tp.rows);
    for (uint64_t r = 0; r < tp.rows; ++r) {
      (*bases)[r] = quant::tp_exp2(tp.lo_f16(r));
      (*bases)[tp.rows + r] = quant::tp_exp2(tp.step_f16(r));
    }
    w.prepared = std::move(bases);
  }
  w.plan = make_weight_plan(w);
}

void decode_rows(const WeightView& w, uint64_t row_begin, uint64_t count, float* out) {
  const uint64_t rows = w.rows(), cols = w.cols();
  if (row_begin > rows || count > rows - row_begin)
    fail(ErrorKind::Bounds, "tensor '{}': rows [{}, {}) outside [0, {})", w.name, row_begin,
         row_begin + count, rows);
  const uint64_t first = row_begin * cols, n = count * cols;
  const uint8_t* p = w.payload.data();
  switch (w.dtype) {
    case DType::F32:
      if ((first + n) * 4 > w.payload.size())
        fail(ErrorKind::Bounds, "tensor '{}': payload too short", w.name);
      std::memcpy(out, p + first * 4, n * 4);
      return;
    case DType::F16:
      if ((first + n) * 2 > w.payload.size())
        fail(ErrorKind::Bounds, "tensor '{}': payload too short", w.name);
      for (uint64_t i = 0; i < n; ++i) out[i] = f16_to_f32(load_le<uint16_t>(p + (first + i) * 2));
      return;
    case DType::BF16:
      if ((first + n) * 2 > w.payload.size())
        fail(ErrorKind::Bounds, "tensor '{}': payload too short", w.name);
      for (uint64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load_le<uint16_t>(p + (first + i) * 2));
      return;
    default:
      break;
  }
  if (has_kernel(w.dtype)) {
    quant::decode_rows(w.dtype, w.shape, w.payload, row_begin, count, std::span<float>(out, n));
    return;
  }
  fail(ErrorKind::Unsupported, "tensor '{}': dtype {} has no compute kernel", w.name,
       quant::dtype_name(w.dtype));
}

namespace {

// Rows decoded per block by the reference matvec (bounds the thread-local buffer).
constexpr uint64_t kRowBlock = 16;

inline double dot_d(const float* a, const float* b, uint64_t n) {
  double s = 0.0;
  for (uint64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return s;
}

std::vector<float>& row_buffer(size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf;
}

}  // namespace

// Y[i, j] = W[row_begin + j] · X[i] for j < row_count, i < n; written at y[i*y_stride + j].
static void matmul_rows_ref(const WeightView& w, uint64_t row_begin, uint64_t row_count, const float* x,
                            size_t n, float* y, size_t y_stride, ThreadPool& pool) {
  const uint64_t rows = w.rows(), cols = w.cols();
  if (row_begin > rows || row_count > rows - row_begin)
    fail(ErrorKind::Bounds, "tensor '{}': rows [{}, {}) outside [0, {})", w.name, row_begin,
         row_begin + row_count, rows);
  const uint64_t nblocks = (row_count + kRowBlock - 1) / kRowBlock;
  // Quantized tensors: parse the payload once per call, not once per row block (vbit row offsets
  // and q1s outliers are tensor-wide: per block that was O(rows² / 16)).
  std::optional<quant::RowDecoder> dec;
  if (!quant::is_float_dtype(w.dtype) && has_kernel(w.dtype) && row_count > 0)
    dec.emplace(w.dtype, w.shape, w.payload, w.name);
  pool.parallel_for(nblocks, [&](size_t b0, size_t b1) {
    for (size_t b = b0; b < b1; ++b) {
      const uint64_t r0 = b * kRowBlock, rc = std::min<uint64_t>(kRowBlock, row_count - r0);
      auto& buf = row_buffer(rc * cols);
      if (dec)
        dec->decode(row_begin + r0, rc, std::span<float>(buf.data(), rc * cols));
      else
        decode_rows(w, row_begin + r0, rc, buf.data());
      for (uint64_t r = 0; r < rc; ++r)
        for (size_t i = 0; i < n; ++i)
          y[i * y_stride + r0 + r] = static_cast<float>(dot_d(buf.data() + r * cols, x + i * cols, cols));
    }
  });
}

void matvec_rows_ref(const WeightView& w, uint64_t row_begin, uint64_t row_count, const float* x, float* y,
                     ThreadPool& pool) {
  matmul_rows_ref(w, row_begin, row_count, x, 1, y, row_count, pool);
}

void matmul_ref(const WeightView& w, const float* x, size_t n, float* y, ThreadPool& pool) {
  matmul_rows_ref(w, 0, w.rows(), x, n, y, w.rows(), pool);
}

namespace {
std::atomic<MatmulMode> g_matmul_mode{MatmulMode::Fast};

SimdTier tier_from_env() noexcept {
  const SimdTier best = best_simd_tier();
  const char* e = std::getenv("CORTIQ_SIMD");
  if (!e || !*e) return best;
  const std::string_view v(e);
  SimdTier t = best;
  if (v == "avx512")
    t = SimdTier::Avx512;
  else if (v == "avx2")
    t = SimdTier::Avx2;
  else if (v == "scalar")
    t = SimdTier::Scalar;
  else
    std::fprintf(stderr, "warning: CORTIQ_SIMD='%s' is not avx512, avx2 or scalar; using %s\n", e,
                 simd_tier_name(best));
  return std::min(t, best);
}

std::atomic<SimdTier>& tier_slot() noexcept {
  static std::atomic<SimdTier> t{tier_from_env()};
  return t;
}

}  // namespace

SimdTier best_simd_tier() noexcept {
  static const SimdTier best = simd_cpu_ok()   ? SimdTier::Avx512
                               : avx2_cpu_ok() ? SimdTier::Avx2
                                               : SimdTier::Scalar;
  return best;
}
SimdTier simd_tier() noexcept {
  return tier_slot().load(std::memory_order_relaxed);
}
void set_simd_tier(SimdTier t) noexcept {
  tier_slot().store(std::min(t, best_simd_tier()), std::memory_order_relaxed);
}
const char* simd_tier_name(SimdTier t) noexcept {
  return t == SimdTier::Avx512 ? "avx512" : t == SimdTier::Avx2 ? "avx2" : "scalar";
}
void set_matmul_mode(MatmulMode m) noexcept {
  g_matmul_mode.store(m, std::memory_order_relaxed);
}
MatmulMode matmul_mode() noexcept {
  return g_matmul_mode.load(std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------

void rmsnorm(const float* x, const float* w, size_t n, double eps, NormStyle style, float* out) {
  double ss = 0.0;
  for (size_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (size_t i = 0; i < n; ++i) {
    const float xn = x[i] * inv;
    if (!w)
      out[i] = xn;
    else if (style == NormStyle::Gemma)
      out[i] = xn * (1.0f + w[i]);
    else
      out[i] = xn * w[i];
  }
}

void softmax(float* x, size_t n) {
  if (n == 0) return;
  float mx = x[0];
  for (size_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - mx) / sum);
}

float silu(float x) {
  return static_cast<float>(static_cast<double>(x) / (1.0 + std::exp(-static_cast<double>(x))));
}

float gelu_tanh(float x) {
  const double d = x;
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return static_cast<float>(0.5 * d * (1.0 + std::tanh(k * (d + 0.044715 * d * d * d))));
}

void swiglu_ref(const float* g, const float* u, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = silu(g[i]) * u[i];
}
void geglu(const float* g, const float* u, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = gelu_tanh(g[i]) * u[i];
}
void softcap(float* x, size_t n, float c) {
  if (!(c > 0.0f)) return;
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(c * std::tanh(static_cast<double>(x[i]) / c));
}

// ---------------------------------------------------------------------------------------------

RopeTable make_rope(uint32_t head_dim, double theta, double partial_rotary_factor,
                    const std::optional<YarnParams>& yarn, std::span<const double> freq_factors) {
  RopeTable t;
  uint32_t rot = static_cast<uint32_t>(static_cast<double>(head_dim) * partial_rotary_factor);
  rot = std::max<uint32_t>(2, rot);
  rot = std::min<uint32_t>(rot & ~1u, head_dim & ~1u);
  t.rotary_dim = rot;
  const uint32_t half = rot / 2;
  std::vector<double> inv(half);
  for (uint32_t i = 0; i < half; ++i) inv[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / rot);
  if (yarn && yarn->factor > 0) {
    // HF _compute_yarn_parameters (truncate=True): correction range over the rotary dims.
    auto corr = [&](double n_rot) {
      return rot * std::log(yarn->original_max_position_embeddings / (n_rot * 2.0 * std::numbers::pi)) /
             (2.0 * std::log(theta));
    };
    double low = std::max(0.0, std::floor(corr(yarn->beta_fast)));
    double high = std::min(static_cast<double>(rot - 1), std::ceil(corr(yarn->beta_slow)));
    if (low == high) high += 0.001;
    for (uint32_t i = 0; i < half; ++i) {
      const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
      inv[i] = (inv[i] / yarn->factor) * ramp + inv[i] * (1.0 - ramp);
    }
    t.scale = static_cast<float>(yarn->attention_factor);
  }
  if (!freq_factors.empty()) {
    if (freq_factors.size() != half)
      fail(ErrorKind::InvalidArgument, "rope_freq_factors has {} entries, rotary_dim/2 is {}",
           freq_factors.size(), half);
    for (uint32_t i = 0; i < half; ++i) inv[i] /= freq_factors[i];
  }
  t.inv_freq.resize(half);
  for (uint32_t i = 0; i < half; ++i) t.inv_freq[i] = static_cast<float>(inv[i]);
  return t;
}

std::vector<double> llama3_freq_factors(uint32_t rotary_dim, double theta, double factor,
                                        double low_freq_factor, double high_freq_factor,
                                        double original_max_position_embeddings) {
  const uint32_t half = rotary_dim / 2;
  std::vector<double> out(half, 1.0);
  const double low_wl = original_max_position_embeddings / low_freq_factor;
  const double high_wl = original_max_position_embeddings / high_freq_factor;
  for (uint32_t i = 0; i < half; ++i) {
    // HF computes inv_freq in f32; keep that rounding so the band decisions match.
    const double inv = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(2 * i) / rotary_dim));
    const double wl = 2.0 * std::numbers::pi / inv;
    if (wl < high_wl) {
      out[i] = 1.0;
    } else if (wl > low_wl) {
      out[i] = factor;
    } else {
      const double s =
          (original_max_position_embeddings / wl - low_freq_factor) / (high_freq_factor - low_freq_factor);
      out[i] = 1.0 / ((1.0 - s) / factor + s);
    }
  }
  return out;
}

void rope(float* x, size_t n_heads, size_t head_dim, const RopeTable& t, int64_t pos) {
  const size_t half = t.rotary_dim / 2;
  const float fpos = static_cast<float>(pos);
  for (size_t i = 0; i < half; ++i) {
    const float ang = fpos * t.inv_freq[i];
    const float c = static_cast<float>(std::cos(static_cast<double>(ang))) * t.scale;
    const float s = static_cast<float>(std::sin(static_cast<double>(ang))) * t.scale;
    for (size_t h = 0; h < n_heads; ++h) {
      float* v = x + h * head_dim;
      const float a = v[i], b = v[i + half];
      v[i] = a * c - b * s;
      v[i + half] = b * c + a * s;
    }
  }
}

// ---------------------------------------------------------------------------------------------

void attention_ref(const float* q, const KvLayerView& kv, size_t key_begin, size_t key_end,
                   const AttentionParams& p, const uint8_t* head_alive, float* out, size_t kv_head_begin,
                   size_t kv_head_end) {
  const size_t hd = p.head_dim, group = p.n_heads / p.n_kv_heads, nk = key_end - key_begin;
  thread_local std::vector<double> sc;
  thread_local std::vector<double> acc;
  sc.resize(nk);
  acc.resize(hd);
  auto kval = [&](const void* base, size_t kvh, size_t pos, size_t d) -> float {
    const size_t idx = (kvh * kv.capacity + pos) * hd + d;
    if (kv.f16) return f16_to_f32(static_cast<const uint16_t*>(base)[idx]);
    return static_cast<const float*>(base)[idx];
  };
  const size_t h_end = std::min(kv_head_end, p.n_kv_heads) * group;
  for (size_t h = kv_head_begin * group; h < h_end; ++h) {
    float* o = out + h * hd;
    if ((head_alive && !head_alive[h]) || nk == 0) {
      std::fill(o, o + hd, 0.0f);
      continue;
    }
    const size_t kvh = h / group;
    const float* qh = q + h * hd;
    double mx = -INFINITY;
    for (size_t j = 0; j < nk; ++j) {
      double s = 0.0;
      for (size_t d = 0; d < hd; ++d) s += static_cast<double>(qh[d]) * kval(kv.k, kvh, key_begin + j, d);
      float sf = static_cast<float>(s) * p.scale;
      if (p.softcap > 0.0f)
        sf = static_cast<float>(p.softcap * std::tanh(static_cast<double>(sf) / p.softcap));
      sc[j] = sf;
      mx = std::max(mx, sc[j]);
    }
    double sum = 0.0;
    for (size_t j = 0; j < nk; ++j) {
      sc[j] = std::exp(sc[j] - mx);
      sum += sc[j];
    }
    std::fill(acc.begin(), acc.end(), 0.0);
    for (size_t j = 0; j < nk; ++j) {
      const double wj = sc[j] / sum;
      for (size_t d = 0; d < hd; ++d) acc[d] += wj * kval(kv.v, kvh, key_begin + j, d);
    }
    for (size_t d = 0; d < hd; ++d) o[d] = static_cast<float>(acc[d]);
  }
}

}  // namespace cortiq::kernels
