// compile_task (compile.h).
#include "specialize/compile.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>

#include "cmf/reader.h"
#include "convert/convert.h"
#include "model/cmf_source.h"
#include "runtime/session.h"
#include "specialize/defrag.h"
#include "specialize/score.h"
#include "specialize/skills.h"
#include "train/backward.h"
#include "train/params.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/progress.h"

namespace cortiq::specialize {

namespace {

constexpr const char* kEngine = "cortiq 0.1.0";

std::unique_ptr<model::Model> bind_exact(const cmf::ModelArch& a, const model::TensorSource& s,
                                         size_t threads) {
  model::ModelOptions mo;
  mo.threads = threads;
  mo.kernels = kernels::KernelConfig{kernels::MatmulMode::Exact, kernels::simd_tier()};
  return model::Model::bind(a, s, mo);
}

/// Progress over `total` units with a note, or nothing.
struct Bar {
  std::optional<Progress> p;
  Bar(bool on, const char* label, uint64_t total, const char* unit) {
    if (on) p.emplace(label, total, unit);
  }
  void tick(const std::string& note, size_t n) {
    if (!p) return;
    p->set_note(note);
    p->advance(n);
  }
  void done() {
    if (p) p->finish();
  }
};

uint64_t tensor_bytes(const cmf::Reader& r) {
  uint64_t n = 0;
  for (const auto& t : r.tensors()) n += t.nbytes;
  return n;
}

double r4(double x) {
  return std::round(x * 1e4) / 1e4;
}

/// The skill of compile --as skill: writes phase B's trained tail into a same-shape donor beside
/// `stage` (defrag_file keeping every neuron), a prompts file of decoded train chunks, and appends
/// the overlays that differ (tail FFN tensors only) with a fitted descriptor to `stage` in place
/// (skill_add without an output: cmf::append_in_place). Returns the overlaid backbone names.
std::vector<std::string> append_skill(const cmf::Reader& src, const Tokenizer& tok, const TaskCorpus& corpus,
                                      const KeepSets& keep, const FcdResult& fb, const CompileOptions& opt,
                                      const std::string& stage) {
  const cmf::ModelArch& arch = src.header().arch;
  AtomicFile donor_guard(opt.output + ".donor");
  DefragPlan all;
  for (size_t l = 0; l < keep.size(); ++l) {
    all.keep.emplace_back(arch.intermediate_size);
    for (uint32_t j = 0; j < arch.intermediate_size; ++j) all.keep.back()[j] = j;
  }
  all.trained = &fb.masters;
  defrag_file(src, donor_guard.temp_path(), all, false);
  AtomicFile prompts_guard(opt.output + ".prompts");
  {
    std::ofstream f(prompts_guard.temp_path(), std::ios::binary | std::ios::trunc);
    const size_t n = std::min(opt.skill_prompts, corpus.train.size());
    for (size_t i = 0; i < n; ++i) {
      // spread over the train split, not its opening
      const Chunk& c = corpus.train[i * corpus.train.size() / n];
      // the separator inside the text (a document boundary the chunk crosses) would split the prompt
      std::string text = tok.decode(c, true);
      for (size_t at; (at = text.find(kPromptSeparator)) != std::string::npos;)
        text.replace(at, kPromptSeparator.size(), " ");
      f << text << "\n" << kPromptSeparator << "\n";
    }
    if (!f) fail(ErrorKind::Io, "compile: cannot write the prompts file {}", prompts_guard.temp_path());
  }
  SkillAddOptions so;
  so.base = stage;
  so.from = donor_guard.temp_path();
  so.id = opt.task;
  so.name = opt.task;
  so.tensors = TensorSet::Ffn;
  const size_t tail = std::min<size_t>(opt.b.layers, arch.num_layers);
  for (size_t l = arch.num_layers - tail; l < arch.num_layers; ++l)
    so.layers.push_back(static_cast<uint32_t>(l));
  so.prompts = prompts_guard.temp_path();
  so.fit.rank = opt.skill_rank;
  so.threads = opt.threads;
  so.progress = opt.progress;
  return skill_add(so).overlays;
}

}  // namespace

void check_compilable(const model::Model& m) {
  const model::Weights& w = *m.weights();
  const auto& a = w.arch;
  if (a.hidden_act != cmf::HiddenAct::Silu)
    fail(ErrorKind::Unsupported,
         "compile: layer 0: the FFN activation is not SiLU (SwiGLU gates are searched)");
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const auto& L = *w.layers[l];
    if (L.is_moe)
      fail(ErrorKind::Unsupported,
           "compile: layer {} is a mixture-of-experts layer; phase A covers dense FFNs (moe-defrag cuts "
           "experts)",
           l);
    if (L.sliding)
      fail(ErrorKind::Unsupported,
           "compile: layer {} uses sliding-window attention, which the backward does not cover", l);
    if (L.ffn.width != a.intermediate_size)
      fail(
          ErrorKind::Unsupported,
          "compile: layer {} has FFN width {} but the arch says {} (an already-defragged model); compile the "
          "uniform-width source",
          l, L.ffn.width, a.intermediate_size);
  }
  train::check_trainable(m);
}

std::string verdict_of(double delta, double se) {
  if (delta + 2.0 * se < 0.0) return "better";
  if (delta - 2.0 * se > 0.0) return "worse";
  return "within noise";
}

CompileResult compile_task(const CompileOptions& opt) {
  namespace fs = std::filesystem;
  const auto t0 = std::chrono::steady_clock::now();
  const auto log = [&](const std::string& s) {
    if (!opt.log) return;
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    opt.log(fmt::format("[{:6.1f}s] {}", sec, s));
  };
  if (opt.task.empty()) fail(ErrorKind::InvalidArgument, "compile: --task NAME is required");
  {
    std::error_code ec;
    if (fs::equivalent(opt.model, opt.output, ec) && !ec)
      fail(ErrorKind::InvalidArgument, "compile: -o {} is the input file; write to another path", opt.output);
  }
  cmf::Reader src = cmf::Reader::open(opt.model);
  src.check_sections();
  const cmf::ModelArch& arch = src.header().arch;
  const bool as_mask = opt.as == CompileAs::Mask, as_skill = opt.as == CompileAs::Skill;
  const bool with_mask = as_mask || as_skill;
  if (with_mask && src.masks() && src.masks()->find(opt.task))
    fail(ErrorKind::InvalidArgument, "compile: '{}' already has a task mask named '{}'", opt.model, opt.task);
  if (as_skill) {
    check_skill_id(opt.task);
    for (const auto& r : src.skills())
      if (r.id == opt.task)
        fail(ErrorKind::InvalidArgument, "compile: '{}' already has a skill '{}'", opt.model, opt.task);
    if (opt.b.steps == 0)
      fail(ErrorKind::InvalidArgument,
           "compile --as skill: the skill is phase B's trained tail; --fcd-steps 0 leaves nothing to store");
  }
  if (arch.num_loops != 1)
    fail(ErrorKind::Unsupported, "compile: looped models (num_loops {}) are not supported", arch.num_loops);

  // 1. corpus
  auto tok = runtime::load_tokenizer(src, opt.model);
  if (!tok)
    fail(ErrorKind::InvalidArgument, "compile: '{}' has no tokenizer to cut the corpus with", opt.model);
  SplitOptions so = opt.split;
  if (arch.max_position_embeddings) so.chunk = std::min<size_t>(so.chunk, arch.max_position_embeddings);
  const TaskCorpus corpus = load_corpus(*tok, opt.corpus, so);
  log(fmt::format("corpus: {} file(s), {} tokens, {} chunks of {} → select {}, report {}, train {} ({})",
                  corpus.files.size(), corpus.tokens, corpus.total_chunks, corpus.chunk, corpus.select.size(),
                  corpus.report.size(), corpus.train.size(), TaskCorpus::kSplitRule));

  // 2. replica and baseline
  model::CmfTensorSource cs(src);
  const train::Params replica = train::Params::from_source(cs);
  auto m = bind_exact(arch, replica, opt.threads);
  check_compilable(*m);
  const Score dense_rep_replica = score_chunks(*m, corpus.report);

  // 3. phase A
  Bar ba(opt.progress, "phase A", opt.a.steps, "step");
  GateSearchResult ga =
      search_gates(*m, corpus, opt.a, [&](const std::string& n, size_t k) { ba.tick(n, k); });
  ba.done();
  log(fmt::format("dense: select ppl {:.3f}, report ppl {:.3f} (f32 replica)", std::exp(ga.dense_select_nll),
                  dense_rep_replica.ppl()));
  for (const auto& p : ga.history)
    log(fmt::format("  phase A {:<12} kept {:6.2f}%  select ppl {:.3f}{}", p.what, 100.0 * p.kept,
                    std::exp(p.select_nll), p.step ? fmt::format("  closed {}", p.closed) : ""));
  for (const auto& p : ga.sweep)
    log(fmt::format("  sweep   {:<12} kept {:6.2f}%  select ppl {:.3f}", p.what, 100.0 * p.kept,
                    std::exp(p.select_nll)));
  log(fmt::format("chosen: {} (kept {:.2f}%, select ppl {:.3f})", ga.chosen.what, 100.0 * ga.chosen.kept,
                  std::exp(ga.chosen.select_nll)));

  // 4. keep sets
  uint64_t resurrected = 0;
  const KeepSets keep = align_keep(ga.logits, ga.keep, opt.align, &resurrected);
  std::vector<uint32_t> widths;
  for (const auto& k : keep) widths.push_back(static_cast<uint32_t>(k.size()));
  const double kept = kept_fraction(keep, ga.logits);
  log(fmt::format("keep sets (align {}): kept {:.2f}% of FFN neurons, {} resurrected by alignment", opt.align,
                  100.0 * kept, resurrected));
  const double mask_nll = score_chunks(*m, corpus.select, hard_variant(*m, keep).get()).mean();
  m.reset();

  // 5. phase B
  FcdResult fb;
  const bool phase_b = !as_mask && opt.b.steps > 0;
  nlohmann::json trace = {
      {"dense_select", std::exp(ga.dense_select_nll)},
      {"intermediate", arch.intermediate_size},
      {"widths", widths},
      {"chosen",
       {{"what", ga.chosen.what}, {"kept", ga.chosen.kept}, {"ppl", std::exp(ga.chosen.select_nll)}}},
      {"aligned", {{"kept", kept}, {"ppl", std::exp(mask_nll)}}},
      {"phase_a", nlohmann::json::array()},
      {"sweep", nlohmann::json::array()},
      {"phase_b", nlohmann::json::array()}};
  for (const auto& p : ga.history)
    trace["phase_a"].push_back(
        {{"what", p.what}, {"step", p.step}, {"kept", p.kept}, {"ppl", std::exp(p.select_nll)}});
  for (const auto& p : ga.sweep)
    trace["sweep"].push_back({{"what", p.what}, {"kept", p.kept}, {"ppl", std::exp(p.select_nll)}});
  if (phase_b) {
    Bar bb(opt.progress, "phase B", opt.b.steps, "step");
    FcdOptions bo = opt.b;
    bo.threads = opt.threads;
    fb = fcd_tail(arch, replica, keep, corpus, bo, [&](const std::string& n, size_t k) { bb.tick(n, k); });
    bb.done();
    for (const auto& p : fb.history)
      log(fmt::format("  phase B {:<14} select ppl {:.3f}", p.what, std::exp(p.select_nll))),
          trace["phase_b"].push_back({{"what", p.what}, {"step", p.step}, {"ppl", std::exp(p.select_nll)}});
    log(fb.best_step ? fmt::format("phase B: best at step {} (select ppl {:.3f} from {:.3f})", fb.best_step,
                                   std::exp(fb.best_nll), std::exp(fb.start_nll))
                     : "phase B: no step beat the phase-A mask; nothing trained is kept");
  }
  if (as_skill && !fb.best_step)
    fail(ErrorKind::InvalidArgument,
         "compile --as skill: no phase B step beat the mask alone on select, so there is no trained tail to "
         "store as a skill (more --fcd-steps or a higher --fcd-lr, or --as mask)");

  // 6. the contract (report filled after measuring)
  nlohmann::json files = nlohmann::json::array(), shas = nlohmann::json::array();
  for (const auto& f : corpus.files) files.push_back(f.basename), shas.push_back(f.sha256);
  uint64_t sel_tokens = 0;
  for (const auto& c : corpus.select) sel_tokens += c.size() - 1;
  std::vector<double> kept_frac;
  for (size_t l = 0; l < keep.size(); ++l)
    kept_frac.push_back(
        r4(static_cast<double>(keep[l].size()) / static_cast<double>(arch.intermediate_size)));
  nlohmann::json contract = {
      {"recipe", phase_b ? "l1-mask+fcd" : "l1-mask"},
      {"version", 1},
      {"task", opt.task},
      {"as", as_skill  ? "skill"
             : as_mask ? "mask"
                       : "specialist"},
      {"seed", opt.a.seed},
      {"corpus",
       {{"files", files},
        {"sha256", shas},
        {"tokens", corpus.tokens},
        {"chunk", corpus.chunk},
        {"split", TaskCorpus::kSplitRule},
        {"chunks",
         {{"select", corpus.select.size()},
          {"report", corpus.report.size()},
          {"train", corpus.train.size()}}}}},
      {"hyper",
       {{"steps_a", opt.a.steps},
        {"steps_b", phase_b ? opt.b.steps : 0},
        {"lr_a", opt.a.lr},
        {"lr_b", opt.b.lr},
        {"l1", {opt.a.l1_base, opt.a.l1_step, opt.a.eval_every}},
        {"l1_mult", opt.a.l1_mult},
        {"tau", opt.a.tau},
        {"fcd_layers", phase_b ? std::min<size_t>(opt.b.layers, arch.num_layers) : 0},
        {"kl", opt.b.kl},
        {"align", opt.align},
        {"through_attention", opt.a.through_attention}}},
      {"selection",
       {{"metric", "ppl"},
        {"set", "select"},
        {"n_tokens", sel_tokens},
        {"dense", r4(std::exp(ga.dense_select_nll))},
        {"mask", r4(std::exp(mask_nll))},
        {"mask_fcd", phase_b ? nlohmann::json(r4(std::exp(fb.best_nll))) : nlohmann::json(nullptr)},
        {"chosen", ga.chosen.what},
        {"chosen_step", ga.chosen.step},
        {"sparsity", r4(1.0 - ga.chosen.kept)}}},
      {"size",
       {{"kept_per_layer", widths},
        {"kept_fraction_per_layer", kept_frac},
        {"kept_fraction", r4(kept)},
        {"pruned_ratio", r4(1.0 - kept)},
        {"resurrected", resurrected}}}};

  // 7. stage: the file to measure, under a temporary name removed on error or signal
  AtomicFile stage_guard(opt.output + ".stage");
  const std::string stage = stage_guard.temp_path();
  cmf::MaskCatalog cat;
  std::vector<std::string> overlays;
  if (with_mask) {
    if (src.masks()) cat = *src.masks();
    uint32_t id = 0;
    for (const auto& x : cat.masks) id = std::max(id, x.task_id + 1);
    cmf::TaskMask tm = mask_of(arch, keep, opt.task, id);
    tm.description = fmt::format("compiled by {} from {}", kEngine, files.dump());
    tm.priority = cmf::MaskPriority::Normal;
    cat.masks.push_back(std::move(tm));
    if (cat.default_task.empty()) cat.default_task = opt.task;
    convert::write_with_masks(opt.model, stage, cat, opt.progress);
    if (as_skill) overlays = append_skill(src, *tok, corpus, keep, fb, opt, stage);
  } else {
    DefragPlan plan;
    plan.keep = keep;
    plan.trained = fb.best_step ? &fb.masters : nullptr;
    defrag_file(src, stage, plan, opt.progress);
  }

  // 8. measure report through the runtime on the staged file and on the source (exact kernels)
  runtime::LoadOptions lo;
  lo.threads = opt.threads;
  lo.exact = true;
  lo.task = "off";
  Bar bm(opt.progress, "report", 2 * corpus.report.size(), "chunk");
  const auto measure = [&](const std::string& path, const std::string& task, const char* note,
                           const std::string& skill = "none") {
    runtime::LoadOptions lo;
    lo.threads = opt.threads;
    lo.exact = true;
    lo.task = task;
    lo.skill = skill;
    runtime::LoadedModel lm = runtime::load_model(path, lo);
    return score_chunks(*lm.model, corpus.report, lm.variant.get(), 4, [&](size_t n) { bm.tick(note, n); });
  };
  const Score dense_rep = measure(opt.model, "off", "dense");
  const Score spec_rep = as_skill  ? measure(stage, "", "skill", opt.task)
                         : as_mask ? measure(stage, opt.task, "mask")
                                   : measure(stage, "off", "specialist");
  bm.done();
  const Paired d = paired_delta(dense_rep, spec_rep, corpus.chunk);
  CompileResult res;
  res.verdict = verdict_of(d.mean_delta, d.stderr_delta);
  res.better = res.verdict == "better";
  res.dense_ppl = dense_rep.ppl();
  res.specialist_ppl = spec_rep.ppl();
  contract["report"] = {{"metric", "ppl"},
                        {"set", "report"},
                        {"n_tokens", spec_rep.tokens},
                        {"dense_runtime", r4(res.dense_ppl)},
                        {"specialist_runtime", r4(res.specialist_ppl)},
                        {"ratio", r4(res.specialist_ppl / res.dense_ppl)},
                        {"delta_nll", d.mean_delta},
                        {"delta_nll_stderr", d.stderr_delta},
                        {"verdict", res.verdict},
                        {"engine", kEngine},
                        {"kernels", "exact"}};
  log(fmt::format(
      "report (runtime, exact kernels, {} tokens): dense ppl {:.3f}, {} ppl {:.3f} (ratio "
      "{:.4f}, Δnll {:+.4f} ± {:.4f}): {}",
      spec_rep.tokens, res.dense_ppl,
      as_skill  ? "skill"
      : as_mask ? "mask"
                : "specialist",
      res.specialist_ppl, res.specialist_ppl / res.dense_ppl, d.mean_delta, d.stderr_delta, res.verdict));

  // 9. the final file: the staged tensors under a header carrying the contract
  cmf::Reader st = cmf::Reader::open(stage);
  res.bytes_before = fs::file_size(opt.model);
  contract["size"]["tensor_bytes_before"] = tensor_bytes(src);
  contract["size"]["tensor_bytes_after"] = tensor_bytes(st);
  cmf::Header h = st.header();
  if (!h.provenance.is_object()) h.provenance = nlohmann::json::object();
  std::optional<cmf::MaskCatalog> masks;
  if (with_mask) {
    masks = *st.masks();
    for (auto& x : masks->masks)
      if (x.name == opt.task) {
        nlohmann::json q = {{"metric", "ppl"},
                            {"value", r4(res.specialist_ppl)},
                            {"baseline_dense", r4(res.dense_ppl)},
                            {"n_samples", spec_rep.tokens}};
        q["dataset_sha256"] = shas.size() == 1 ? shas[0] : shas;
        x.quality = q;
        x.extra["specialize"] = contract;
      }
    for (auto& r : h.skills)
      if (as_skill && r.id == opt.task) {
        r.input_mask_task = opt.task;
        r.quality = nlohmann::json{{"metric", "ppl"},
                                   {"value", r4(res.specialist_ppl)},
                                   {"baseline_dense", r4(res.dense_ppl)},
                                   {"n_samples", spec_rep.tokens},
                                   {"verdict", res.verdict}};
        r.provenance = nlohmann::json{{"specialize", contract}};
      }
  } else {
    h.provenance["specialize"] = contract;
    h.provenance["defrag"] = {{"recipe", contract["recipe"]},
                              {"pre_intermediate", arch.intermediate_size},
                              {"post_intermediate_max", h.arch.intermediate_size},
                              {"kept_per_layer", widths},
                              {"pruned_ratio", r4(1.0 - kept)}};
  }
  copy_with_header(st, opt.output, h, masks);
  const auto problems = cmf::Reader::open(opt.output).verify();
  if (!problems.empty())
    fail(ErrorKind::HashMismatch, "compile: the written '{}' does not verify: {}", opt.output,
         problems.front());
  res.bytes_after = fs::file_size(opt.output);
  res.contract = contract;
  trace["report"] = {{"dense", res.dense_ppl}, {"specialist", res.specialist_ppl}, {"verdict", res.verdict}};
  trace["task"] = opt.task;
  trace["as"] = contract["as"];
  trace["bytes"] = {{"before", res.bytes_before}, {"after", res.bytes_after}};
  res.trace = std::move(trace);
  res.overlays = std::move(overlays);
  return res;
}

std::vector<std::string> contract_lines(const nlohmann::json& c) {
  const auto get = [&](std::initializer_list<const char*> path) -> std::string {
    const nlohmann::json* j = &c;
    for (const char* k : path) {
      if (!j->is_object() || !j->contains(k)) return "?";
      j = &(*j)[k];
    }
    if (j->is_string()) return j->get<std::string>();
    if (j->is_number_float()) return fmt::format("{:.4g}", j->get<double>());
    return j->dump();
  };
  std::vector<std::string> out;
  out.push_back(fmt::format("task {} ({}, as {}), FFN kept {} (per layer {})", get({"task"}), get({"recipe"}),
                            get({"as"}), get({"size", "kept_fraction"}), get({"size", "kept_per_layer"})));
  out.push_back(fmt::format("report ppl {} vs dense {} (ratio {}, {} tokens, {} kernels): {}",
                            get({"report", "specialist_runtime"}), get({"report", "dense_runtime"}),
                            get({"report", "ratio"}), get({"report", "n_tokens"}), get({"report", "kernels"}),
                            get({"report", "verdict"})));
  out.push_back(fmt::format("select ppl dense {} → mask {} → mask+fcd {} (chosen {})",
                            get({"selection", "dense"}), get({"selection", "mask"}),
                            get({"selection", "mask_fcd"}), get({"selection", "chosen"})));
  const auto& files = c.value("corpus", nlohmann::json::object()).value("files", nlohmann::json::array());
  const auto& shas = c.value("corpus", nlohmann::json::object()).value("sha256", nlohmann::json::array());
  for (size_t i = 0; i < files.size(); ++i)
    out.push_back(fmt::format("corpus {} sha256 {}", files[i].is_string() ? files[i].get<std::string>() : "?",
                              i < shas.size() && shas[i].is_string() ? shas[i].get<std::string>() : "?"));
  out.push_back(fmt::format("corpus tokens {}, chunk {}, split {}", get({"corpus", "tokens"}),
                            get({"corpus", "chunk"}), get({"corpus", "split"})));
  return out;
}

}  // namespace cortiq::specialize
