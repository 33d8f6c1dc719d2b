// The quantization plan of `cortiq convert` / `requant`: which dtype each tensor gets
// (FORMAT-NOTES §1.9, CLI-NOTES §2.1 --quant spellings, issue 4 --quant-rule).
//
// Decision order for one tensor (name, shape):
//   1. names ending `.tid2eid` (lookup tables) → f32;
//   2. the first `--quant-rule GLOB=DTYPE` whose glob matches the name (first match wins) chooses
//      the dtype — overriding the name-based f16 list of step 3, but not the shape rules of 4/5;
//      otherwise the base `--quant` choice (with the q2tp profile, see below);
//   3. (base choice only) the force-f16 list — MoE router `mlp.gate.weight`,
//      `shared_expert_gate.weight`, `self_attn.g_proj.weight`, `*conv1d.weight`, GDN
//      `linear_attn.in_proj_a/in_proj_b` (and a fused `in_proj_ba`), and every name containing
//      "norm" — gets f16;
//   4. a quantized codec on a tensor that is not 2-D or has < 32 elements → f16 (f32 when the
//      base choice is f32);
//   5. codecs needing `in % 32 == 0` (q4_tiled, q4tp, q2tp, vbit_ro, q1, q1s, q1t; q1t also
//      in ≤ 65536) fall back to q8_2f when the shape violates it. q8_row/q8_2f/q4_block do not.
// Float base choices (f32/f16/bf16) store every tensor in that dtype.
// `--quant q2tp` is a profile: MoE expert and shared-expert gate_proj/up_proj get q2tp, on a dense
// model the dense FFN gate_proj/up_proj do; everything else gets q4tp; the MTP block never q2tp.
// Names are read through cmf/tensor_names (roles, their modules, the MTP block); a skill overlay
// (`skill.{id}.{name}`) is decided by the tensor it overlays, except that only a name starting
// with the MTP block's prefix is excluded from q2tp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cmf/header.h"
#include "quant/codec.h"
#include "quant/dtype.h"

namespace cortiq::convert {

/// One `--quant` choice: the stored dtype plus the encoder variant or profile it implies.
struct QuantChoice {
  quant::DType dtype = quant::DType::Q8Row;
  bool q1p = false;           ///< q1 with error diffusion (dtype q1)
  bool q2tp_profile = false;  ///< `--quant q2tp` profile (see file comment)
  std::string name;           ///< canonical CLI spelling ("q8", "q4tp", "q1p", "vbit", ...)
};

/// Parses a --quant spelling (case-insensitive): q8|q8_row|q8row, q8_2f|q82f|q8f,
/// q4|q4_block|q4block, q4t|q4_tiled, q4tp|q4t_pred, q2tp|q2t_pred, f16|fp16, f32|fp32, bf16,
/// vbit|v_bit|vbit_ro (→ dtype vbit_ro), q1, q1p|q1_ptq, q1s|q1_mask, q1t|q1_ternary.
/// Throws Error(InvalidArgument) listing the accepted spellings.
QuantChoice parse_quant(std::string_view spelling);

/// `--quant-rule 'GLOB=DTYPE'`. `glob` supports `*` (any run, dots included) and `?`.
struct QuantRule {
  std::string glob;
  QuantChoice choice;
  std::string text;  ///< the rule as given (for provenance)
};
/// Parses "GLOB=DTYPE" (the last '=' separates). Throws Error(InvalidArgument).
QuantRule parse_quant_rule(std::string_view text);

/// Whether `name` matches `pattern` (`*` any sequence, `?` one character, the rest literal).
bool glob_match(std::string_view pattern, std::string_view name) noexcept;

/// The whole plan.
struct QuantPlan {
  QuantChoice base;
  std::vector<QuantRule> rules;
  float mean_bits = 4.25f;  ///< vbit target (clamped 3..8 by the encoder)
  /// Whether the base choice or a rule stores tensors as vbit (vbit_ro), the only dtype mean_bits
  /// steers.
  bool uses_vbit() const noexcept;
  /// `--mean-bits v`: throws Error(InvalidArgument) unless 3 ≤ v ≤ 8 and the plan uses vbit (the
  /// flag would otherwise be silently ignored).
  void set_mean_bits(double v);
  /// The plan as recorded in `provenance.plan`: {"quant", "rules", "mean_bits"?}.
  nlohmann::json to_json() const;
};

/// The dtype and encoder options chosen for one tensor.
struct TensorDecision {
  quant::DType dtype = quant::DType::F16;
  quant::EncodeOptions opt;
  std::string reason;  ///< "rule '<glob>'", "policy: norm → f16", "fallback: in % 32 != 0 → q8_2f", ...
};

/// Decides one tensor (see the file comment). `model_is_moe` selects the q2tp profile's target.
TensorDecision decide(const QuantPlan& plan, const std::string& name, std::span<const uint64_t> shape,
                      bool model_is_moe);

/// The informational header quant_type for a base choice (FORMAT-NOTES §1.5: q4t/q4tp/q2tp →
/// Q4_BLOCK, the q1 family and vbit → VBIT).
cmf::QuantType header_quant_type(const QuantChoice& c) noexcept;

}  // namespace cortiq::convert
