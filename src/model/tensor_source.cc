#include "model/tensor_source.h"

#include <cstring>

namespace cortiq::model {

void MemoryTensorSource::add_f32(const std::string& name, std::vector<uint64_t> shape,
                                 const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * 4);
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  add(name, quant::DType::F32, std::move(shape), std::move(bytes));
}

void MemoryTensorSource::add(const std::string& name, quant::DType dtype, std::vector<uint64_t> shape,
                             std::vector<uint8_t> payload) {
  tensors_[name] = Entry{dtype, std::move(shape), std::move(payload)};
}

void MemoryTensorSource::remove(const std::string& name) {
  tensors_.erase(name);
}

std::optional<kernels::WeightView> MemoryTensorSource::find(std::string_view name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return std::nullopt;
  return kernels::WeightView{it->second.dtype, it->second.shape, it->second.payload, std::string(name)};
}

std::vector<std::string> MemoryTensorSource::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : tensors_) out.push_back(k);
  return out;
}

}  // namespace cortiq::model
