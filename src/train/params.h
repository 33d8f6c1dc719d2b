// The trainer's parameters: f32 tensors by canonical name (cmf/tensor_names) that a model binds
// without a copy (Params is a model::TensorSource), and their AdamW moments.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/tensor_source.h"

namespace cortiq::train {

/// One parameter tensor, row-major f32.
struct Param {
  std::vector<uint64_t> shape;
  std::vector<float> value;
  bool frozen = false;  ///< the optimizer leaves it as it is
};

/// Every parameter of a model. find() returns f32 views of the values (valid until the tensor set
/// changes; an optimizer step changes values in place, so a model bound earlier must be bound
/// again to see the new norms and biases it copied at bind).
class Params : public model::TensorSource {
 public:
  /// Adds (or replaces) a tensor; values.size() must equal Π shape (Error(InvalidArgument)).
  void add(const std::string& name, std::vector<uint64_t> shape, std::vector<float> values);
  /// Every tensor of `src` decoded to f32 (the start of a fine-tuning).
  static Params from_source(const model::TensorSource& src);

  std::map<std::string, Param>& all() noexcept { return p_; }
  const std::map<std::string, Param>& all() const noexcept { return p_; }
  /// Total number of values.
  uint64_t count() const noexcept;
  /// Number of values the optimizer changes (those of parameters not frozen).
  uint64_t trainable_count() const noexcept;

  /// Makes the parameters whose name matches one of `patterns` trainable and freezes all others
  /// (`cortiq train --trainable`). Patterns are globs over the canonical (HF) names: `*` any
  /// sequence including '.', `?` one character (convert::glob_match), e.g. `model.layers.4.mlp.*`.
  /// An empty list makes every parameter trainable. Throws Error(InvalidArgument) naming the first
  /// pattern that matches no parameter (nothing changed then).
  void set_trainable(const std::vector<std::string>& patterns);
  /// The names of the frozen parameters, sorted.
  std::vector<std::string> frozen_names() const;

  std::optional<kernels::WeightView> find(std::string_view name) const override;
  std::vector<std::string> names() const override;

 private:
  std::map<std::string, Param> p_;
};

}  // namespace cortiq::train
