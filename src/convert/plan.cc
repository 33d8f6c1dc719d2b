#include "convert/plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

#include "cmf/tensor_names.h"
#include "util/error.h"

namespace cortiq::convert {

using cmf::TensorRole;
using quant::DType;

namespace {

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

bool contains(std::string_view s, std::string_view p) {
  return s.find(p) != std::string_view::npos;
}
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

bool needs_in32(DType t) {
  switch (t) {
    case DType::Q4Tiled:
    case DType::Q4TP:
    case DType::Q2TP:
    case DType::VBit:
    case DType::VBitRo:
    case DType::Q1:
    case DType::Q1S:
    case DType::Q1T:
      return true;
    default:
      return false;
  }
}

/// What `n` is under: the role whose module holds it and what follows that module's '.'; for a
/// skill overlay (FORMAT-NOTES §1.14), those of the backbone tensor it overlays.
struct Under {
  std::optional<TensorRole> module;
  std::string tail;
};
Under under(std::string_view n) {
  const auto skill = cmf::parse_skill_name(n);
  const cmf::TensorPlace p = cmf::tensor_place(skill ? std::string_view(skill->second) : n);
  return {p.module, std::string(p.tail)};
}

bool any_of_roles(const std::optional<TensorRole>& r, std::initializer_list<TensorRole> roles) {
  return r && std::find(roles.begin(), roles.end(), *r) != roles.end();
}

/// The force-f16 list (FORMAT-NOTES §1.9): the router, the shared-expert gate and the attention
/// output gate (their weights), the GatedDeltaNet a/b projections, and two patterns — any conv1d
/// weight and any name holding "norm".
bool force_f16_name(std::string_view n) {
  const Under u = under(n);
  if (u.tail == "weight" &&
      any_of_roles(u.module, {TensorRole::Router, TensorRole::SharedExpertGate, TensorRole::AttnGate}))
    return true;
  return any_of_roles(u.module, {TensorRole::GdnInProjA, TensorRole::GdnInProjB, TensorRole::GdnInProjBa}) ||
         ends_with(n, "conv1d.weight") || contains(n, "norm");
}

/// The q2tp profile's targets: the gate and up projections of the experts and the shared expert
/// (MoE) or of the dense FFN, outside the MTP block.
bool is_q2tp_target(std::string_view n, bool moe) {
  if (n.starts_with(cmf::kMtpPrefix)) return false;
  const Under u = under(n);
  if (moe)
    return any_of_roles(u.module, {TensorRole::ExpertGate, TensorRole::ExpertUp, TensorRole::SharedGate,
                                   TensorRole::SharedUp});
  return any_of_roles(u.module, {TensorRole::FfnGate, TensorRole::FfnUp});
}

}  // namespace

QuantChoice parse_quant(std::string_view spelling) {
  // name, dtype, the other spellings accepted (any case)
  struct Row {
    const char* name;
    DType dtype;
    std::initializer_list<const char*> aliases;
  };
  static const Row kRows[] = {
      {"f32", DType::F32, {"fp32"}},
      {"f16", DType::F16, {"fp16"}},
      {"bf16", DType::BF16, {}},
      {"q8", DType::Q8Row, {"q8_row", "q8row"}},
      {"q8_2f", DType::Q8_2F, {"q82f", "q8f"}},
      {"q4", DType::Q4Block, {"q4_block", "q4block"}},
      {"q4t", DType::Q4Tiled, {"q4_tiled"}},
      {"q4tp", DType::Q4TP, {"q4t_pred"}},
      {"q2tp", DType::Q2TP, {"q2t_pred"}},
      {"vbit", DType::VBitRo, {"v_bit", "vbit_ro"}},
      {"q1", DType::Q1, {}},
      {"q1p", DType::Q1, {"q1_ptq"}},
      {"q1s", DType::Q1S, {"q1_mask"}},
      {"q1t", DType::Q1T, {"q1_ternary"}},
  };
  const std::string s = lower(spelling);
  for (const Row& r : kRows) {
    const bool hit =
        s == r.name || std::any_of(r.aliases.begin(), r.aliases.end(), [&](const char* a) { return s == a; });
    if (!hit) continue;
    QuantChoice c;
    c.dtype = r.dtype;
    c.name = r.name;
    c.q2tp_profile = r.dtype == DType::Q2TP;
    c.q1p = c.name == "q1p";
    return c;
  }
  std::string accepted;
  for (const Row& r : kRows) {
    if (!accepted.empty()) accepted += ", ";
    accepted += r.name;
    if (r.aliases.size() == 0) continue;
    accepted += " (";
    for (const char* a : r.aliases) accepted += (accepted.back() == '(' ? "" : "/") + std::string(a);
    accepted += ")";
  }
  // llama.cpp's names (q8_0, Q4_K_M…) are other formats; say which of ours is nearest
  const bool gguf = s.size() > 2 && (s[0] == 'q' || s[0] == 'i') &&
                    (s.find("_k") != std::string::npos || s.find("_0") != std::string::npos ||
                     s.find("_1") != std::string::npos);
  fail(ErrorKind::InvalidArgument, "unknown quantization '{}' (accepted: {}){}", spelling, accepted,
       gguf ? "; llama.cpp's GGUF types are not CMF codecs: q8 is the 8-bit one, q4tp or q4 the 4-bit ones"
            : "");
}

QuantRule parse_quant_rule(std::string_view text) {
  const size_t eq = text.rfind('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size())
    fail(ErrorKind::InvalidArgument,
         "--quant-rule '{}' must look like 'GLOB=DTYPE' (e.g. '*.self_attn.*=q8')", text);
  QuantRule r;
  r.glob = std::string(text.substr(0, eq));
  r.choice = parse_quant(text.substr(eq + 1));
  if (r.choice.q2tp_profile) r.choice.q2tp_profile = false;  // a rule names the dtype itself
  r.text = std::string(text);
  return r;
}

bool glob_match(std::string_view p, std::string_view n) noexcept {
  size_t pi = 0, ni = 0, star = std::string_view::npos, mark = 0;
  while (ni < n.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == n[ni])) {
      ++pi, ++ni;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = ni;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      ni = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

bool QuantPlan::uses_vbit() const noexcept {
  auto vbit = [](const QuantChoice& c) {
    return c.dtype == quant::DType::VBit || c.dtype == quant::DType::VBitRo;
  };
  if (vbit(base)) return true;
  for (const auto& r : rules)
    if (vbit(r.choice)) return true;
  return false;
}

void QuantPlan::set_mean_bits(double v) {
  if (!std::isfinite(v) || v < 3 || v > 8)
    fail(ErrorKind::InvalidArgument, "--mean-bits {} must be in 3..8", v);
  if (!uses_vbit())
    fail(ErrorKind::InvalidArgument,
         "--mean-bits applies to vbit: give --quant vbit or a --quant-rule to vbit (the plan is {})",
         base.name);
  mean_bits = static_cast<float>(v);
}

nlohmann::json QuantPlan::to_json() const {
  nlohmann::json j;
  j["quant"] = base.name;
  j["rules"] = nlohmann::json::array();
  for (const auto& r : rules) j["rules"].push_back(r.text);
  bool vbit = base.dtype == DType::VBitRo || std::any_of(rules.begin(), rules.end(), [](const QuantRule& r) {
                return r.choice.dtype == DType::VBitRo;
              });
  if (vbit) j["mean_bits"] = mean_bits;
  return j;
}

TensorDecision decide(const QuantPlan& plan, const std::string& name, std::span<const uint64_t> shape,
                      bool model_is_moe) {
  TensorDecision d;
  d.opt.mean_bits = plan.mean_bits;
  if (ends_with(name, ".tid2eid")) {
    d.dtype = DType::F32;
    d.reason = "policy: lookup table → f32";
    return d;
  }
  const QuantChoice* choice = &plan.base;
  bool by_rule = false;
  for (const auto& r : plan.rules) {
    if (glob_match(r.glob, name)) {
      choice = &r.choice;
      by_rule = true;
      d.reason = "rule '" + r.text + "'";
      break;
    }
  }
  DType t = choice->dtype;
  d.opt.q1_error_diffusion = choice->q1p;
  if (!by_rule) d.reason = "--quant " + plan.base.name;
  if (!by_rule && choice->q2tp_profile) {
    t = is_q2tp_target(name, model_is_moe) ? DType::Q2TP : DType::Q4TP;
    d.reason += t == DType::Q2TP ? " (profile: FFN gate/up)" : " (profile: rest → q4tp)";
  }
  if (quant::is_float_dtype(t)) {
    d.dtype = t;
    return d;
  }
  const DType small = plan.base.dtype == DType::F32 ? DType::F32 : DType::F16;
  if (!by_rule && force_f16_name(name)) {
    d.dtype = small;
    d.reason = "policy: norm/router/gate → f16";
    return d;
  }
  uint64_t numel = 1;
  for (uint64_t x : shape) numel *= x;
  if (shape.size() != 2 || numel < 32) {
    d.dtype = small;
    d.reason = shape.size() != 2 ? "policy: not 2-D → f16" : "policy: < 32 elements → f16";
    return d;
  }
  const uint64_t in = shape[1];
  if (needs_in32(t) && (in % 32 != 0 || (t == DType::Q1T && in > 65536))) {
    d.dtype = DType::Q8_2F;
    d.reason = fmt::format("fallback: {} needs in % 32 == 0 (in = {}) → q8_2f", quant::dtype_name(t), in);
    return d;
  }
  d.dtype = t;
  return d;
}

cmf::QuantType header_quant_type(const QuantChoice& c) noexcept {
  switch (c.dtype) {
    case DType::F32:
      return cmf::QuantType::F32;
    case DType::F16:
      return cmf::QuantType::F16;
    case DType::BF16:
      return cmf::QuantType::BF16;
    case DType::Q8Row:
      return cmf::QuantType::Q8Row;
    case DType::Q8_2F:
      return cmf::QuantType::Q8_2F;
    case DType::Q4Block:
    case DType::Q4Tiled:
    case DType::Q4TP:
    case DType::Q2TP:
      return cmf::QuantType::Q4Block;
    default:
      return cmf::QuantType::VBit;
  }
}

}  // namespace cortiq::convert
