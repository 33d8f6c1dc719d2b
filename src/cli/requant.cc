// `cortiq requant <in.cmf> --quant DTYPE [--quant-rule GLOB=DTYPE]... -o out.cmf` — re-encode a
// CMF file under another quantization plan, through dequantization (issue 4).
#include <cmath>
#include <cstdio>
#include <memory>

#include "cli/command.h"
#include "convert/convert.h"
#include "util/error.h"

namespace cortiq::cli {
namespace {

struct RequantArgs {
  std::string input, output, quant;
  std::vector<std::string> rules;
  double mean_bits = 4.25;
  unsigned threads = 0;
  bool allow_nonfinite = false;
  bool mean_bits_given = false;
};

void requant_cmd(const RequantArgs& a) {
  refuse_overwriting_input(a.input, a.output, "requant");
  convert::RequantOptions o;
  o.input = a.input;
  o.output = a.output;
  o.plan.base = convert::parse_quant(a.quant);
  for (const auto& r : a.rules) o.plan.rules.push_back(convert::parse_quant_rule(r));
  if (a.mean_bits_given) o.plan.set_mean_bits(a.mean_bits);
  o.threads = a.threads;
  o.allow_nonfinite = a.allow_nonfinite;
  auto r = convert::requant_file(o);
  for (const auto& w : r.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  for (const auto& p : r.outputs) std::printf("✓ wrote %s\n", p.c_str());
}

void setup(CLI::App& root) {
  auto a = std::make_shared<RequantArgs>();
  auto* c = root.add_subcommand("requant", "Re-quantize a CMF file (any dtype → another, through f32)");
  add_examples(c, {"cortiq requant build/stories260K.cmf --quant q4tp -o /tmp/s_q4tp.cmf"});
  c->add_option("input", a->input, "input .cmf (any shard of a set)")->required();
  c->add_option("-o,--output", a->output, "output .cmf path")->required();
  c->add_option("--quant", a->quant, "target: f32|f16|bf16|q8|q8_2f|q4|q4t|q4tp|q2tp|vbit|q1|q1p|q1s|q1t")
      ->required();
  c->add_option("--quant-rule", a->rules, "GLOB=DTYPE, repeatable, first match wins")
      ->allow_extra_args(false);  // one rule per flag: a path after it stays a positional
  c->add_option("--mean-bits", a->mean_bits, "vbit target mean bits per weight (4.25; 3..8, vbit only)")
      ->each([a](const std::string&) { a->mean_bits_given = true; });
  c->add_option("-t,--threads", a->threads, "encoder threads (0 = all cores)");
  c->add_flag("--allow-nonfinite", a->allow_nonfinite, "keep NaN/Inf in tensors stored as f32/f16/bf16");
  c->callback([a] { requant_cmd(*a); });
}

}  // namespace

CORTIQ_COMMAND(12, setup);

}  // namespace cortiq::cli
