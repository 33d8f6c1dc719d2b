#include "convert/gguf_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/codec.h"
#include "util/error.h"
#include "util/half.h"

namespace cortiq::convert {

namespace {

constexpr uint64_t kQK = 32;  // ggml's QK8_0 = QK4_0

uint64_t product(std::span<const uint64_t> shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

}  // namespace

std::vector<uint8_t> ggml_encode(GgmlType type, std::span<const float> v, uint64_t cols) {
  std::vector<uint8_t> out;
  const uint64_t n = v.size();
  switch (type) {
    case GgmlType::F32:
      out.resize(4 * n);
      std::memcpy(out.data(), v.data(), 4 * n);
      return out;
    case GgmlType::F16:
      out.resize(2 * n);
      for (uint64_t i = 0; i < n; ++i) store_le<uint16_t>(out.data() + 2 * i, f32_to_f16(v[i]));
      return out;
    case GgmlType::BF16:
      out.resize(2 * n);
      for (uint64_t i = 0; i < n; ++i) store_le<uint16_t>(out.data() + 2 * i, f32_to_bf16(v[i]));
      return out;
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
      break;
    default:
      fail(ErrorKind::Unsupported, "GGUF export writes F32, F16, BF16, Q8_0 and Q4_0, not {}",
           ggml_type_name(static_cast<uint32_t>(type)));
  }
  if (cols == 0 || cols % kQK != 0 || n % cols != 0)
    fail(ErrorKind::InvalidArgument, "{} needs rows of a multiple of 32 values, not {}",
         ggml_type_name(static_cast<uint32_t>(type)), cols);
  const uint64_t blocks = n / kQK;
  if (type == GgmlType::Q8_0) {  // quantize_row_q8_0_ref
    out.resize(blocks * 34);
    for (uint64_t b = 0; b < blocks; ++b) {
      const float* x = v.data() + b * kQK;
      float amax = 0.0f;
      for (uint64_t j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      uint8_t* y = out.data() + b * 34;
      store_le<uint16_t>(y, f32_to_f16(d));
      for (uint64_t j = 0; j < kQK; ++j)
        y[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(x[j] * id)));
    }
    return out;
  }
  out.resize(blocks * 18);  // quantize_row_q4_0_ref
  for (uint64_t b = 0; b < blocks; ++b) {
    const float* x = v.data() + b * kQK;
    float amax = 0.0f, max = 0.0f;
    for (uint64_t j = 0; j < kQK; ++j)
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t* y = out.data() + b * 18;
    store_le<uint16_t>(y, f32_to_f16(d));
    for (uint64_t j = 0; j < kQK / 2; ++j) {
      const int x0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int x1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[kQK / 2 + j] * id + 8.5f)));
      y[2 + j] = static_cast<uint8_t>(x0 | (x1 << 4));
    }
  }
  return out;
}

std::optional<std::vector<uint8_t>> ggml_exact_from_cmf(GgmlType type, quant::DType d,
                                                        std::span<const uint64_t> shape,
                                                        std::span<const uint8_t> payload) {
  using quant::DType;
  const uint64_t n = product(shape);
  const uint64_t cols = shape.empty() ? 1 : shape.back();
  const bool same_float = (type == GgmlType::F32 && d == DType::F32) ||
                          (type == GgmlType::F16 && d == DType::F16) ||
                          (type == GgmlType::BF16 && d == DType::BF16);
  if (same_float) return std::vector<uint8_t>(payload.begin(), payload.end());
  if (type == GgmlType::F32 && (d == DType::F16 || d == DType::BF16)) {
    std::vector<float> v(n);
    quant::decode(d, shape, payload, v);
    return ggml_encode(GgmlType::F32, v, cols);
  }
  if (cols % kQK != 0 || n == 0) return std::nullopt;
  const uint64_t blocks = n / kQK;
  if (type == GgmlType::Q8_0 && d == DType::Q8Row && shape.size() == 2) {
    const uint64_t rows = shape[0], per_row = cols / kQK;
    if (payload.size() != n + 2 * rows) return std::nullopt;
    std::vector<uint8_t> out(blocks * 34);
    for (uint64_t r = 0; r < rows; ++r)
      for (uint64_t k = 0; k < per_row; ++k) {
        uint8_t* y = out.data() + (r * per_row + k) * 34;
        std::memcpy(y, payload.data() + n + 2 * r, 2);
        std::memcpy(y + 2, payload.data() + r * cols + k * kQK, kQK);
      }
    return out;
  }
  if (type == GgmlType::Q4_0 && (d == DType::Q4Block || d == DType::Q4Tiled)) {
    std::vector<uint8_t> block(payload.begin(), payload.end());
    if (d == DType::Q4Tiled) quant::q4_tiled_to_block(payload, block, 0, payload.size() / 18);
    if (block.size() != blocks * 18) return std::nullopt;
    std::vector<uint8_t> out(blocks * 18);
    for (uint64_t g = 0; g < blocks; ++g) {
      uint8_t* y = out.data() + g * 18;
      std::memcpy(y, block.data() + 16 * blocks + 2 * g, 2);
      const uint8_t* nib = block.data() + 16 * g;
      auto get = [&](uint64_t e) { return (nib[e / 2] >> (4 * (e % 2))) & 0xF; };
      for (uint64_t j = 0; j < 16; ++j) y[2 + j] = static_cast<uint8_t>(get(j) | (get(j + 16) << 4));
    }
    return out;
  }
  return std::nullopt;
}

std::optional<std::vector<uint8_t>> cmf_exact_from_ggml(quant::DType d, const GgufTensor& t) {
  using quant::DType;
  const auto gt = static_cast<GgmlType>(t.type);
  if ((d == DType::F32 && gt == GgmlType::F32) || (d == DType::F16 && gt == GgmlType::F16) ||
      (d == DType::BF16 && gt == GgmlType::BF16))
    return std::vector<uint8_t>(t.data.begin(), t.data.end());
  if (d == DType::Q4Block && gt == GgmlType::Q4_0) {
    const uint64_t blocks = t.numel / kQK;
    if (t.data.size() != blocks * 18 || t.numel % kQK != 0) return std::nullopt;
    std::vector<uint8_t> out(blocks * 18);
    for (uint64_t g = 0; g < blocks; ++g) {
      const uint8_t* y = t.data.data() + g * 18;
      std::memcpy(out.data() + 16 * blocks + 2 * g, y, 2);
      auto get = [&](uint64_t e) { return e < 16 ? y[2 + e] & 0xF : y[2 + e - 16] >> 4; };
      for (uint64_t k = 0; k < 16; ++k)
        out[16 * g + k] = static_cast<uint8_t>(get(2 * k) | (get(2 * k + 1) << 4));
    }
    return out;
  }
  return std::nullopt;
}

std::vector<uint8_t> permute_rows(std::span<const uint8_t> bytes, std::span<const uint64_t> perm) {
  const uint64_t rows = perm.size();
  if (rows == 0 || bytes.size() % rows != 0)
    fail(ErrorKind::InvalidArgument, "permute_rows: {} bytes are not {} rows", bytes.size(), rows);
  const uint64_t rb = bytes.size() / rows;
  std::vector<uint8_t> out(bytes.size());
  for (uint64_t i = 0; i < rows; ++i) std::memcpy(out.data() + i * rb, bytes.data() + perm[i] * rb, rb);
  return out;
}

std::vector<uint64_t> llama_qk_permutation(uint64_t rows, uint32_t heads) {
  if (heads == 0 || rows % heads != 0 || (rows / heads) % 2 != 0)
    fail(ErrorKind::InvalidArgument, "{} rows are not {} heads of an even head_dim", rows, heads);
  const uint64_t hd = rows / heads, half = hd / 2;
  std::vector<uint64_t> perm(rows);
  for (uint64_t h = 0; h < heads; ++h)
    for (uint64_t j = 0; j < half; ++j)
      for (uint64_t i = 0; i < 2; ++i) perm[h * hd + 2 * j + i] = h * hd + i * half + j;
  return perm;
}

}  // namespace cortiq::convert
