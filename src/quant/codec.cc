// Encoders and scalar decoders of every CMF codec (FORMAT-NOTES §1.8; layouts in codec.h/layout.h).
#include "quant/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "quant/detail.h"
#include "util/error.h"
#include "util/half.h"

namespace cortiq::quant {

float f16_scale(float x) {
  const float r = round_f16(x);
  return r < 0x1p-14f ? 0x1p-14f : r;
}

float tp_exp2(uint16_t h) {
  return std::exp2f(f16_to_f32(h));
}

void q4tp_ladder(uint16_t lo_f16, uint16_t step_f16, float out[32]) {
  out[0] = tp_exp2(lo_f16);
  const float ratio = tp_exp2(step_f16);
  for (int c = 1; c < 32; ++c) out[c] = out[c - 1] * ratio;
}

void q2tp_ladder(uint16_t lo_f16, uint16_t step_f16, float out[32]) {
  float t[32];
  q4tp_ladder(lo_f16, step_f16, t);
  out[0] = 0.0f;
  for (int c = 1; c < 32; ++c) out[c] = t[c - 1];
}

uint16_t tp_step_f16(float lo_r, float hi, int intervals) {
  uint16_t st_h = f32_to_f16((hi - lo_r) / static_cast<float>(intervals));
  for (int i = 0; i < 64; ++i) {
    const float st = f16_to_f32(st_h);
    if (st > 0.0f && lo_r + static_cast<float>(intervals) * st >= hi) break;
    st_h = static_cast<uint16_t>(st_h + 1);
  }
  return st_h;
}

namespace {

constexpr std::string_view kWhat = "<encode>";

float rne(float x) {
  return std::nearbyint(x);
}
int clamp_rne(float x, int lo, int hi) {
  float q = rne(x);
  q = std::clamp(q, static_cast<float>(lo), static_cast<float>(hi));  // NaN-free: inputs are finite
  return static_cast<int>(q);
}

/// Rows/in of the encode view; `allow_1d` treats a 1-D shape as [1, n].
Matrix encode_matrix(DType t, std::span<const uint64_t> shape, bool allow_1d, bool need_group) {
  Matrix m;
  if (shape.size() == 2) {
    m = {shape[0], shape[1]};
  } else if (shape.size() == 1 && allow_1d) {
    m = {1, shape[0]};
  } else {
    fail(ErrorKind::InvalidArgument, "encode {}: needs a {}shape, got {} dims", dtype_name(t),
         allow_1d ? "1-D or 2-D " : "2-D ", shape.size());
  }
  if (need_group && m.in % kGroup != 0)
    fail(ErrorKind::InvalidArgument, "encode {}: needs in % 32 == 0, got in = {}", dtype_name(t), m.in);
  return m;
}

void check_finite(DType t, std::span<const float> v) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      fail(ErrorKind::InvalidArgument, "encode {}: element {} is {} (only finite values can be quantized)",
           dtype_name(t), i, v[i]);
}

/// f16_scale that refuses to overflow to Inf.
float scale_of(DType t, float x, uint64_t where) {
  const float s = f16_scale(x);
  if (std::isinf(s))
    fail(ErrorKind::InvalidArgument, "encode {}: group/row at element {} needs scale {} beyond the f16 range",
         dtype_name(t), where, x);
  return s;
}
void put_f16(uint8_t* p, float s) {
  store_le<uint16_t>(p, f32_to_f16(s));
}

float absmax(const float* v, size_t n) {
  float a = 0.0f;
  for (size_t i = 0; i < n; ++i) a = std::max(a, std::fabs(v[i]));
  return a;
}

// ----------------------------------------------------------------------------- float codecs
std::vector<uint8_t> enc_float(DType t, std::span<const float> v) {
  std::vector<uint8_t> out;
  if (t == DType::F32) {
    out.resize(v.size() * 4);
    for (size_t i = 0; i < v.size(); ++i) store_le<float>(out.data() + 4 * i, v[i]);
    return out;
  }
  out.resize(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = t == DType::F16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
    const bool inf = t == DType::F16 ? (h & 0x7FFFu) == 0x7C00u : (h & 0x7FFFu) == 0x7F80u;
    if (inf && std::isfinite(v[i]))
      fail(ErrorKind::InvalidArgument, "encode {}: element {} = {} overflows the format", dtype_name(t), i,
           v[i]);
    store_le<uint16_t>(out.data() + 2 * i, h);
  }
  return out;
}

// ----------------------------------------------------------------------------- q8_row / q8_2f
std::vector<uint8_t> enc_q8_row(std::span<const uint64_t> shape, std::span<const float> v) {
  const Matrix m = encode_matrix(DType::Q8Row, shape, false, false);
  std::vector<uint8_t> out(m.rows * m.in + 2 * m.rows);
  for (uint64_t r = 0; r < m.rows; ++r) {
    const float* row = v.data() + r * m.in;
    const float s = scale_of(DType::Q8Row, absmax(row, m.in) / 127.0f, r * m.in);
    for (uint64_t c = 0; c < m.in; ++c)
      out[r * m.in + c] = static_cast<uint8_t>(static_cast<int8_t>(clamp_rne(row[c] / s, -128, 127)));
    put_f16(out.data() + m.rows * m.in + 2 * r, s);
  }
  return out;
}

std::vector<uint8_t> enc_q8_2f(std::span<const uint64_t> shape, std::span<const float> v) {
  const Matrix m = encode_matrix(DType::Q8_2F, shape, false, false);
  const uint64_t n = m.rows * m.in;
  std::vector<uint8_t> out(n + 2 * m.rows + 2 * m.in);
  std::vector<float> col(m.in);
  for (uint64_t c = 0; c < m.in; ++c) {
    // f64 sum of squares in fixed 256-row blocks, blocks summed in index order (thread-count free).
    double total = 0.0;
    for (uint64_t r0 = 0; r0 < m.rows; r0 += 256) {
      double block = 0.0;
      for (uint64_t r = r0; r < std::min<uint64_t>(m.rows, r0 + 256); ++r) {
        const double x = v[r * m.in + c];
        block += x * x;
      }
      total += block;
    }
    const double rms = m.rows ? std::sqrt(total / static_cast<double>(m.rows)) : 0.0;
    col[c] = scale_of(DType::Q8_2F, std::max(static_cast<float>(rms), 1e-12f), c);
    put_f16(out.data() + n + 2 * m.rows + 2 * c, col[c]);
  }
  for (uint64_t r = 0; r < m.rows; ++r) {
    const float* row = v.data() + r * m.in;
    float a = 0.0f;
    for (uint64_t c = 0; c < m.in; ++c) a = std::max(a, std::fabs(row[c] / col[c]));
    const float s = scale_of(DType::Q8_2F, std::max(a, 1e-12f) / 127.0f, r * m.in);
    for (uint64_t c = 0; c < m.in; ++c)
      out[r * m.in + c] =
          static_cast<uint8_t>(static_cast<int8_t>(clamp_rne((row[c] / col[c]) / s, -127, 127)));
    put_f16(out.data() + n + 2 * r, s);
  }
  return out;
}

// ----------------------------------------------------------------------------- q4_block / q4_tiled
/// Quantizes flat group g (zero padded past n) into 16 nibble bytes; returns the scale.
float q4_group(DType t, std::span<const float> v, uint64_t g, uint8_t* nib) {
  float w[kGroup] = {};
  const uint64_t e0 = g * kGroup;
  for (uint64_t j = 0; j < kGroup && e0 + j < v.size(); ++j) w[j] = v[e0 + j];
  const float s = scale_of(t, absmax(w, kGroup) / 7.0f, e0);
  for (uint64_t k = 0; k < 16; ++k) {
    const int lo = clamp_rne(w[2 * k] / s, -8, 7) + 8;
    const int hi = clamp_rne(w[2 * k + 1] / s, -8, 7) + 8;
    nib[k] = static_cast<uint8_t>(lo | (hi << 4));
  }
  return s;
}

std::vector<uint8_t> enc_q4(DType t, std::span<const uint64_t> shape, std::span<const float> v) {
  if (t == DType::Q4Tiled) (void)encode_matrix(t, shape, true, true);
  const uint64_t groups = detail::ceil_div(v.size(), kGroup);
  std::vector<uint8_t> out(groups * 18);
  for (uint64_t g = 0; g < groups; ++g) {
    if (t == DType::Q4Block) {
      const float s = q4_group(t, v, g, out.data() + 16 * g);
      put_f16(out.data() + 16 * groups + 2 * g, s);
    } else {
      const float s = q4_group(t, v, g, out.data() + 18 * g + 2);
      put_f16(out.data() + 18 * g, s);
    }
  }
  return out;
}

}  // namespace

void q4_tiled_to_block(std::span<const uint8_t> tiled, std::span<uint8_t> block, uint64_t g_begin,
                       uint64_t g_end) {
  if (tiled.size() != block.size() || tiled.size() % 18 != 0)
    fail(ErrorKind::InvalidArgument,
         "q4_tiled_to_block: payloads of {} and {} bytes (equal multiples of 18 needed)", tiled.size(),
         block.size());
  const uint64_t groups = tiled.size() / 18;
  if (g_begin > g_end || g_end > groups)
    fail(ErrorKind::InvalidArgument, "q4_tiled_to_block: groups [{}, {}) outside [0, {})", g_begin, g_end,
         groups);
  const uint8_t* src = tiled.data();
  uint8_t* nib = block.data();
  uint8_t* scales = block.data() + 16 * groups;
  for (uint64_t g = g_begin; g < g_end; ++g) {
    std::memcpy(scales + 2 * g, src + 18 * g, 2);
    std::memcpy(nib + 16 * g, src + 18 * g + 2, 16);
  }
}

namespace {

// ----------------------------------------------------------------------------- q1 / q1p / q1s
/// Writes one q1 tile for the 32 values `w`; `skip` marks q1s outliers (excluded from the scale and
/// the error diffusion, bit = sign hint). `carry` is the row's diffusion residual (nullptr = plain).
void q1_tile(DType t, const float* w, const bool* skip, float* carry, uint64_t where, uint8_t* tile) {
  double sum = 0.0;
  int cnt = 0;
  for (uint64_t j = 0; j < kGroup; ++j)
    if (!skip || !skip[j]) sum += std::fabs(w[j]), ++cnt;
  const float s = scale_of(t, cnt ? static_cast<float>(sum / cnt) : 0.0f, where);
  put_f16(tile, s);
  uint8_t* bits = tile + 2;
  std::memset(bits, 0, 4);
  for (uint64_t j = 0; j < kGroup; ++j) {
    bool bit;
    if (skip && skip[j]) {
      bit = w[j] >= 0.0f;
    } else if (carry) {
      const float x = w[j] + *carry;
      bit = x >= 0.0f;
      *carry = x - (bit ? s : -s);
    } else {
      bit = w[j] >= 0.0f;
    }
    if (bit) bits[j / 8] |= static_cast<uint8_t>(1u << (j % 8));
  }
}

std::vector<uint8_t> enc_q1(std::span<const uint64_t> shape, std::span<const float> v, bool diffusion) {
  const Matrix m = encode_matrix(DType::Q1, shape, true, true);
  const uint64_t gpr = m.in / kGroup;
  std::vector<uint8_t> out(m.rows * gpr * kQ1TileBytes);
  for (uint64_t r = 0; r < m.rows; ++r) {
    float carry = 0.0f;
    for (uint64_t g = 0; g < gpr; ++g) {
      const uint64_t e0 = r * m.in + g * kGroup;
      q1_tile(DType::Q1, v.data() + e0, nullptr, diffusion ? &carry : nullptr, e0,
              out.data() + (r * gpr + g) * kQ1TileBytes);
    }
  }
  return out;
}

std::vector<uint8_t> enc_q1s(std::span<const uint64_t> shape, std::span<const float> v, float keep_frac) {
  const Matrix m = encode_matrix(DType::Q1S, shape, false, true);
  if (std::isnan(keep_frac)) fail(ErrorKind::InvalidArgument, "encode q1s: keep fraction is NaN");
  keep_frac = std::clamp(keep_frac, 0.0f, 0.25f);
  const uint64_t n = m.rows * m.in;
  if (n > UINT32_MAX) fail(ErrorKind::InvalidArgument, "encode q1s: {} elements exceed u32 flat indices", n);
  const auto k = static_cast<uint64_t>(std::floor(static_cast<double>(keep_frac) * static_cast<double>(n)));
  std::vector<uint32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0u);
  auto bigger = [&](uint32_t a, uint32_t b) {
    const float fa = std::fabs(v[a]), fb = std::fabs(v[b]);
    return fa != fb ? fa > fb : a < b;
  };
  if (k < n) std::nth_element(idx.begin(), idx.begin() + static_cast<ptrdiff_t>(k), idx.end(), bigger);
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  std::vector<bool> is_out(n, false);
  for (uint32_t i : idx) is_out[i] = true;

  const uint64_t gpr = m.in / kGroup, base = n / kGroup * kQ1TileBytes;
  std::vector<uint8_t> out(base + 4 + 6 * k);
  for (uint64_t r = 0; r < m.rows; ++r) {
    float carry = 0.0f;
    for (uint64_t g = 0; g < gpr; ++g) {
      const uint64_t e0 = r * m.in + g * kGroup;
      bool skip[kGroup];
      for (uint64_t j = 0; j < kGroup; ++j) skip[j] = is_out[e0 + j];
      q1_tile(DType::Q1S, v.data() + e0, skip, &carry, e0, out.data() + (r * gpr + g) * kQ1TileBytes);
    }
  }
  store_le<uint32_t>(out.data() + base, static_cast<uint32_t>(k));
  for (uint64_t i = 0; i < k; ++i) {
    const uint16_t h = f32_to_f16(v[idx[i]]);
    if ((h & 0x7FFFu) == 0x7C00u)
      fail(ErrorKind::InvalidArgument, "encode q1s: outlier element {} = {} overflows f16", idx[i],
           v[idx[i]]);
    store_le<uint32_t>(out.data() + base + 4 + 6 * i, idx[i]);
    store_le<uint16_t>(out.data() + base + 8 + 6 * i, h);
  }
  return out;
}

// ----------------------------------------------------------------------------- q1t
/// Ternary level of a code: 0 → 0, 1 → +1, 2 → −1.
float tern(int code) {
  return code == 1 ? 1.0f : code == 2 ? -1.0f : 0.0f;
}

std::vector<uint8_t> enc_q1t(std::span<const uint64_t> shape, std::span<const float> v) {
  const Matrix m = encode_matrix(DType::Q1T, shape, false, true);
  if (m.in > 65536) fail(ErrorKind::InvalidArgument, "encode q1t: in = {} exceeds 65536", m.in);
  const uint64_t gpr = m.in / kGroup, base = m.rows * gpr * kQ1tTileBytes;
  std::vector<uint8_t> out(base + 4 * (m.rows + 1), 0);  // row_ptr all zero: no overlay entries
  std::vector<int> codes(m.in);
  std::vector<float> scales(gpr), folded(gpr);
  for (uint64_t r = 0; r < m.rows; ++r) {
    const float* row = v.data() + r * m.in;
    for (uint64_t g = 0; g < gpr; ++g) {
      const float* w = row + g * kGroup;
      int* q = codes.data() + g * kGroup;
      double mean = 0.0;
      for (uint64_t j = 0; j < kGroup; ++j) mean += std::fabs(w[j]);
      mean /= kGroup;
      // (a) abs-mean scale, threshold 0.5·s (rne of w/s clamped to ±1).
      const float sa = scale_of(DType::Q1T, static_cast<float>(mean), r * m.in + g * kGroup);
      int qa[kGroup];
      double ea = 0.0;
      for (uint64_t j = 0; j < kGroup; ++j) {
        const int x = clamp_rne(w[j] / sa, -1, 1);
        qa[j] = x == 1 ? 1 : x == -1 ? 2 : 0;
        const double d = w[j] - tern(qa[j]) * sa;
        ea += d * d;
      }
      // (b) support |w| >= 0.7·mean, least-squares level (unit activations: mean |w| on the support).
      double lvl = 0.0;
      int cnt = 0;
      for (uint64_t j = 0; j < kGroup; ++j)
        if (std::fabs(w[j]) >= 0.7 * mean) lvl += std::fabs(w[j]), ++cnt;
      const float sb =
          scale_of(DType::Q1T, cnt ? static_cast<float>(lvl / cnt) : 0.0f, r * m.in + g * kGroup);
      int qb[kGroup];
      double eb = 0.0;
      for (uint64_t j = 0; j < kGroup; ++j) {
        qb[j] = (std::fabs(w[j]) >= 0.7 * mean && w[j] != 0.0f) ? (w[j] > 0.0f ? 1 : 2) : 0;
        const double d = w[j] - tern(qb[j]) * sb;
        eb += d * d;
      }
      const bool use_b = eb < ea;
      scales[g] = use_b ? sb : sa;
      std::copy_n(use_b ? qb : qa, kGroup, q);
    }
    // Per-row closed-form rescale alpha = <w, q̂> / <q̂, q̂>, clamped to [0.5, 2], folded into the
    // f16 scales; kept only if it lowers the row's squared error.
    double num = 0.0, den = 0.0;
    for (uint64_t c = 0; c < m.in; ++c) {
      const double qh = tern(codes[c]) * scales[c / kGroup];
      num += row[c] * qh;
      den += qh * qh;
    }
    if (den > 0.0) {
      const float alpha = static_cast<float>(std::clamp(num / den, 0.5, 2.0));
      double e_old = 0.0, e_new = 0.0;
      for (uint64_t g = 0; g < gpr; ++g)
        folded[g] = scale_of(DType::Q1T, alpha * scales[g], r * m.in + g * kGroup);
      for (uint64_t c = 0; c < m.in; ++c) {
        const double d0 = row[c] - tern(codes[c]) * scales[c / kGroup];
        const double d1 = row[c] - tern(codes[c]) * folded[c / kGroup];
        e_old += d0 * d0;
        e_new += d1 * d1;
      }
      if (e_new < e_old) scales = folded;
    }
    for (uint64_t g = 0; g < gpr; ++g) {
      uint8_t* tile = out.data() + (r * gpr + g) * kQ1tTileBytes;
      put_f16(tile, scales[g]);
      for (uint32_t b = 0; b < 7; ++b) {
        uint32_t byte = 0, p = 1;
        for (uint32_t d = 0; d < 5 && 5 * b + d < kGroup; ++d, p *= 3)
          byte += static_cast<uint32_t>(codes[g * kGroup + 5 * b + d]) * p;
        tile[2 + b] = static_cast<uint8_t>(byte);
      }
    }
  }
  return out;
}

// ----------------------------------------------------------------------------- vbit / vbit_ro
std::vector<uint8_t> enc_vbit(DType t, std::span<const uint64_t> shape, std::span<const float> v,
                              float mean_bits) {
  const Matrix m = encode_matrix(t, shape, false, true);
  if (std::isnan(mean_bits)) fail(ErrorKind::InvalidArgument, "encode {}: mean_bits is NaN", dtype_name(t));
  mean_bits = std::clamp(mean_bits, 3.0f, 8.0f);
  const uint64_t gpr = m.in / kGroup;
  std::vector<double> amp(m.rows);
  double amp_mean = 0.0;
  for (uint64_t r = 0; r < m.rows; ++r) {
    amp[r] = std::log2(std::max(static_cast<double>(absmax(v.data() + r * m.in, m.in)), 1e-12));
    amp_mean += amp[r];
  }
  if (m.rows) amp_mean /= static_cast<double>(m.rows);
  std::vector<uint8_t> bits(m.rows);
  uint64_t packed = 0;
  for (uint64_t r = 0; r < m.rows; ++r) {
    const double x = mean_bits + (amp[r] - amp_mean);
    static constexpr int kLevels[5] = {3, 4, 5, 6, 8};
    int best = 3;
    for (int lv : kLevels)
      if (std::fabs(x - lv) < std::fabs(x - best)) best = lv;  // strict: ties keep the lower level
    bits[r] = static_cast<uint8_t>(best);
    packed += vbit_row_bytes(m.in, bits[r]);
  }
  const uint64_t scales_off = m.rows;
  const uint64_t table_off = scales_off + 2 * m.rows * gpr;
  const uint64_t packed_off = table_off + (t == DType::VBitRo ? 4 * (m.rows + 1) : 0);
  std::vector<uint8_t> out(packed_off + packed, 0);
  std::copy(bits.begin(), bits.end(), out.begin());
  uint64_t off = 0;
  for (uint64_t r = 0; r < m.rows; ++r) {
    const uint32_t b = bits[r];
    const int L = (1 << (b - 1)) - 1;
    const int umax = (1 << b) - 1;
    uint8_t* row_out = out.data() + packed_off + off;
    uint64_t bit = 0;
    for (uint64_t g = 0; g < gpr; ++g) {
      const float* w = v.data() + r * m.in + g * kGroup;
      const float s =
          scale_of(t, absmax(w, kGroup) / static_cast<float>(std::max(L, 1)), r * m.in + g * kGroup);
      put_f16(out.data() + scales_off + 2 * (r * gpr + g), s);
      for (uint64_t j = 0; j < kGroup; ++j) {
        const auto u = static_cast<uint32_t>(std::clamp(static_cast<int>(rne(w[j] / s)) + L, 0, umax));
        for (int i = static_cast<int>(b) - 1; i >= 0; --i, ++bit)
          if ((u >> i) & 1u) row_out[bit >> 3] |= static_cast<uint8_t>(0x80u >> (bit & 7));
      }
    }
    if (t == DType::VBitRo) store_le<uint32_t>(out.data() + table_off + 4 * r, static_cast<uint32_t>(off));
    off += vbit_row_bytes(m.in, b);
  }
  if (t == DType::VBitRo) {
    if (off > UINT32_MAX)
      fail(ErrorKind::InvalidArgument, "encode vbit_ro: packed area {} bytes exceeds u32", off);
    store_le<uint32_t>(out.data() + table_off + 4 * m.rows, static_cast<uint32_t>(off));
  }
  return out;
}

// ----------------------------------------------------------------------------- q4tp / q2tp
struct TpParams {
  bool q2 = false;
  float qmax_div = 7.0f;  // absmax divisor: 7 (q4) or 1.5 (q2)
  int intervals = 31;
};

/// Squared error of tile w quantized at rung scale t (q4: nibble levels; q2: 2-bit levels).
double tile_err(bool q2, const float* w, float t) {
  double e = 0.0;
  if (t == 0.0f) {
    for (uint64_t j = 0; j < kGroup; ++j) e += static_cast<double>(w[j]) * w[j];
    return e;
  }
  const float inv = 1.0f / t;
  for (uint64_t j = 0; j < kGroup; ++j) {
    const float q = q2 ? static_cast<float>(clamp_rne(w[j] * inv + 1.5f, 0, 3)) - 1.5f
                       : static_cast<float>(clamp_rne(w[j] * inv, -8, 7));
    const double d = static_cast<double>(w[j]) - static_cast<double>(q * t);
    e += d * d;
  }
  return e;
}

/// Chooses the codes of a row for a given ladder; returns the total squared error.
double tp_codes(bool q2, bool search, int hi_delta, const float* row, uint64_t gpr,
                const std::vector<float>& lg, const std::vector<bool>& live, float lo_r, float st,
                const float* ladder, std::vector<int>& codes) {
  double total = 0.0;
  for (uint64_t g = 0; g < gpr; ++g) {
    const float* w = row + g * kGroup;
    int nom;
    if (!q2) {
      nom = (live[g] && st > 0.0f) ? clamp_rne((lg[g] - lo_r) / st, 0, 31) : 0;
    } else if (!live[g]) {
      nom = 0;
    } else {
      nom = 1 + (st > 0.0f ? clamp_rne((lg[g] - lo_r) / st, 0, 30) : 0);
    }
    int best = nom;
    if (search && (!q2 || live[g])) {
      const int lo = std::max(q2 ? 1 : 0, nom - 2), hi = std::min(31, nom + hi_delta);
      double be = 0.0;
      best = -1;
      for (int c = lo; c <= hi; ++c) {
        const double e = tile_err(q2, w, ladder[c]);
        if (best < 0 || e < be) best = c, be = e;
      }
      total += be;
    } else {
      total += tile_err(q2, w, ladder[best]);
    }
    codes[g] = best;
  }
  return total;
}

std::vector<uint8_t> enc_tp(DType t, std::span<const uint64_t> shape, std::span<const float> v, bool search) {
  const Matrix m = encode_matrix(t, shape, false, true);
  if (m.in == 0) fail(ErrorKind::InvalidArgument, "encode {}: needs in > 0", dtype_name(t));
  const bool q2 = t == DType::Q2TP;
  const uint64_t gpr = m.in / kGroup, tile_bytes = q2 ? 8 : 16, crb = tp_code_row_bytes(gpr);
  std::vector<uint8_t> out(m.rows * (gpr * tile_bytes + 4 + crb), 0);
  uint8_t* params = out.data() + m.rows * gpr * tile_bytes;
  uint8_t* code_plane = params + 4 * m.rows;
  std::vector<float> lg(gpr);
  std::vector<bool> live(gpr);
  std::vector<int> codes(gpr), trial(gpr);
  for (uint64_t r = 0; r < m.rows; ++r) {
    const float* row = v.data() + r * m.in;
    float lo = 0.0f, hi = 0.0f;
    bool any = false;
    for (uint64_t g = 0; g < gpr; ++g) {
      const float a = absmax(row + g * kGroup, kGroup);
      live[g] = a != 0.0f;
      lg[g] = std::log2(scale_of(t, a / (q2 ? 1.5f : 7.0f), r * m.in + g * kGroup));
      if (live[g]) {
        lo = any ? std::min(lo, lg[g]) : lg[g];
        hi = any ? std::max(hi, lg[g]) : lg[g];
        any = true;
      }
    }
    if (!any) lo = hi = lg[0];
    const uint16_t lo_h = f32_to_f16(lo);
    const float lo_r = f16_to_f32(lo_h);
    uint16_t st_h;
    float ladder[32];
    if (!q2) {
      st_h = tp_step_f16(lo_r, hi, 31);
      q4tp_ladder(lo_h, st_h, ladder);
      (void)tp_codes(false, search, 1, row, gpr, lg, live, lo_r, f16_to_f32(st_h), ladder, codes);
    } else {
      // Ladder top: with search, fractions {1, .9, .8, .7} of hi − lo_r scored with nom−2..nom+2.
      static constexpr float kFrac[4] = {1.0f, 0.9f, 0.8f, 0.7f};
      const int tries = search ? 4 : 1;
      double best_err = 0.0;
      st_h = 0;
      for (int i = 0; i < tries; ++i) {
        const float top = lo_r + kFrac[i] * (hi - lo_r);
        const uint16_t sh = tp_step_f16(lo_r, top, 30);
        float lad[32];
        q2tp_ladder(lo_h, sh, lad);
        const double e = tp_codes(true, search, 2, row, gpr, lg, live, lo_r, f16_to_f32(sh), lad, trial);
        if (i == 0 || e < best_err) best_err = e, st_h = sh;
      }
      q2tp_ladder(lo_h, st_h, ladder);
      (void)tp_codes(true, search, 1, row, gpr, lg, live, lo_r, f16_to_f32(st_h), ladder, codes);
    }
    store_le<uint16_t>(params + 4 * r, lo_h);
    store_le<uint16_t>(params + 4 * r + 2, st_h);
    uint8_t* crow = code_plane + r * crb;
    for (uint64_t g = 0; g < gpr; ++g) {
      const uint64_t bit = 5 * g;
      const auto c = static_cast<uint32_t>(codes[g]) << (bit % 8);
      crow[bit / 8] |= static_cast<uint8_t>(c & 0xFFu);
      if ((c >> 8) != 0) crow[bit / 8 + 1] |= static_cast<uint8_t>(c >> 8);
      const float* w = row + g * kGroup;
      uint8_t* tile = out.data() + (r * gpr + g) * tile_bytes;
      const float s = ladder[codes[g]];
      if (!q2) {
        const float inv = 1.0f / s;
        for (uint64_t k = 0; k < 16; ++k) {
          const int a = clamp_rne(w[2 * k] * inv, -8, 7) + 8, b = clamp_rne(w[2 * k + 1] * inv, -8, 7) + 8;
          tile[k] = static_cast<uint8_t>(a | (b << 4));
        }
      } else {
        const float inv = s == 0.0f ? 0.0f : 1.0f / s;  // rung 0 (dead tile): every weight decodes to 0
        for (uint64_t j = 0; j < kGroup; ++j) {
          const int q = clamp_rne(w[j] * inv + 1.5f, 0, 3);
          tile[j / 4] |= static_cast<uint8_t>(q << (2 * (j % 4)));
        }
      }
    }
  }
  return out;
}

// ----------------------------------------------------------------------------- decoding
Matrix row_view(std::span<const uint64_t> shape, uint64_t n) {
  if (shape.empty()) return {1, 1};
  if (shape.size() == 1) return {1, shape[0]};
  return {shape[0], shape[0] ? n / shape[0] : 0};
}

/// Element e of a flat-group codec (q4_block, q4_tiled, q1) payload with G groups.
float flat_elem(DType t, const uint8_t* p, uint64_t groups, uint64_t e) {
  const uint64_t g = e / kGroup, j = e % kGroup;
  switch (t) {
    case DType::Q4Block:
    case DType::Q4Tiled: {
      const uint8_t* nib = t == DType::Q4Block ? p + 16 * g : p + 18 * g + 2;
      const uint8_t* sc = t == DType::Q4Block ? p + 16 * groups + 2 * g : p + 18 * g;
      const int q = ((nib[j / 2] >> (4 * (j % 2))) & 0xF) - 8;
      return static_cast<float>(q) * f16_to_f32(load_le<uint16_t>(sc));
    }
    default: {  // q1
      const uint8_t* tile = p + kQ1TileBytes * g;
      const float s = f16_to_f32(load_le<uint16_t>(tile));
      return ((tile[2 + j / 8] >> (j % 8)) & 1u) ? s : -s;
    }
  }
}

}  // namespace

RowDecoder::RowDecoder(DType t, std::span<const uint64_t> shape, std::span<const uint8_t> payload,
                       std::string_view what)
    : t_(t), payload_(payload), what_(what) {
  if (t == DType::U8 || t == DType::Mix8_4 || t == DType::Q4Col || static_cast<int>(t) >= kNumDTypes)
    fail(ErrorKind::Unsupported, "cannot dequantize dtype {} ({})", static_cast<int>(t), dtype_name(t));
  // The payload check: for vbit/vbit_ro, q1s and q1t it is their view (validate_payload builds the
  // same view), so each is parsed once. q1t rows are checked as they are decoded (decode's q1t
  // branch), so decoding a block of rows costs O(block), not O(tensor) (the kernels decode q1t 16
  // rows at a time).
  switch (t) {
    case DType::VBit:
    case DType::VBitRo:
      vb_ = vbit_view(t, shape, payload, what);
      break;
    case DType::Q1S:
      q1s_ = q1s_view(shape, payload, what);
      if (!q1s_.ascending) {
        // Entry ids ordered by flat index, of each index only the last entry (later entries win).
        q1s_order_.resize(q1s_.count);
        for (uint32_t i = 0; i < q1s_.count; ++i) q1s_order_[i] = i;
        std::stable_sort(q1s_order_.begin(), q1s_order_.end(),
                         [&](uint32_t a, uint32_t b) { return q1s_.index(a) < q1s_.index(b); });
        size_t k = 0;
        for (size_t i = 0; i < q1s_order_.size(); ++i) {
          if (i + 1 < q1s_order_.size() && q1s_.index(q1s_order_[i + 1]) == q1s_.index(q1s_order_[i]))
            continue;
          q1s_order_[k++] = q1s_order_[i];
        }
        q1s_order_.resize(k);
      }
      break;
    case DType::Q1T:
      q1t_ = q1t_view(shape, payload, what, /*check_rows=*/false);
      break;
    case DType::Q4TP:
    case DType::Q2TP:
      validate_payload(t, shape, payload, what);
      tp_ = tp_view(t, shape, payload, what);
      break;
    default:
      validate_payload(t, shape, payload, what);
      break;
  }
  n_ = detail::numel(shape, what);
  m_ = row_view(shape, n_);
}

void RowDecoder::decode(uint64_t r0, uint64_t cnt, std::span<float> out) const {
  const DType t = t_;
  const Matrix m = m_;
  const uint64_t n = n_;
  const std::string_view what = what_;
  if (r0 > m.rows || cnt > m.rows - r0)
    fail(ErrorKind::InvalidArgument, "decode_rows: rows [{}, {}+{}) outside a tensor of {} rows", r0, r0, cnt,
         m.rows);
  if (out.size() != cnt * m.in)
    fail(ErrorKind::InvalidArgument, "decode_rows: output has {} floats, need {}", out.size(), cnt * m.in);
  const uint8_t* p = payload_.data();
  const uint64_t e0 = r0 * m.in, e1 = (r0 + cnt) * m.in;
  switch (t) {
    case DType::F32:
      for (uint64_t e = e0; e < e1; ++e) out[e - e0] = load_le<float>(p + 4 * e);
      return;
    case DType::F16:
      for (uint64_t e = e0; e < e1; ++e) out[e - e0] = f16_to_f32(load_le<uint16_t>(p + 2 * e));
      return;
    case DType::BF16:
      for (uint64_t e = e0; e < e1; ++e) out[e - e0] = bf16_to_f32(load_le<uint16_t>(p + 2 * e));
      return;
    case DType::Q4Block:
    case DType::Q4Tiled:
    case DType::Q1: {
      const uint64_t groups = detail::ceil_div(n, kGroup);
      for (uint64_t e = e0; e < e1; ++e) out[e - e0] = flat_elem(t, p, groups, e);
      return;
    }
    case DType::Q8Row: {
      for (uint64_t r = r0; r < r0 + cnt; ++r) {
        const float s = f16_to_f32(load_le<uint16_t>(p + n + 2 * r));
        for (uint64_t c = 0; c < m.in; ++c)
          out[(r - r0) * m.in + c] = static_cast<float>(static_cast<int8_t>(p[r * m.in + c])) * s;
      }
      return;
    }
    case DType::Q8_2F: {
      for (uint64_t r = r0; r < r0 + cnt; ++r) {
        const float s = f16_to_f32(load_le<uint16_t>(p + n + 2 * r));
        for (uint64_t c = 0; c < m.in; ++c) {
          const float col = f16_to_f32(load_le<uint16_t>(p + n + 2 * m.rows + 2 * c));
          out[(r - r0) * m.in + c] = static_cast<float>(static_cast<int8_t>(p[r * m.in + c])) * s * col;
        }
      }
      return;
    }
    case DType::VBit:
    case DType::VBitRo: {
      const VBitView& v = vb_;
      for (uint64_t r = r0; r < r0 + cnt; ++r) {
        const uint32_t b = v.width(r);
        const int L = (1 << (b - 1)) - 1;
        const uint8_t* row = v.row(r);
        for (uint64_t c = 0; c < m.in; ++c)
          out[(r - r0) * m.in + c] =
              static_cast<float>(static_cast<int>(vbit_code(row, c, b)) - L) * v.scale(r, c / kGroup);
      }
      return;
    }
    case DType::Q1S: {
      const Q1sView& v = q1s_;
      for (uint64_t e = e0; e < e1; ++e) out[e - e0] = flat_elem(DType::Q1, v.base, n / kGroup, e);
      if (v.ascending) {  // the entries of [e0, e1) are one run
        v.overwrite_run(e0, e1, out.data());
        return;
      }
      auto it = std::lower_bound(q1s_order_.begin(), q1s_order_.end(), e0,
                                 [&](uint32_t i, uint64_t e) { return v.index(i) < e; });
      for (; it != q1s_order_.end() && v.index(*it) < e1; ++it) out[v.index(*it) - e0] = v.value(*it);
      return;
    }
    case DType::Q1T: {
      const Q1tView& v = q1t_;
      const uint64_t gpr = m.in / kGroup;
      for (uint64_t r = r0; r < r0 + cnt; ++r) {
        q1t_check_row(v, r, what);
        for (uint64_t g = 0; g < gpr; ++g) {
          const uint8_t* tile = v.base + (r * gpr + g) * kQ1tTileBytes;
          if (!q1t_tile_ok(tile))
            fail(ErrorKind::Parse, "tensor '{}': q1t tile (row {}, group {}) has a non-base-3 code byte",
                 what, r, g);
          const float s = f16_to_f32(load_le<uint16_t>(tile));
          for (uint32_t k = 0; k < kGroup; ++k) {
            const uint32_t code = q1t_code(tile, k);
            out[(r - r0) * m.in + g * kGroup + k] = code == 1 ? s : code == 2 ? -s : 0.0f;
          }
        }
        for (uint32_t i = v.ptr(r); i < v.ptr(r + 1); ++i) out[(r - r0) * m.in + v.col(i)] = v.value(i);
      }
      return;
    }
    case DType::Q4TP:
    case DType::Q2TP: {
      const TpView& v = tp_;
      float ladder[32];
      for (uint64_t r = r0; r < r0 + cnt; ++r) {
        if (t == DType::Q4TP)
          q4tp_ladder(v.lo_f16(r), v.step_f16(r), ladder);
        else
          q2tp_ladder(v.lo_f16(r), v.step_f16(r), ladder);
        const uint8_t* wr = v.row_weights(r);
        const uint8_t* cr = v.row_codes(r);
        for (uint64_t g = 0; g < v.gpr; ++g) {
          const float s = ladder[q4tp_code(cr, g)];
          const uint8_t* tile = wr + g * v.tile_bytes;
          float* o = out.data() + (r - r0) * m.in + g * kGroup;
          for (uint64_t j = 0; j < kGroup; ++j) {
            if (t == DType::Q4TP)
              o[j] = static_cast<float>(((tile[j / 2] >> (4 * (j % 2))) & 0xF) - 8) * s;
            else
              o[j] = (static_cast<float>((tile[j / 4] >> (2 * (j % 4))) & 3u) - 1.5f) * s;
          }
        }
      }
      return;
    }
    default:
      fail(ErrorKind::Unsupported, "cannot dequantize dtype {}", dtype_name(t));
  }
}

std::vector<uint8_t> encode(DType t, std::span<const uint64_t> shape, std::span<const float> values,
                            const EncodeOptions& opt) {
  const uint64_t n = detail::numel(shape, kWhat);
  if (values.size() != n)
    fail(ErrorKind::InvalidArgument, "encode {}: {} values for a shape of {} elements", dtype_name(t),
         values.size(), n);
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
      return enc_float(t, values);
    case DType::U8:
    case DType::Mix8_4:
    case DType::Q4Col:
      fail(ErrorKind::InvalidArgument, "encode: dtype {} has no encoder", dtype_name(t));
    default:
      break;
  }
  if (static_cast<int>(t) >= kNumDTypes)
    fail(ErrorKind::InvalidArgument, "encode: unknown dtype {}", static_cast<int>(t));
  check_finite(t, values);
  switch (t) {
    case DType::Q8Row:
      return enc_q8_row(shape, values);
    case DType::Q8_2F:
      return enc_q8_2f(shape, values);
    case DType::Q4Block:
    case DType::Q4Tiled:
      return enc_q4(t, shape, values);
    case DType::Q1:
      return enc_q1(shape, values, opt.q1_error_diffusion);
    case DType::Q1S:
      return enc_q1s(shape, values, opt.q1s_keep_frac);
    case DType::Q1T:
      return enc_q1t(shape, values);
    case DType::VBit:
    case DType::VBitRo:
      return enc_vbit(t, shape, values, opt.mean_bits);
    case DType::Q4TP:
    case DType::Q2TP:
      return enc_tp(t, shape, values, opt.ladder_search);
    default:
      fail(ErrorKind::InvalidArgument, "encode: dtype {} has no encoder", dtype_name(t));
  }
}

void decode(DType t, std::span<const uint64_t> shape, std::span<const uint8_t> payload,
            std::span<float> out) {
  const uint64_t n = detail::numel(shape, "<decode>");
  if (out.size() != n)
    fail(ErrorKind::InvalidArgument, "decode: output has {} floats, need {}", out.size(), n);
  const Matrix m = row_view(shape, n);
  if (m.rows == 0 || m.in == 0) {  // nothing to write, but the payload must still be valid
    if (t == DType::U8 || !dtype_has_codec(t))
      fail(ErrorKind::Unsupported, "cannot dequantize dtype {} ({})", static_cast<int>(t), dtype_name(t));
    validate_payload(t, shape, payload, "<decode>");
    return;
  }
  RowDecoder(t, shape, payload).decode(0, m.rows, out);
}

void decode_rows(DType t, std::span<const uint64_t> shape, std::span<const uint8_t> payload,
                 uint64_t row_begin, uint64_t row_count, std::span<float> out) {
  RowDecoder(t, shape, payload).decode(row_begin, row_count, out);
}

}  // namespace cortiq::quant
