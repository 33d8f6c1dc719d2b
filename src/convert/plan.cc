#include "convert/plan.h"

#include <algorithm>
#include <cctype>

#include "util/error.h"

namespace cortiq::convert {

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

bool force_f16_name(std::string_view n) {
  return ends_with(n, ".mlp.gate.weight") || ends_with(n, "shared_expert_gate.weight") ||
         ends_with(n, "self_attn.g_proj.weight") || ends_with(n, "conv1d.weight") ||
         contains(n, "linear_attn.in_proj_a") || contains(n, "linear_attn.in_proj_b") || contains(n, "norm");
}

bool is_q2tp_target(std::string_view n, bool moe) {
  if (n.rfind("model.mtp.", 0) == 0) return false;
  const bool gate_up = contains(n, "gate_proj.") || contains(n, "up_proj.");
  if (!gate_up) return false;
  if (moe) return contains(n, ".mlp.experts.") || contains(n, ".mlp.shared_expert.");
  return contains(n, ".mlp.gate_proj.") || contains(n, ".mlp.up_proj.");
}

}  // namespace

QuantChoice parse_quant(std::string_view spelling) {
  const std::string s = lower(spelling);
  QuantChoice c;
  auto is = [&](std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(), [&](const char* n) { return s == n; });
  };
  if (is({"q8", "q8_row", "q8row"})) {
    c.dtype = DType::Q8Row, c.name = "q8";
  } else if (is({"q8_2f", "q82f", "q8f"})) {
    c.dtype = DType::Q8_2F, c.name = "q8_2f";
  } else if (is({"q4", "q4_block", "q4block"})) {
    c.dtype = DType::Q4Block, c.name = "q4";
  } else if (is({"q4t", "q4_tiled"})) {
    c.dtype = DType::Q4Tiled, c.name = "q4t";
  } else if (is({"q4tp", "q4t_pred"})) {
    c.dtype = DType::Q4TP, c.name = "q4tp";
  } else if (is({"q2tp", "q2t_pred"})) {
    c.dtype = DType::Q2TP, c.name = "q2tp", c.q2tp_profile = true;
  } else if (is({"f16", "fp16"})) {
    c.dtype = DType::F16, c.name = "f16";
  } else if (is({"f32", "fp32"})) {
    c.dtype = DType::F32, c.name = "f32";
  } else if (is({"bf16"})) {
    c.dtype = DType::BF16, c.name = "bf16";
  } else if (is({"vbit", "v_bit", "vbit_ro"})) {
    c.dtype = DType::VBitRo, c.name = "vbit";
  } else if (is({"q1"})) {
    c.dtype = DType::Q1, c.name = "q1";
  } else if (is({"q1p", "q1_ptq"})) {
    c.dtype = DType::Q1, c.name = "q1p", c.q1p = true;
  } else if (is({"q1s", "q1_mask"})) {
    c.dtype = DType::Q1S, c.name = "q1s";
  } else if (is({"q1t", "q1_ternary"})) {
    c.dtype = DType::Q1T, c.name = "q1t";
  } else {
    fail(ErrorKind::InvalidArgument,
         "unknown quantization '{}' (accepted: f32, f16, bf16, q8, q8_2f, q4, q4t, q4tp, q2tp, vbit, q1, "
         "q1p, q1s, q1t "
         "and their aliases)",
         spelling);
  }
  return c;
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
