// Internal helpers of the quant layer (checked size arithmetic). Not part of the public API.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "util/error.h"

namespace cortiq::quant::detail {

/// a·b, throwing Error(Bounds) naming `what` on u64 overflow.
inline uint64_t mul(uint64_t a, uint64_t b, std::string_view what) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) fail(ErrorKind::Bounds, "{}: size overflows u64", what);
  return r;
}
/// a+b, throwing Error(Bounds) naming `what` on u64 overflow.
inline uint64_t add(uint64_t a, uint64_t b, std::string_view what) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) fail(ErrorKind::Bounds, "{}: size overflows u64", what);
  return r;
}
/// Product of the dims (1 for a 0-D shape), throwing Error(Bounds) on overflow.
inline uint64_t numel(std::span<const uint64_t> shape, std::string_view what) {
  uint64_t n = 1;
  for (uint64_t d : shape) n = mul(n, d, what);
  return n;
}
inline uint64_t ceil_div(uint64_t a, uint64_t b) {
  return a / b + (a % b != 0);
}

}  // namespace cortiq::quant::detail
