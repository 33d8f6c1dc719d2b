// Per-sequence key/value storage (ENGINE-NOTES §3.14). A KvCache is one sequence's; a KvLayer is one
// layer's share of it — what an attention block gets (never a layer index into shared arrays, so an
// MTP block or a trainable tail can carry a cache of its own).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cmf/header.h"
#include "kernels/kernels.h"
#include "util/line_vec.h"

namespace cortiq::model {

/// One layer's keys and values, head-major: [n_kv_heads][capacity][head_dim], f32 or f16 (IEEE RNE
/// on store). Cache-line aligned: attention loads whole lines.
class KvLayer {
 public:
  KvLayer(size_t n_kv_heads, size_t capacity, size_t head_dim, bool f16);
  /// What kernels::attention reads.
  kernels::KvLayerView view() const noexcept;
  /// Writes position `pos` < capacity: k and v are [n_kv_heads·head_dim].
  void store(size_t pos, const float* k, const float* v);
  /// Bytes allocated.
  size_t bytes() const noexcept;

 private:
  size_t n_kv_heads_, capacity_, head_dim_;
  bool f16_;
  LineVec<float> k32_, v32_;
  LineVec<uint16_t> k16_, v16_;
};

/// One sequence's cache over every layer. `size()` = positions already stored (the next position to
/// run); Model::forward / forward_batch advance it after all layers have stored theirs.
class KvCache {
 public:
  /// Allocates `capacity` positions for every layer of `arch` (f16 = IEEE RNE storage).
  KvCache(const cmf::ModelArch& arch, size_t capacity, bool f16 = false);
  size_t capacity() const noexcept { return capacity_; }
  size_t size() const noexcept { return size_; }
  bool is_f16() const noexcept { return f16_; }
  size_t layers() const noexcept { return layers_.size(); }
  /// Forgets positions >= n (n <= size()); used to reuse a shared prompt prefix. Throws
  /// Error(InvalidArgument) for n > size().
  void truncate(size_t n);
  /// Bytes allocated.
  size_t bytes() const noexcept;
  /// Layer l's storage (l < layers()).
  KvLayer& layer(size_t l) { return layers_[l]; }
  const KvLayer& layer(size_t l) const { return layers_[l]; }
  /// Marks n positions as stored (the forward pass, after every layer wrote them).
  void set_size(size_t n) { size_ = n; }

 private:
  size_t capacity_ = 0, size_ = 0;
  bool f16_ = false;
  std::vector<KvLayer> layers_;
};

}  // namespace cortiq::model
