// Scalar reference of the matrix products (kernels.h matvec_rows_ref / matmul_ref): each row decoded
// to f32 (decode_rows or one quant::RowDecoder per call), dotted in double. The parity oracle of
// every SIMD tier and the kernel of the Reference mode, the Scalar tier and dtypes a tier lacks.
#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include "kernels/kernels.h"
#include "quant/codec.h"
#include "util/error.h"

namespace cortiq::kernels {

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

}  // namespace cortiq::kernels
