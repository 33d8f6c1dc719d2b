#include "runtime/skills.h"

#include <fmt/ranges.h>

#include <charconv>
#include <cmath>
#include <set>

#include "cmf/tensor_names.h"
#include "quant/codec.h"
#include "runtime/session.h"
#include "util/error.h"

namespace cortiq::runtime {

std::vector<BlendTerm> parse_blend(std::string_view spec) {
  std::vector<BlendTerm> out;
  std::set<std::string, std::less<>> seen;
  double sum = 0.0;
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t comma = std::min(spec.find(',', pos), spec.size());
    const std::string_view item = spec.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t colon = item.rfind(':');
    if (colon == std::string_view::npos || colon == 0)
      fail(ErrorKind::InvalidArgument, "--blend: '{}' is not id:weight (e.g. --blend code:0.7,manuals:0.3)",
           item);
    const std::string id(item.substr(0, colon));
    const std::string_view num = item.substr(colon + 1);
    double w = 0.0;
    const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), w);
    if (ec != std::errc() || end != num.data() + num.size() || num.empty() || !std::isfinite(w))
      fail(ErrorKind::InvalidArgument, "--blend: the weight of '{}' is '{}', not a number", id, num);
    if (w < 0.0) fail(ErrorKind::InvalidArgument, "--blend: the weight of '{}' is negative ({})", id, w);
    if (!seen.insert(id).second) fail(ErrorKind::InvalidArgument, "--blend: skill '{}' is listed twice", id);
    out.push_back({id, w});
    sum += w;
  }
  if (!(sum > 0.0)) fail(ErrorKind::InvalidArgument, "--blend '{}': the weights sum to 0", spec);
  return out;
}

const cmf::SkillRecord* find_skill(const cmf::Reader& r, std::string_view id) {
  for (const cmf::SkillRecord& s : r.skills())
    if (s.id == id) return &s;
  return nullptr;
}

std::string skill_ids(const cmf::Reader& r) {
  std::string out;
  for (const cmf::SkillRecord& s : r.skills()) out += (out.empty() ? "" : ", ") + s.id;
  return out.empty() ? "none" : out;
}

namespace {
[[noreturn]] void unknown_skill(const cmf::Reader& r, std::string_view id) {
  fail(ErrorKind::InvalidArgument, "unknown skill '{}'; skills in this file: {} (or none, auto)", id,
       skill_ids(r));
}
}  // namespace

SkillOverlay::SkillOverlay(const cmf::Reader& r, std::string id) : r_(&r), id_(std::move(id)) {
  if (!find_skill(r, id_)) unknown_skill(r, id_);
  for (const cmf::TensorInfo& t : r.tensors())
    if (auto sk = cmf::parse_skill_name(t.name); sk && sk->first == id_) names_.push_back(sk->second);
}

std::optional<kernels::WeightView> SkillOverlay::find(std::string_view name) const {
  const cmf::TensorInfo* t = r_->find(cmf::skill_tensor_name(id_, name));
  if (!t) return std::nullopt;
  return kernels::WeightView{t->dtype, t->shape, r_->payload(*t), t->name};
}

void SkillOverlay::release(std::span<const uint8_t> bytes) const {
  r_->release(bytes);
}

namespace {
std::vector<float> decode_f32(const cmf::Reader& r, const cmf::TensorInfo& t) {
  uint64_t n = 1;
  for (uint64_t d : t.shape) n *= d;
  std::vector<float> v(n);
  quant::decode(t.dtype, t.shape, r.payload(t), v);
  return v;
}

/// Weights normalized to sum 1, zero terms dropped, ids checked.
std::vector<BlendTerm> normalized(const cmf::Reader& r, std::vector<BlendTerm> terms) {
  double sum = 0.0;
  for (const BlendTerm& t : terms) {
    if (!find_skill(r, t.id)) unknown_skill(r, t.id);
    if (!(t.weight >= 0.0) || !std::isfinite(t.weight))
      fail(ErrorKind::InvalidArgument, "--blend: the weight of '{}' is negative ({})", t.id, t.weight);
    sum += t.weight;
  }
  if (!(sum > 0.0)) fail(ErrorKind::InvalidArgument, "--blend: the weights sum to 0");
  std::vector<BlendTerm> out;
  for (BlendTerm& t : terms)
    if (t.weight > 0.0) out.push_back({std::move(t.id), t.weight / sum});
  return out;
}
}  // namespace

std::unique_ptr<model::MemoryTensorSource> blend_overlay(const cmf::Reader& r, std::vector<BlendTerm> terms) {
  terms = normalized(r, std::move(terms));
  std::set<std::string> touched;
  for (const BlendTerm& t : terms)
    for (const std::string& n : SkillOverlay(r, t.id).names()) touched.insert(n);
  auto out = std::make_unique<model::MemoryTensorSource>();
  for (const std::string& name : touched) {
    const cmf::TensorInfo* base = r.find(name);
    if (!base)
      fail(ErrorKind::Parse, "skill tensor '{}': the backbone has no tensor '{}' to blend it with",
           cmf::skill_tensor_name(terms.front().id, name), name);
    std::vector<float> acc;
    for (const BlendTerm& t : terms) {
      const cmf::TensorInfo* st = r.find(cmf::skill_tensor_name(t.id, name));
      const cmf::TensorInfo& src = st ? *st : *base;
      if (src.shape != base->shape)
        fail(ErrorKind::Parse, "skill tensor '{}' has shape {}, the backbone's '{}' {}", src.name,
             fmt::join(src.shape, "x"), name, fmt::join(base->shape, "x"));
      const std::vector<float> v = decode_f32(r, src);
      const float w = static_cast<float>(t.weight);
      if (acc.empty()) {
        acc.resize(v.size());
        for (size_t i = 0; i < v.size(); ++i) acc[i] = w * v[i];
      } else {
        for (size_t i = 0; i < v.size(); ++i) acc[i] += w * v[i];
      }
    }
    out->add_f32(name, base->shape, acc);
  }
  return out;
}

namespace {
/// Swaps lm's model for one over `weights` (with `overlay` kept alive) and recompiles the task mask
/// `mask_name` ("" = keep lm.active_task) for it.
void rebind(LoadedModel& lm, std::shared_ptr<const model::Weights> weights,
            std::unique_ptr<model::TensorSource> overlay, const std::string& mask_name) {
  const cmf::MaskCatalog* cat = lm.reader->masks();
  const std::string task = mask_name.empty() ? lm.active_task : mask_name;
  const cmf::TaskMask* m = cat && task != "off" ? cat->find(task) : nullptr;
  if (!mask_name.empty() && !m)
    fail(ErrorKind::InvalidArgument, "skill '{}' activates task mask '{}', which this file does not have",
         lm.skill, mask_name);
  lm.variant.reset();  // compiled for the old weights (gathered rows)
  lm.model = model::Model::create(std::move(weights), lm.model_options);
  lm.overlay = std::move(overlay);  // after the old model is gone
  if (m) {
    lm.variant = lm.model->compile_variant(m);
    lm.active_task = m->name;
    lm.sparsity = m->sparsity;
  }
}
}  // namespace

void bind_skill(LoadedModel& lm, const std::string& id, bool explicit_task) {
  const cmf::Reader& r = *lm.reader;
  lm.blend.clear();
  if (id.empty() || id == "none" || id == "backbone") {
    lm.skill.clear();
    rebind(lm, lm.backbone, nullptr, "");
    return;
  }
  const cmf::SkillRecord* rec = find_skill(r, id);
  if (!rec) unknown_skill(r, id);
  auto overlay = std::make_unique<SkillOverlay>(r, id);
  auto w = model::Weights::with_overrides(lm.backbone, *overlay);
  lm.skill = id;
  rebind(lm, std::move(w), std::move(overlay),
         !explicit_task && rec->input_mask_task ? *rec->input_mask_task : std::string());
}

void bind_blend(LoadedModel& lm, std::vector<BlendTerm> terms, bool explicit_task) {
  terms = normalized(*lm.reader, std::move(terms));
  if (terms.size() == 1) {
    bind_skill(lm, terms.front().id, explicit_task);
    lm.blend = terms;
    return;
  }
  auto overlay = blend_overlay(*lm.reader, terms);
  auto w = model::Weights::with_overrides(lm.backbone, *overlay);
  lm.skill = "blend";
  lm.blend = std::move(terms);
  rebind(lm, std::move(w), std::move(overlay), "");
}

std::shared_ptr<const SkillBinding> make_skill_binding(const LoadedModel& lm, const std::string& id) {
  const cmf::Reader& r = *lm.reader;
  model::ModelOptions mo = lm.model_options;
  mo.threads = 1;
  auto b = std::make_shared<SkillBinding>();
  if (id.empty() || id == "none" || id == "backbone") {
    b->weights = lm.backbone;
    b->model = model::Model::create(b->weights, mo);
    return b;
  }
  const cmf::SkillRecord* rec = find_skill(r, id);
  if (!rec) unknown_skill(r, id);
  b->id = id;
  auto overlay = std::make_unique<SkillOverlay>(r, id);
  b->weights = model::Weights::with_overrides(lm.backbone, *overlay);
  b->overlay = std::move(overlay);
  b->model = model::Model::create(b->weights, mo);
  if (rec->input_mask_task) {
    const cmf::MaskCatalog* cat = r.masks();
    b->mask = cat ? cat->find(*rec->input_mask_task) : nullptr;
    if (!b->mask)
      fail(ErrorKind::InvalidArgument, "skill '{}' activates task mask '{}', which this file does not have",
           id, *rec->input_mask_task);
  }
  return b;
}

std::string describe_blend(const std::vector<BlendTerm>& terms) {
  std::string out;
  for (const BlendTerm& t : terms) out += fmt::format("{}{} {:.2f}", out.empty() ? "" : ", ", t.id, t.weight);
  return out;
}

}  // namespace cortiq::runtime
