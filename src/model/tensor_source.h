// Where the model gets its tensors: the binding indirection (DESIGN.md "skill indirection at bind
// time"; ENGINE-NOTES §3.12).
//
// Model::bind asks a TensorSource for every tensor by its HF name. A skill overlay (round 2) is a
// TensorSource that resolves `skill.{id}.{name}` first and falls back to the backbone — the model
// code does not change. The CMF reader adapter and an in-memory source (tests) live here too.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/weight_view.h"

namespace cortiq::model {

/// A name → tensor lookup. Returned views borrow storage owned by the source (or its file), which
/// must outlive the model bound from it.
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  /// The tensor called `name` (HF naming, e.g. "model.layers.0.self_attn.q_proj.weight"), or
  /// nullopt when absent.
  virtual std::optional<kernels::WeightView> find(std::string_view name) const = 0;
  /// Tells the source that the model no longer reads `bytes` of a payload find() returned, because
  /// kernels::prepare_weight copied them into another layout: a file-backed source hands their
  /// pages back (later reads stay valid). The default does nothing.
  virtual void release(std::span<const uint8_t> bytes) const { (void)bytes; }
  /// Every tensor name the source holds (Weights::with_overrides replaces exactly these).
  virtual std::vector<std::string> names() const = 0;
};

/// Tensors held in memory (tests, oracles): each is an encoded payload with dtype and shape.
class MemoryTensorSource : public TensorSource {
 public:
  /// Adds (or replaces) an f32 tensor of `shape` (row-major values).
  void add_f32(const std::string& name, std::vector<uint64_t> shape, const std::vector<float>& values);
  /// Adds (or replaces) a tensor with an already encoded payload.
  void add(const std::string& name, quant::DType dtype, std::vector<uint64_t> shape,
           std::vector<uint8_t> payload);
  /// Removes a tensor (no-op when absent).
  void remove(const std::string& name);
  std::optional<kernels::WeightView> find(std::string_view name) const override;
  /// Names in sorted order.
  std::vector<std::string> names() const override;

 private:
  struct Entry {
    quant::DType dtype;
    std::vector<uint64_t> shape;
    std::vector<uint8_t> payload;
  };
  std::map<std::string, Entry, std::less<>> tensors_;
};

}  // namespace cortiq::model
