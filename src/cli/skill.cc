// `cortiq skill add | list | rm | export | apply` — skills on one backbone (FORMAT-NOTES §1.14;
// specialize/skills.h), and the hidden `skill eval-routing` (routing accuracy on held-out text).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "specialize/routing_eval.h"
#include "specialize/skills.h"
#include "util/error.h"

namespace cortiq::cli {
namespace {

struct AddArgs {
  specialize::SkillAddOptions o;
  std::string tensors = "all", layers, output;
  uint32_t phi_layer = 0;
  bool phi_layer_given = false;
};

void add_cmd(AddArgs& a) {
  a.o.tensors = specialize::parse_tensor_set(a.tensors);
  if (!a.layers.empty()) a.o.layers = specialize::parse_layer_list(a.layers);
  if (a.phi_layer_given) a.o.phi_layer = a.phi_layer;
  a.o.output = a.output;
  if (!a.output.empty()) refuse_overwriting_input(a.o.base, a.output, "skill add");
  auto r = specialize::skill_add(a.o);
  for (const auto& w : r.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  std::string layers;
  for (uint32_t l : r.layers) layers += (layers.empty() ? "" : ",") + std::to_string(l);
  std::printf("skill '%s': %zu overlay tensors, %.3f MB, layers [%s]\n", a.o.id.c_str(), r.overlays.size(),
              double(r.overlay_bytes) / 1e6, layers.c_str());
  if (r.selection)
    std::printf("descriptor: %zu prompts, metric %s, phi_layer %u, rank %u, err_mean %.4g, err_std %.4g\n",
                r.prompts, r.selection->metric.c_str(), r.selection->phi_layer, r.selection->rank.value_or(0),
                r.selection->err_mean.value_or(0), r.selection->err_std.value_or(0));
  std::printf("✓ %s %s\n", r.appended ? "appended to" : "wrote", r.output.c_str());
}

void list_cmd(const std::string& path, bool json) {
  auto skills = specialize::skill_list(path);
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& s : skills) {
      nlohmann::json j = cmf::header_to_json([&] {
        cmf::Header h;
        h.skills = {s.record};
        return h;
      }())["skills"][0];
      if (j.contains("selection")) {  // the arrays are long: keep their sizes only
        for (const char* k : {"mean", "basis", "holdout"})
          if (j["selection"].contains(k))
            j["selection"][k] = std::to_string(j["selection"][k].get<std::string>().size()) + " base64 chars";
      }
      j["overlay_tensors"] = s.tensors;
      j["overlay_bytes"] = s.bytes;
      out.push_back(j);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  if (skills.empty()) {
    std::printf("%s: no skills\n", path.c_str());
    return;
  }
  std::printf("%-16s %-16s %8s %12s  %-12s %s\n", "id", "name", "tensors", "bytes", "layers", "router");
  for (const auto& s : skills) {
    std::string layers;
    for (uint32_t l : s.record.layers) layers += (layers.empty() ? "" : ",") + std::to_string(l);
    std::string router = "-";
    if (s.record.selection)
      router = fmt::format("{} L{} rank {}", s.record.selection->metric, s.record.selection->phi_layer,
                           s.record.selection->rank.value_or(0));
    std::printf("%-16s %-16s %8zu %12llu  %-12s %s\n", s.record.id.c_str(),
                s.record.name.value_or("").c_str(), s.tensors, static_cast<unsigned long long>(s.bytes),
                layers.empty() ? "-" : layers.c_str(), router.c_str());
  }
}

struct EvalArgs {
  std::string model;
  std::vector<std::string> domains;
  std::string lengths = "16,32,64";
  specialize::EvalOptions o;
};

/// `--domain ID=FILE` list → domains; Error(InvalidArgument) naming the entry without ID=FILE.
std::vector<specialize::EvalDomain> parse_domains(const std::vector<std::string>& domains) {
  std::vector<specialize::EvalDomain> ds;
  for (const auto& d : domains) {
    size_t eq = d.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == d.size())
      fail(ErrorKind::InvalidArgument, "--domain '{}': expected ID=FILE", d);
    ds.push_back({d.substr(0, eq), d.substr(eq + 1)});
  }
  return ds;
}

struct CalibrateArgs {
  std::string model, output;
  std::vector<std::string> domains;
  specialize::CalibrateOptions o;
};

void calibrate_cmd(const CalibrateArgs& a) {
  const specialize::Calibration c = specialize::calibrate_routing(a.model, parse_domains(a.domains), a.o);
  specialize::write_routing(a.model, c.routing(), a.output);
  std::printf(
      "header.routing: temperature %.6g, novelty_theta %.4f (%u windows of %u tokens, target fpr %.2f; "
      "mean NLL %.4f)\n",
      c.temperature, c.novelty_theta, c.samples, a.o.length, c.target_fpr, c.nll);
  std::printf("on these windows: argmin %.1f%%, chosen (after novelty) %.1f%%\n",
              100.0 * c.argmin_right / c.samples, 100.0 * c.chosen_right / c.samples);
  std::printf("✓ wrote %s\n", a.output.empty() ? a.model.c_str() : a.output.c_str());
}

void eval_cmd(EvalArgs& a) {
  const std::vector<specialize::EvalDomain> ds = parse_domains(a.domains);
  a.o.lengths = specialize::parse_layer_list(a.lengths);  // same syntax: a list of numbers
  auto cells = specialize::eval_routing(a.model, ds, a.o);
  std::printf("%-12s %6s %8s %8s %8s %8s\n", "skill", "tokens", "samples", "argmin", "chosen", "fallback");
  for (const auto& c : cells)
    std::printf("%-12s %6u %8u %7.1f%% %7.1f%% %8u\n", c.id.c_str(), c.length, c.samples,
                100.0 * c.argmin_right / c.samples, 100.0 * c.chosen_right / c.samples, c.fallback);
}

void setup(CLI::App& root) {
  auto* s = root.add_subcommand("skill", "Skills on one backbone: add, list, rm, materialize, export, apply");
  add_examples(s, {"cortiq skill list models/testbed/testbed-skills.cmf",
                   "cortiq skill materialize models/testbed/testbed-skills.cmf code -o /tmp/tb-code.cmf"});
  s->require_subcommand(1);

  auto a = std::make_shared<AddArgs>();
  auto* add =
      s->add_subcommand("add", "Add a donor's changed tensors as skill overlays, with a routing descriptor");
  add_examples(
      add,
      {"cortiq skill add base.cmf --from code-finetune.cmf --id code --prompts code.txt -o base+code.cmf"});
  add->add_option("base", a->o.base, "base .cmf")->required();
  add->add_option("--from", a->o.from, "donor: HF folder or .cmf of the same model")->required();
  add->add_option("--id", a->o.id, "skill id ([A-Za-z0-9_-])")->required();
  add->add_option("--name", a->o.name, "display name");
  add->add_option("--tensors", a->tensors, "ffn|attn|all (default all)");
  add->add_option("--layers", a->layers, "only these layers: 4,5 or 4-5");
  add->add_option("--min-delta", a->o.min_delta, "overlay iff max |donor − base| > X (default 0)")
      ->check(non_negative());
  add->add_option("--prompts", a->o.prompts,
                  "router prompts: documents between <|endoftext|> lines, else blank-line separated blocks, "
                  "else one per line");
  add->add_option("--rank", a->o.fit.rank, "descriptor rank (default 2; used min(R, N−1, 8))")
      ->check(positive());
  add->add_option("--metric", a->o.fit.metric, "mse|mse_unit (default mse)");
  add->add_option("--phi-layer", a->phi_layer, "router layer (default ⌊2·layers/3⌋)")
      ->each([a](const std::string&) { a->phi_layer_given = true; });
  add->add_flag("--phi-from-donor", a->o.phi_from_donor,
                "fit φ through the donor-applied model (default: the backbone)");
  add->add_flag("--holdout", a->o.fit.holdout,
                "keep the last fifth of the prompts as the descriptor's holdout");
  add->add_option("--max-prompt-tokens", a->o.max_prompt_tokens, "cut prompts to N tokens (0 = the context)");
  add->add_option("--skill-quant", a->o.skill_quant,
                  "store overlays at this codec (default: each base tensor's)");
  add->add_flag("--replace", a->o.replace, "replace an existing skill of the same id");
  add->add_option("-t,--threads", a->o.threads, "kernel threads for φ (0 = all cores)");
  add->add_option("-o,--output", a->output, "output .cmf (default: append to the base in place)");
  add->callback([a] { add_cmd(*a); });

  auto lp = std::make_shared<std::string>();
  auto lj = std::make_shared<bool>(false);
  auto* list = s->add_subcommand("list", "List a file's skills");
  add_examples(list, {"cortiq skill list models/testbed/testbed-skills.cmf --json"});
  list->add_option("file", *lp, ".cmf")->required();
  list->add_flag("--json", *lj, "JSON records");
  list->callback([lp, lj] { list_cmd(*lp, *lj); });

  struct Rm {
    std::string file, id, output;
  };
  auto rm = std::make_shared<Rm>();
  auto* rmc = s->add_subcommand("rm", "Remove a skill (record and overlays)");
  add_examples(rmc, {"cortiq skill rm base+code.cmf code"});
  rmc->add_option("file", rm->file, ".cmf")->required();
  rmc->add_option("id", rm->id, "skill id")->required();
  rmc->add_option("-o,--output", rm->output, "output .cmf (default: in place, by append)");
  rmc->callback([rm] {
    if (!rm->output.empty()) refuse_overwriting_input(rm->file, rm->output, "skill rm");
    specialize::skill_rm(rm->file, rm->id, rm->output);
    std::printf("✓ removed skill '%s' → %s\n", rm->id.c_str(),
                (rm->output.empty() ? rm->file : rm->output).c_str());
  });

  struct Mat {
    std::string file, id, output;
  };
  auto mat = std::make_shared<Mat>();
  auto* matc = s->add_subcommand("materialize", "Write the specialist one skill of a file stands for");
  add_examples(
      matc,
      {"cortiq skill materialize models/testbed/testbed-skills.cmf scripture -o /tmp/tb-scripture.cmf"});
  matc->add_option("file", mat->file, ".cmf with skills")->required();
  matc->add_option("id", mat->id, "skill id")->required();
  matc->add_option("-o,--output", mat->output, "output .cmf")->required();
  matc->callback([mat] {
    refuse_overwriting_input(mat->file, mat->output, "skill materialize");
    specialize::skill_materialize(mat->file, mat->id, mat->output);
    std::printf("✓ wrote %s\n", mat->output.c_str());
  });

  struct Export {
    std::string specialist, base, id, output;
  };
  auto ex = std::make_shared<Export>();
  auto* exc = s->add_subcommand("export", "Cut a specialist into a SKILL_FILE against its base");
  add_examples(exc, {"cortiq skill export /tmp/tb-scripture.cmf --base base.cmf -o scripture.skill.cmf"});
  exc->add_option("specialist", ex->specialist, "specialist .cmf")->required();
  exc->add_option("--base", ex->base, "base .cmf")->required();
  exc->add_option("--id", ex->id, "skill id (default: the specialist's file stem)");
  exc->add_option("-o,--output", ex->output, "skill .cmf")->required();
  exc->callback([ex] {
    refuse_overwriting_input(ex->specialist, ex->output, "skill export");
    refuse_overwriting_input(ex->base, ex->output, "skill export");
    std::string id = ex->id.empty() ? std::filesystem::path(ex->specialist).stem().string() : ex->id;
    auto names = specialize::skill_export(ex->specialist, ex->base, id, ex->output);
    std::printf("skill '%s': %zu tensors\n✓ wrote %s\n", id.c_str(), names.size(), ex->output.c_str());
  });

  struct Apply {
    std::string base, skill, output;
    bool force = false;
  };
  auto ap = std::make_shared<Apply>();
  auto* apc = s->add_subcommand("apply", "Apply a SKILL_FILE to its base: a runnable specialist");
  add_examples(apc, {"cortiq skill apply base.cmf scripture.skill.cmf -o scripture.cmf"});
  apc->add_option("base", ap->base, "base .cmf")->required();
  apc->add_option("skill", ap->skill, "skill .cmf (SKILL_FILE)")->required();
  apc->add_option("-o,--output", ap->output, "output .cmf")->required();
  apc->add_flag("--force", ap->force, "apply even when the skill was cut from another base (warns)");
  apc->callback([ap] {
    refuse_overwriting_input(ap->base, ap->output, "skill apply");
    refuse_overwriting_input(ap->skill, ap->output, "skill apply");
    for (const auto& w : specialize::skill_apply(ap->base, ap->skill, ap->output, ap->force))
      std::fprintf(stderr, "warning: %s\n", w.c_str());
    std::printf("✓ wrote %s\n", ap->output.c_str());
  });

  auto ev = std::make_shared<EvalArgs>();
  auto* evc = s->add_subcommand("eval-routing", "Routing accuracy on held-out text (measurement tool)");
  evc->group("");  // hidden
  evc->add_option("model", ev->model, ".cmf with skills")->required();
  evc->add_option("--domain", ev->domains, "ID=FILE (repeat)")->required()->allow_extra_args(false);
  evc->add_option("--tokens", ev->lengths, "prompt lengths (default 16,32,64)");
  evc->add_option("--samples", ev->o.samples, "prompts per domain and length (default 32)")
      ->check(positive());
  evc->add_option("--seed", ev->o.seed, "window sampler seed");
  evc->add_option("--tau", ev->o.route.tau, "uncalibrated novelty threshold on E (default 0.30)");
  evc->add_option("-t,--threads", ev->o.threads, "kernel threads (0 = all cores)");
  evc->callback([ev] { eval_cmd(*ev); });

  auto ca = std::make_shared<CalibrateArgs>();
  auto* cal = s->add_subcommand(
      "calibrate",
      "Calibrate the router from held-out text: write header.routing {temperature, novelty_theta}");
  cal->add_option("model", ca->model, ".cmf with routable skills (grown in place by true append unless -o)")
      ->required();
  cal->add_option("--domain", ca->domains,
                  "ID=FILE: held-out text of skill ID's domain (repeat; not its fit prompts)")
      ->required()
      ->allow_extra_args(false);
  cal->add_option("--tokens", ca->o.length, "window length in tokens (default 32)")->check(positive());
  cal->add_option("--samples", ca->o.samples, "windows per domain (default 48)")->check(positive());
  cal->add_option("--seed", ca->o.seed, "window sampler seed (default 5)");
  cal->add_option("--fpr", ca->o.fpr, "share of in-domain windows allowed to fall back (default 0.05)");
  cal->add_option("--threads", ca->o.threads, "kernel threads (0 = all cores)");
  cal->add_option("-o,--output", ca->output, "write a new file instead of appending in place");
  cal->callback([ca] { calibrate_cmd(*ca); });
}

}  // namespace

CORTIQ_COMMAND(30, setup);

}  // namespace cortiq::cli
