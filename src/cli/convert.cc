// `cortiq convert --model DIR --quant Q --output OUT` — Hugging Face checkpoint → CMF (issue 4,
// CLI-NOTES §2.1). Prints `✓ wrote <output>` (one line per shard file) on success.
#include "convert/convert.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "cli/command.h"
#include "convert/gguf_model.h"
#include "util/error.h"

namespace cortiq::cli {
namespace {

struct ConvertArgs {
  std::string model, model_pos, output, quant;
  std::vector<std::string> rules;
  double mean_bits = 4.25, shard_max_gb = 0;
  unsigned threads = 0;
  bool allow_nonfinite = false;
  bool no_chat_template = false;
  bool mean_bits_given = false;
};

void convert_cmd(const ConvertArgs& a) {
  convert::ConvertOptions o;
  if (!a.model.empty() && !a.model_pos.empty() && a.model != a.model_pos)
    fail(ErrorKind::InvalidArgument, "two model directories given ('{}' and '{}')", a.model, a.model_pos);
  o.model_dir = a.model.empty() ? a.model_pos : a.model;
  if (o.model_dir.empty()) fail(ErrorKind::InvalidArgument, "--model DIR is required");
  if (a.output.empty()) fail(ErrorKind::InvalidArgument, "--output FILE is required");
  o.output = a.output;
  refuse_overwriting_input(o.model_dir, o.output, "convert");
  // a GGUF keeps each tensor's own precision unless --quant says otherwise
  char magic[4] = {};
  if (std::filesystem::is_regular_file(o.model_dir))
    std::ifstream(o.model_dir, std::ios::binary).read(magic, 4);
  o.keep_source_precision = a.quant.empty() && std::string_view(magic, 4) == "GGUF";
  o.plan.base = convert::parse_quant(a.quant.empty() ? "q8" : a.quant);
  for (const auto& r : a.rules) o.plan.rules.push_back(convert::parse_quant_rule(r));
  if (a.mean_bits_given) o.plan.set_mean_bits(a.mean_bits);
  if (!std::isfinite(a.shard_max_gb) || a.shard_max_gb < 0)
    fail(ErrorKind::InvalidArgument, "--shard-max-gb {} must be >= 0", a.shard_max_gb);
  o.shard_max_bytes = static_cast<uint64_t>(std::llround(a.shard_max_gb * 1e9));
  if (a.shard_max_gb > 0 && o.shard_max_bytes == 0) o.shard_max_bytes = 1;
  o.threads = a.threads;
  o.allow_nonfinite = a.allow_nonfinite;
  o.no_chat_template = a.no_chat_template;
  auto r = convert::convert_checkpoint(o);
  for (const auto& w : r.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  for (const auto& p : r.outputs) std::printf("✓ wrote %s\n", p.c_str());
}

void setup(CLI::App& root) {
  auto a = std::make_shared<ConvertArgs>();
  auto* c =
      root.add_subcommand("convert", "Convert a Hugging Face checkpoint (safetensors) or a GGUF file to CMF");
  add_examples(c, {"cortiq convert models/stories260K --quant f32 -o build/stories260K.cmf",
                   "cortiq convert model.gguf --quant q4tp -o model.cmf"});
  c->add_option("model_dir", a->model_pos, "HF model directory or .gguf file (same as --model)");
  c->add_option("--model", a->model,
                "HF model directory holding config.json and *.safetensors, or a llama.cpp .gguf file (" +
                    convert::gguf_architectures() + ")");
  c->add_option("-o,--output", a->output, "output .cmf path");
  c->add_option(
      "--quant", a->quant,
      "f32|f16|bf16|q8|q8_2f|q4|q4t|q4tp|q2tp|vbit|q1|q1p|q1s|q1t (default q8; a .gguf keeps each tensor's "
      "precision: Q8_0 → q8, Q4_0 → q4 exactly, F16 → f16; aliases such as q8_row, "
      "q4_tiled, fp16 are listed in the README)");
  c->add_option("--quant-rule", a->rules,
                "GLOB=DTYPE, repeatable, first match wins (e.g. '*.self_attn.*=q8')")
      ->allow_extra_args(false);  // one rule per flag: a path after it stays a positional
  c->add_option("--mean-bits", a->mean_bits, "vbit target mean bits per weight (4.25; 3..8, vbit only)")
      ->each([a](const std::string&) { a->mean_bits_given = true; });
  c->add_option("--shard-max-gb", a->shard_max_gb,
                "split the output into files of at most N GB (10^9 bytes) each, the 1 MiB header gap "
                "included; a tensor larger than that gets a file of its own (0, the default: one file)");
  c->add_option("-t,--threads", a->threads, "encoder threads (0 = all cores)");
  c->add_flag("--allow-nonfinite", a->allow_nonfinite,
              "keep NaN/Inf weights in tensors stored as f32/f16/bf16");
  c->add_flag("--no-chat-template", a->no_chat_template,
              "store no chat template (convert refuses one that does not parse)");
  c->callback([a] { convert_cmd(*a); });
}

}  // namespace

CORTIQ_COMMAND(10, setup);

}  // namespace cortiq::cli
