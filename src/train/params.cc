// Params (params.h).
#include "train/params.h"

#include "convert/plan.h"
#include "kernels/kernels.h"
#include "util/error.h"

namespace cortiq::train {

void Params::add(const std::string& name, std::vector<uint64_t> shape, std::vector<float> values) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  if (n != values.size())
    fail(ErrorKind::InvalidArgument, "train: parameter '{}' has {} values for {} elements", name,
         values.size(), n);
  p_[name] = Param{std::move(shape), std::move(values), false};
}

Params Params::from_source(const model::TensorSource& src) {
  Params p;
  for (const std::string& name : src.names()) {
    const auto w = src.find(name);
    if (!w) continue;
    std::vector<float> v(w->numel());
    kernels::decode_rows(*w, 0, w->rows(), v.data());
    p.add(name, w->shape, std::move(v));
  }
  return p;
}

uint64_t Params::count() const noexcept {
  uint64_t n = 0;
  for (const auto& [name, t] : p_) n += t.value.size();
  return n;
}

uint64_t Params::trainable_count() const noexcept {
  uint64_t n = 0;
  for (const auto& [name, t] : p_)
    if (!t.frozen) n += t.value.size();
  return n;
}

void Params::set_trainable(const std::vector<std::string>& patterns) {
  const auto matched = [&](const std::string& name) {
    for (const std::string& g : patterns)
      if (convert::glob_match(g, name)) return true;
    return false;
  };
  for (const std::string& g : patterns) {
    bool any = false;
    for (const auto& [name, t] : p_) any = any || convert::glob_match(g, name);
    if (!any)
      fail(ErrorKind::InvalidArgument,
           "train: --trainable pattern '{}' matches no parameter (names look like "
           "'model.layers.0.mlp.up_proj.weight')",
           g);
  }
  for (auto& [name, t] : p_) t.frozen = !patterns.empty() && !matched(name);
}

std::vector<std::string> Params::frozen_names() const {
  std::vector<std::string> n;
  for (const auto& [name, t] : p_)
    if (t.frozen) n.push_back(name);
  return n;
}

std::optional<kernels::WeightView> Params::find(std::string_view name) const {
  const auto it = p_.find(std::string(name));
  if (it == p_.end()) return std::nullopt;
  const Param& t = it->second;
  return kernels::WeightView{
      quant::DType::F32, t.shape,
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(t.value.data()), 4 * t.value.size()),
      it->first};
}

std::vector<std::string> Params::names() const {
  std::vector<std::string> n;
  for (const auto& [name, t] : p_) n.push_back(name);
  return n;
}

}  // namespace cortiq::train
