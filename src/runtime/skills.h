// Skills at run time (spec §9; FORMAT-NOTES §1.14; ENGINE-NOTES §3.12): binding a skill of a .cmf
// file on its backbone, and blends of skills.
//
// A skill stores only the tensors it changes, as `skill.{id}.{backbone name}` (full logical shape,
// any dtype). Binding it = model::Weights::with_overrides(backbone, overlay) with an overlay source
// that resolves `skill.{id}.{name}` for the names the skill holds: the layers it touches are bound
// again from the file's bytes in place (zero copy), every other layer is the backbone's own object.
// An inactive skill costs nothing: its bytes are never touched, so never paged in.
//
// A blend `a:0.7,b:0.3` materializes only the tensors some member touches, in f32:
// W = Σ_i w_i·T_i with the weights normalized to sum 1 and T_i the member's tensor, or the
// backbone's for a member that lacks it (ENGINE-NOTES §3.12). Routing (which skill a prompt wants,
// `--skill auto`, `--blend auto`) needs the hidden state of the prompt and lives a layer up
// (specialize/skill_choice.h); this header binds what was chosen.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cmf/header.h"
#include "cmf/reader.h"
#include "model/model.h"
#include "model/tensor_source.h"

namespace cortiq::runtime {

struct LoadedModel;

/// One member of a blend: a skill id and its weight (any non-negative number; normalized when bound).
struct BlendTerm {
  std::string id;
  double weight = 0.0;
};

/// Parses a `--blend` list `id:w,id:w,…` (ids as written; weights decimal numbers). Throws
/// Error(InvalidArgument) naming the offending item for an item without ':' or with an empty id,
/// a weight that is not a finite number, a negative weight, a repeated id, and for a list whose
/// weights sum to 0. Ids are not checked against a file here (bind_blend does).
std::vector<BlendTerm> parse_blend(std::string_view spec);

/// The record of skill `id` in `r`'s registry, or nullptr.
const cmf::SkillRecord* find_skill(const cmf::Reader& r, std::string_view id);

/// "a, b, c" — the ids of `r`'s skills, for error messages ("none" when the file has none).
std::string skill_ids(const cmf::Reader& r);

/// The overlay of one skill: names() are the backbone names of the file's `skill.{id}.*` tensors,
/// find(name) the view of `skill.{id}.{name}` read in place from the reader (zero copy). The reader
/// must outlive this source and every model bound from it.
class SkillOverlay : public model::TensorSource {
 public:
  /// Throws Error(InvalidArgument) listing the known skills when `id` has no record in `r`.
  SkillOverlay(const cmf::Reader& r, std::string id);
  std::optional<kernels::WeightView> find(std::string_view name) const override;
  void release(std::span<const uint8_t> bytes) const override;
  std::vector<std::string> names() const override { return names_; }
  const std::string& id() const noexcept { return id_; }

 private:
  const cmf::Reader* r_;
  std::string id_;
  std::vector<std::string> names_;
};

/// The materialized blend of `terms` (weights normalized to sum 1, ids checked against `r`): an f32
/// tensor under each backbone name any member touches, W = Σ_i (w_i/Σw)·T_i accumulated in f32 in
/// term order, T_i = member i's tensor decoded to f32, else the backbone's. Throws
/// Error(InvalidArgument) for an unknown id (listing the known ones), a negative weight or a zero
/// sum; Error(Parse) naming the tensor when a skill tensor's shape differs from the backbone's.
std::unique_ptr<model::MemoryTensorSource> blend_overlay(const cmf::Reader& r, std::vector<BlendTerm> terms);

/// Rebinds `lm` to run skill `id` on its backbone ("" / "none" / "backbone": the backbone alone):
/// lm.model becomes a Model over Weights::with_overrides(lm.backbone, SkillOverlay) (untouched layers
/// shared), lm.skill = id. The task mask: the skill's input_mask_task when `explicit_task` is false
/// and the record names one (FORMAT-NOTES §1.14; CLI-NOTES run), else the mask active before; it
/// is compiled again for the new weights. Throws Error(InvalidArgument) for an unknown id (listing
/// the known ones), what Weights::with_overrides throws for a malformed skill tensor, and
/// Error(InvalidArgument) when the skill's input_mask_task is no mask of the file.
void bind_skill(LoadedModel& lm, const std::string& id, bool explicit_task);

/// Rebinds `lm` to the blend of `terms` (blend_overlay; lm.skill = "blend", lm.blend = the
/// normalized non-zero terms). A blend with one non-zero term is that skill (bind_skill): no tensor
/// is materialized. Throws what blend_overlay and bind_skill throw.
void bind_blend(LoadedModel& lm, std::vector<BlendTerm> terms, bool explicit_task);

/// A skill bound for one sequence of the engine (serve: sequences with different skills decode in
/// one batch, model::SeqStep::weights): its overlay, its weights on the backbone (untouched layers
/// the backbone's own objects, so read once per step for every sequence), a model over them used
/// only to compile task masks for these weights (gathered FFN rows), and the mask the skill
/// activates (input_mask_task; nullptr = none). Immutable once made; shared by the jobs that run it.
struct SkillBinding {
  std::string id;
  std::unique_ptr<model::TensorSource> overlay;  ///< declared first: outlives weights and model
  std::shared_ptr<const model::Weights> weights;
  std::unique_ptr<model::Model> model;  ///< one thread; compile_variant only
  const cmf::TaskMask* mask = nullptr;
};

/// Binds skill `id` of lm's file on lm.backbone for per-sequence use ("", "none", "backbone": the
/// backbone itself, id ""). Throws as bind_skill (unknown
/// id listing the known ones; input_mask_task naming no mask of the file).
std::shared_ptr<const SkillBinding> make_skill_binding(const LoadedModel& lm, const std::string& id);

/// "a 0.70, b 0.30": a normalized blend for messages.
std::string describe_blend(const std::vector<BlendTerm>& terms);

}  // namespace cortiq::runtime
