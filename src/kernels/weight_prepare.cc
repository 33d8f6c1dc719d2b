// Weights readied for the kernels (kernels.h "Weights"): which dtypes have a kernel, the load-time
// payload check, prepare_weight (q4_tiled relayout, q4tp/q2tp exp2 bases, the weight plan) and
// decode_rows (one weight's rows to f32, the scalar path every tier falls back to).
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"
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

}  // namespace cortiq::kernels
