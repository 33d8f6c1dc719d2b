// Cache-line aligned std::vector storage for buffers that vector kernels read with full-width loads.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace cortiq {

/// Allocator of cache-line (64-byte) aligned storage. Buffers that SIMD kernels read with
/// full-width loads at multiples of 64 bytes from their start (int8 activations, their scales and
/// biases, group scales, staged rows, key blocks, the KV cache, the forward pass's activations) get
/// it: std::allocator aligns to 16 bytes only (and a large malloc lands 16 bytes past a page), so
/// most such loads straddled two cache lines and cost two L1 accesses. Measured with
/// bench/kernels_bench (1 thread, 4864×896 q4tp, interleaved runs) when the kernels' scratch got
/// it: matmul_n4 212 → 182 µs, matmul_n64 2.69 → 2.26 ms, matvec 102 → 97 µs.
template <class T>
struct LineAlloc {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  LineAlloc() = default;
  template <class U>
  explicit LineAlloc(const LineAlloc<U>&) noexcept {}
  /// n elements, 64-byte aligned; throws std::bad_alloc.
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, kAlign); }
  friend bool operator==(const LineAlloc&, const LineAlloc&) noexcept { return true; }
};

/// A vector whose data() is 64-byte aligned (see LineAlloc).
template <class T>
using LineVec = std::vector<T, LineAlloc<T>>;

/// Grow-only scratch: resizes `v` to at least n elements (never shrinks, so a buffer reused every
/// call stops allocating once warm) and returns v.data(); contents past the old size are
/// value-initialized, earlier ones kept. Throws std::bad_alloc.
template <class T, class A>
T* grow(std::vector<T, A>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace cortiq
