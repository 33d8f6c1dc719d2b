#include "model/kv_cache.h"

#include "util/error.h"
#include "util/half.h"

namespace cortiq::model {

KvLayer::KvLayer(size_t n_kv_heads, size_t capacity, size_t head_dim, bool f16)
    : n_kv_heads_(n_kv_heads), capacity_(capacity), head_dim_(head_dim), f16_(f16) {
  const size_t n = n_kv_heads_ * capacity_ * head_dim_;
  if (f16_) {
    k16_ = LineVec<uint16_t>(n);
    v16_ = LineVec<uint16_t>(n);
  } else {
    k32_ = LineVec<float>(n);
    v32_ = LineVec<float>(n);
  }
}

kernels::KvLayerView KvLayer::view() const noexcept {
  if (f16_) return {k16_.data(), v16_.data(), true, capacity_};
  return {k32_.data(), v32_.data(), false, capacity_};
}

void KvLayer::store(size_t pos, const float* k, const float* v) {
  for (size_t h = 0; h < n_kv_heads_; ++h) {
    const size_t base = (h * capacity_ + pos) * head_dim_;
    for (size_t d = 0; d < head_dim_; ++d) {
      if (f16_) {
        k16_[base + d] = f32_to_f16(k[h * head_dim_ + d]);
        v16_[base + d] = f32_to_f16(v[h * head_dim_ + d]);
      } else {
        k32_[base + d] = k[h * head_dim_ + d];
        v32_[base + d] = v[h * head_dim_ + d];
      }
    }
  }
}

size_t KvLayer::bytes() const noexcept {
  return 2 * n_kv_heads_ * capacity_ * head_dim_ * (f16_ ? 2 : 4);
}

KvCache::KvCache(const cmf::ModelArch& arch, size_t capacity, bool f16) : capacity_(capacity), f16_(f16) {
  layers_.reserve(arch.num_layers);
  for (size_t l = 0; l < arch.num_layers; ++l)
    layers_.emplace_back(arch.num_kv_heads, capacity, arch.head_dim, f16);
}

void KvCache::truncate(size_t n) {
  if (n > size_) fail(ErrorKind::InvalidArgument, "KV cache truncate to {} > size {}", n, size_);
  size_ = n;
}

size_t KvCache::bytes() const noexcept {
  size_t b = 0;
  for (const KvLayer& l : layers_) b += l.bytes();
  return b;
}

}  // namespace cortiq::model
