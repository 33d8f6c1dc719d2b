// TensorSource over an opened .cmf file: tensors are read in place from the Reader's mmap (or
// memory); a model copies only what kernels::prepare_weight re-lays out, handing those pages back.
#pragma once

#include "cmf/reader.h"
#include "model/tensor_source.h"

namespace cortiq::model {

/// Zero-copy views of a cmf::Reader's tensors; release() forwards to Reader::release. The Reader
/// must outlive this source and any model bound from it. Skill indirection (round 2) wraps this
/// source.
class CmfTensorSource : public TensorSource {
 public:
  explicit CmfTensorSource(const cmf::Reader& r) : r_(&r) {}
  std::optional<kernels::WeightView> find(std::string_view name) const override {
    const cmf::TensorInfo* t = r_->find(name);
    if (!t) return std::nullopt;
    return kernels::WeightView{t->dtype, t->shape, r_->payload(*t), t->name};
  }
  void release(std::span<const uint8_t> bytes) const override { r_->release(bytes); }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const cmf::TensorInfo& t : r_->tensors()) out.push_back(t.name);
    return out;
  }

 private:
  const cmf::Reader* r_;
};

}  // namespace cortiq::model
