// Parsers of the multi-plane / variable-size payload layouts (FORMAT-NOTES §1.8).
#include "quant/layout.h"

#include "quant/detail.h"
#include "util/error.h"

namespace cortiq::quant {

using detail::add;
using detail::mul;

Matrix matrix_2d(std::span<const uint64_t> shape, std::string_view what) {
  if (shape.size() != 2)
    fail(ErrorKind::Parse, "tensor '{}': expected a 2-D shape, got {} dims", what, shape.size());
  (void)detail::numel(shape, what);
  return {shape[0], shape[1]};
}

namespace {
Matrix grouped_2d(DType t, std::span<const uint64_t> shape, std::string_view what) {
  const Matrix m = matrix_2d(shape, what);
  if (m.in % kGroup != 0)
    fail(ErrorKind::Parse, "tensor '{}': {} needs in % 32 == 0, got in = {}", what, dtype_name(t), m.in);
  return m;
}
[[noreturn]] void short_payload(std::string_view what, DType t, uint64_t need, size_t have) {
  fail(ErrorKind::Parse, "tensor '{}': {} payload truncated: needs at least {} bytes, has {}", what,
       dtype_name(t), need, have);
}
void exact(std::string_view what, DType t, uint64_t want, size_t have) {
  if (want != have)
    fail(ErrorKind::Parse, "tensor '{}': {} payload is {} bytes, its structure says {}", what, dtype_name(t),
         have, want);
}
}  // namespace

VBitView vbit_view(DType t, std::span<const uint64_t> shape, std::span<const uint8_t> payload,
                   std::string_view what) {
  VBitView v;
  vbit_view_into(v, t, shape, payload, what);
  return v;
}

void vbit_view_into(VBitView& v, DType t, std::span<const uint64_t> shape, std::span<const uint8_t> payload,
                    std::string_view what) {
  if (t != DType::VBit && t != DType::VBitRo)
    fail(ErrorKind::InvalidArgument, "vbit_view: dtype {}", dtype_name(t));
  const Matrix m = grouped_2d(t, shape, what);
  v.rows = m.rows;
  v.in = m.in;
  const uint64_t scales_off = m.rows;
  const uint64_t table_off = add(scales_off, mul(mul(m.rows, m.in / kGroup, what), 2, what), what);
  uint64_t packed_off = table_off;
  if (t == DType::VBitRo) packed_off = add(table_off, mul(add(m.rows, 1, what), 4, what), what);
  if (payload.size() < packed_off) short_payload(what, t, packed_off, payload.size());
  v.bits = payload.data();
  v.scales = payload.data() + scales_off;
  v.packed = payload.data() + packed_off;
  v.row_off.resize(m.rows + 1);
  uint64_t off = 0;
  for (uint64_t r = 0; r < m.rows; ++r) {
    const unsigned b = v.bits[r];
    if (!vbit_width_ok(b))
      fail(ErrorKind::Parse, "tensor '{}': row {} has vbit width {} (allowed 3,4,5,6,8)", what, r, b);
    const uint64_t span = vbit_row_bytes(m.in, b);  // in <= numel fits u64; in*8 checked below
    if (m.in > UINT64_MAX / 8) fail(ErrorKind::Bounds, "tensor '{}': row size overflows u64", what);
    if (t == DType::VBitRo) {
      const uint64_t o0 = load_le<uint32_t>(payload.data() + table_off + 4 * r);
      const uint64_t o1 = load_le<uint32_t>(payload.data() + table_off + 4 * (r + 1));
      if (r == 0 && o0 != 0) fail(ErrorKind::Parse, "tensor '{}': vbit_ro off[0] = {}, must be 0", what, o0);
      if (o1 < o0 || o1 - o0 != span)
        fail(ErrorKind::Parse, "tensor '{}': vbit_ro row {} offsets {}..{} do not span {} bytes", what, r, o0,
             o1, span);
    }
    v.row_off[r] = off;
    off = add(off, span, what);
  }
  v.row_off[m.rows] = off;
  if (t == DType::VBitRo && m.rows == 0 && load_le<uint32_t>(payload.data() + table_off) != 0)
    fail(ErrorKind::Parse, "tensor '{}': vbit_ro off[0] must be 0", what);
  exact(what, t, add(packed_off, off, what), payload.size());
}

Q1sView q1s_view(std::span<const uint64_t> shape, std::span<const uint8_t> payload, std::string_view what,
                 bool check_entries) {
  const Matrix m = grouped_2d(DType::Q1S, shape, what);
  const uint64_t n = m.rows * m.in;
  const uint64_t base_bytes = mul(n / kGroup, kQ1TileBytes, what);
  const uint64_t head = add(base_bytes, 4, what);
  if (payload.size() < head) short_payload(what, DType::Q1S, head, payload.size());
  Q1sView v;
  v.rows = m.rows;
  v.in = m.in;
  v.base = payload.data();
  v.count = load_le<uint32_t>(payload.data() + base_bytes);
  v.entries = payload.data() + head;
  exact(what, DType::Q1S, add(head, mul(v.count, 6, what), what), payload.size());
  for (uint32_t i = 0; check_entries && i < v.count; ++i) {
    if (v.index(i) >= n)
      fail(ErrorKind::Parse, "tensor '{}': q1s outlier {} has flat index {} >= {} elements", what, i,
           v.index(i), n);
    if (i > 0 && v.index(i) <= v.index(i - 1)) v.ascending = false;
  }
  return v;
}

void q1t_check_row(const Q1tView& v, uint64_t r, std::string_view what) {
  if (v.ptr(r + 1) < v.ptr(r) || v.ptr(r + 1) > v.ptr(v.rows))
    fail(ErrorKind::Parse, "tensor '{}': q1t row_ptr not monotone at row {} ({} > {})", what, r, v.ptr(r),
         v.ptr(r + 1));
  const uint64_t gpr = v.in / kGroup;
  for (uint32_t i = v.ptr(r); i < v.ptr(r + 1); ++i) {
    const uint64_t c = v.col(i);
    if (c >= v.in)
      fail(ErrorKind::Parse, "tensor '{}': q1t outlier {} (row {}) has col {} >= in {}", what, i, r, c, v.in);
    const uint8_t* tile = v.base + (r * gpr + c / kGroup) * kQ1tTileBytes;
    if (q1t_code(tile, static_cast<uint32_t>(c % kGroup)) != 0)
      fail(ErrorKind::Parse, "tensor '{}': q1t base code at outlier (row {}, col {}) is not 0", what, r, c);
  }
}

Q1tView q1t_view(std::span<const uint64_t> shape, std::span<const uint8_t> payload, std::string_view what,
                 bool check_rows) {
  const Matrix m = grouped_2d(DType::Q1T, shape, what);
  if (m.in > 65536) fail(ErrorKind::Parse, "tensor '{}': q1t needs in <= 65536, got {}", what, m.in);
  const uint64_t base_bytes = mul(m.rows * (m.in / kGroup), kQ1tTileBytes, what);
  const uint64_t head = add(base_bytes, mul(add(m.rows, 1, what), 4, what), what);
  if (payload.size() < head) short_payload(what, DType::Q1T, head, payload.size());
  Q1tView v;
  v.rows = m.rows;
  v.in = m.in;
  v.base = payload.data();
  v.row_ptr = payload.data() + base_bytes;
  v.entries = payload.data() + head;
  if (v.ptr(0) != 0) fail(ErrorKind::Parse, "tensor '{}': q1t row_ptr[0] = {}, must be 0", what, v.ptr(0));
  exact(what, DType::Q1T, add(head, mul(v.ptr(m.rows), 4, what), what), payload.size());
  if (check_rows)
    for (uint64_t r = 0; r < m.rows; ++r) q1t_check_row(v, r, what);
  return v;
}

TpView tp_view(DType t, std::span<const uint64_t> shape, std::span<const uint8_t> payload,
               std::string_view what) {
  if (t != DType::Q4TP && t != DType::Q2TP)
    fail(ErrorKind::InvalidArgument, "tp_view: dtype {}", dtype_name(t));
  const Matrix m = grouped_2d(t, shape, what);
  if (m.in == 0) fail(ErrorKind::Parse, "tensor '{}': {} needs in > 0", what, dtype_name(t));
  const uint64_t want = *expected_nbytes(t, shape);
  exact(what, t, want, payload.size());
  TpView v;
  v.rows = m.rows;
  v.in = m.in;
  v.gpr = m.in / kGroup;
  v.tile_bytes = t == DType::Q4TP ? 16 : 8;
  v.code_row_bytes = tp_code_row_bytes(v.gpr);
  v.weights = payload.data();
  v.params = v.weights + m.rows * v.gpr * v.tile_bytes;
  v.codes = v.params + 4 * m.rows;
  return v;
}

}  // namespace cortiq::quant
