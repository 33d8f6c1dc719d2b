#include <algorithm>

#include "model/model.h"
#include "util/error.h"
#include "util/half.h"

namespace cortiq::model {

KvCache::KvCache(const cmf::ModelArch& arch, size_t capacity, bool f16)
    : capacity_(capacity), n_layers_(arch.num_layers), f16_(f16), head_dim_(arch.head_dim) {
  kv_dim_.assign(n_layers_, arch.num_kv_heads);
  for (size_t l = 0; l < n_layers_; ++l) {
    const size_t n = kv_dim_[l] * capacity_ * head_dim_;
    if (f16_) {
      k16_.emplace_back(n);
      v16_.emplace_back(n);
    } else {
      k32_.emplace_back(n);
      v32_.emplace_back(n);
    }
  }
}

void KvCache::truncate(size_t n) {
  if (n > size_) fail(ErrorKind::InvalidArgument, "KV cache truncate to {} > size {}", n, size_);
  size_ = n;
}

size_t KvCache::bytes() const noexcept {
  size_t b = 0;
  for (size_t l = 0; l < n_layers_; ++l) b += 2 * kv_dim_[l] * capacity_ * head_dim_ * (f16_ ? 2 : 4);
  return b;
}

kernels::KvLayerView KvCache::layer_view(size_t layer) const {
  if (f16_) return {k16_[layer].data(), v16_[layer].data(), true, capacity_};
  return {k32_[layer].data(), v32_[layer].data(), false, capacity_};
}

void KvCache::store(size_t layer, size_t pos, const float* k, const float* v) {
  for (size_t h = 0; h < kv_dim_[layer]; ++h) {
    const size_t base = (h * capacity_ + pos) * head_dim_;
    for (size_t d = 0; d < head_dim_; ++d) {
      if (f16_) {
        k16_[layer][base + d] = f32_to_f16(k[h * head_dim_ + d]);
        v16_[layer][base + d] = f32_to_f16(v[h * head_dim_ + d]);
      } else {
        k32_[layer][base + d] = k[h * head_dim_ + d];
        v32_[layer][base + d] = v[h * head_dim_ + d];
      }
    }
  }
}

}  // namespace cortiq::model
