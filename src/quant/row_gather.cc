// gather_rows (row_gather.h): per codec, the byte planes a row occupies, copied plane by plane.
#include "quant/row_gather.h"

#include <cstring>

#include "quant/layout.h"
#include "util/error.h"

namespace cortiq::quant {

namespace {

/// One byte plane of a payload: row r occupies [offset + r·row_bytes, + row_bytes).
struct Plane {
  uint64_t offset, row_bytes;
};

/// The planes of dtype t, in payload order; `tail` = bytes after the last plane copied unchanged
/// (q8_2f's column field).
std::vector<Plane> planes_of(DType t, uint64_t rows, uint64_t cols, uint64_t& tail) {
  const uint64_t n = rows * cols, gpr = cols / kGroup;
  tail = 0;
  switch (t) {
    case DType::F32:
      return {{0, 4 * cols}};
    case DType::F16:
    case DType::BF16:
      return {{0, 2 * cols}};
    case DType::Q8Row:  // [i8 : n][f16 scale : rows]
      return {{0, cols}, {n, 2}};
    case DType::Q8_2F:  // [i8 : n][f16 row : rows][f16 col : cols]
      tail = 2 * cols;
      return {{0, cols}, {n, 2}};
    case DType::Q4Block:  // [nibbles 16 : groups][f16 scale : groups]
      return {{0, 16 * gpr}, {16 * rows * gpr, 2 * gpr}};
    case DType::Q4Tiled:  // [f16 scale, nibbles 16] per group
      return {{0, 18 * gpr}};
    case DType::Q1:  // 6-byte tiles per group
      return {{0, kQ1TileBytes * gpr}};
    default:
      return {};
  }
}

}  // namespace

bool can_gather_rows(DType t, uint64_t cols) noexcept {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8Row:
    case DType::Q8_2F:
      return true;
    case DType::Q4Block:
    case DType::Q4Tiled:
    case DType::Q1:
      return cols % kGroup == 0;
    default:
      return false;
  }
}

std::optional<std::vector<uint8_t>> gather_rows(DType t, uint64_t rows, uint64_t cols,
                                                std::span<const uint8_t> payload,
                                                std::span<const uint32_t> ids, std::string_view name) {
  if (!can_gather_rows(t, cols)) return std::nullopt;
  const uint64_t shape[] = {rows, cols};
  validate_payload(t, shape, payload, name);
  for (uint32_t id : ids)
    if (id >= rows) fail(ErrorKind::Bounds, "tensor '{}': row {} gathered from {} rows", name, id, rows);
  uint64_t tail = 0;
  const std::vector<Plane> planes = planes_of(t, rows, cols, tail);
  const uint64_t k = ids.size();
  uint64_t size = tail;
  for (const Plane& p : planes) size += k * p.row_bytes;
  std::vector<uint8_t> out(size);
  uint8_t* o = out.data();
  for (const Plane& p : planes)
    for (uint32_t id : ids) {
      std::memcpy(o, payload.data() + p.offset + id * p.row_bytes, p.row_bytes);
      o += p.row_bytes;
    }
  if (tail) std::memcpy(o, payload.data() + payload.size() - tail, tail);
  return out;
}

}  // namespace cortiq::quant
