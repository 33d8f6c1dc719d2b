// Task compilation (issue 31) on the embedded stories260K checkpoint (5 layers, FFN width 172) and
// on hand-made logits: keep-set rules (§4), defrag == the masked model (exact kernels, f32), the
// q8_2f fallback of a codec that cannot hold the new width, a tiny compile end to end (file
// verifies, carries the quality contract measured through the runtime), and the bad inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "cmf/reader.h"
#include "cmf/tensor_names.h"
#include "convert/convert.h"
#include "model/cmf_source.h"
#include "runtime/session.h"
#include "specialize/compile.h"
#include "specialize/defrag.h"
#include "specialize/keep.h"
#include "specialize/routing.h"
#include "specialize/score.h"
#include "specialize/skills.h"
#include "support/errors.h"
#include "support/temp_dir.h"
#include "util/error.h"

namespace cortiq::specialize {
namespace {

namespace fs = std::filesystem;

const std::string kSrc = CORTIQ_SOURCE_DIR;

/// The message of the cortiq::Error `f()` throws ("(no error)" when it returns).
template <class F>
std::string msg_of(F&& f) {
  const auto e = test::error_of(std::forward<F>(f));
  return e ? std::string(e->what()) : "(no error)";
}
const std::string kStory = kSrc + "/../shared/data/tinystories-sample/tinystories_sample.txt";

using test::TempDir;

/// The TinyStories sample split as the compile tests split it (chunks of 32, 4 select and 4 report
/// chunks), tokenized with the tokenizer of the CMF file `model`.
TaskCorpus story_corpus(const std::string& model) {
  cmf::Reader src = cmf::Reader::open(model);
  auto tok = runtime::load_tokenizer(src, model);
  SplitOptions so;
  so.chunk = 32;
  so.select_chunks = so.report_chunks = 4;
  return load_corpus(*tok, {kStory}, so);
}

std::string convert_stories(const TempDir& d, const std::string& quant) {
  convert::ConvertOptions o;
  o.model_dir = kSrc + "/models/stories260K";
  o.output = d / ("stories-" + quant + ".cmf");
  o.plan.base = convert::parse_quant(quant);
  o.threads = 1;
  o.progress = false;
  convert::convert_checkpoint(o);
  return o.output;
}

/// All logits of `ids` through the runtime (exact kernels) under `task`.
std::vector<float> logits_of(const std::string& path, const std::string& task,
                             const std::vector<uint32_t>& ids) {
  runtime::LoadOptions lo;
  lo.exact = true;
  lo.task = task;
  auto lm = runtime::load_model(path, lo);
  std::vector<float> out(ids.size() * lm.model->vocab_size());
  model::KvCache kv(lm.model->arch(), ids.size());
  lm.model->forward(ids, kv, out, model::LogitsMode::All, lm.variant.get());
  return out;
}

TEST(Keep, AlignRoundsUpWithTheBestPrunedAndKeepsWhatWasAlive) {
  const Logits lg = {{0.f, 5.f, -1.f, 3.f, -2.f, 4.f}, {-1.f, -2.f, -3.f, -4.f, -5.f, -6.f}};
  const KeepSets k = keep_by_threshold(lg);
  EXPECT_EQ(k[0], (std::vector<uint32_t>{1, 3, 5}));  // m > 0 (σ > 0.5): 0 itself is not kept
  EXPECT_TRUE(k[1].empty());
  uint64_t added = 0;
  const KeepSets a = align_keep(lg, k, 4, &added);
  EXPECT_EQ(a[0], (std::vector<uint32_t>{0, 1, 3, 5}));  // + the highest pruned (logit 0)
  EXPECT_EQ(a[1], (std::vector<uint32_t>{0, 1, 2, 3}));  // an all-dead layer keeps `align`, best first
  EXPECT_EQ(added, 5u);
  const KeepSets capped = align_keep(lg, k, 32);
  EXPECT_EQ(capped[0].size(), 6u);  // capped at the width
  const KeepSets one = align_keep(lg, k, 1);
  EXPECT_EQ(one[1], (std::vector<uint32_t>{0}));
  // sweep: the checkpoint pruned 3 of layer 0 and 6 of layer 1 (at most width − 1)
  const KeepSets half = scaled_cut(lg, k, 0.5);
  EXPECT_EQ(half[0].size(), 4u);  // 6 − round(1.5) = 4
  EXPECT_EQ(half[1].size(), 3u);
  EXPECT_EQ(half[0], (std::vector<uint32_t>{0, 1, 3, 5}));
  EXPECT_NEAR(kept_fraction(half, lg), 7.0 / 12.0, 1e-12);
}

TEST(Keep, MaskRoundTripAndEmptyLayerRefused) {
  cmf::ModelArch a;
  a.num_layers = 2;
  a.intermediate_size = 10;
  a.num_attention_heads = 2;
  const KeepSets k = {{1, 2, 9}, {0}};
  const cmf::TaskMask m = mask_of(a, k, "t", 3);
  EXPECT_NEAR(m.sparsity, 1.0 - 4.0 / 20.0, 1e-6);
  EXPECT_EQ(keep_of(a, m), k);
  EXPECT_THROW(mask_of(a, KeepSets{{1}, {}}, "t", 0), Error);
  cmf::TaskMask e = m;
  e.ffn.set(1, 0, false);
  const std::string msg = msg_of([&] { keep_of(a, e); });
  EXPECT_NE(msg.find("layer 1"), std::string::npos) << msg;
}

TEST(Verdict, PairedNoiseRule) {
  EXPECT_EQ(verdict_of(-0.05, 0.01), "better");
  EXPECT_EQ(verdict_of(-0.01, 0.01), "within noise");
  EXPECT_EQ(verdict_of(0.05, 0.01), "worse");
  Score a, b;
  a.chunk_nll = {10.0, 20.0};
  b.chunk_nll = {8.0, 16.0};
  const Paired p = paired_delta(a, b, 11);  // per token: −0.2, −0.4
  EXPECT_NEAR(p.mean_delta, -0.3, 1e-12);
  EXPECT_NEAR(p.stderr_delta, 0.1, 1e-12);  // sd 0.1414 / sqrt 2
}

// Defrag of a masked model computes what the masked model computes: f32 weights, exact kernels, a
// random 40 % mask (widths 69, not multiples of 32); the written file verifies.
TEST(Defrag, EqualsTheMaskedModel) {
  TempDir d;
  const std::string f32 = convert_stories(d, "f32");
  cmf::Reader r0 = cmf::Reader::open(f32);
  cmf::MaskCatalog cat;
  cat.masks.push_back(cmf::make_random_ffn_mask(r0.header().arch, "rand", 0, 0.4, 7));
  cat.default_task = "rand";
  const std::string masked = d / "masked.cmf";
  convert::write_with_masks(f32, masked, cat, false);
  cmf::Reader rm = cmf::Reader::open(masked);
  DefragPlan plan;
  plan.keep = keep_of(rm.header().arch, *rm.masks()->find("rand"));
  const std::string out = d / "defrag.cmf";
  const DefragResult res = defrag_file(rm, out, plan, false);
  EXPECT_EQ(res.widths[0], 69u);
  cmf::Reader ro = cmf::Reader::open(out);
  EXPECT_TRUE(ro.verify().empty());
  EXPECT_EQ(ro.masks(), nullptr);
  EXPECT_EQ(ro.header().arch.intermediate_size, 69u);
  EXPECT_EQ(ro.tensor(cmf::tensor_name(cmf::TensorRole::FfnDown, 2)).shape, (std::vector<uint64_t>{64, 69}));
  const std::vector<uint32_t> ids = {1, 403, 407, 261, 378, 285, 270, 363, 259, 377, 284, 264, 365, 322};
  const auto want = logits_of(masked, "rand", ids), got = logits_of(out, "off", ids),
             dense = logits_of(masked, "off", ids);
  ASSERT_EQ(want.size(), got.size());
  double worst = 0, scale = 0, moved = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(want[i] - got[i])));
    scale = std::max(scale, static_cast<double>(std::abs(want[i])));
    moved = std::max(moved, static_cast<double>(std::abs(want[i] - dense[i])));
  }
  EXPECT_LE(worst, 1e-5 * scale) << "defragged logits differ from the masked model's";
  EXPECT_GT(moved, 1e-2 * scale) << "the mask must change the logits for this test to mean anything";
  // an empty layer is refused, naming it; nothing is written
  plan.keep[3].clear();
  const std::string msg = msg_of([&] { defrag_file(rm, d / "empty.cmf", plan, false); });
  EXPECT_NE(msg.find("layer 3"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(d / "empty.cmf"));
}

// A q4_tiled down_proj cannot hold width 69: it falls back to q8_2f (said in the notes); gate/up
// keep q4_tiled; the file loads and verifies.
TEST(Defrag, CodecFallbackForWidthsNotMultipleOf32) {
  TempDir d;
  const std::string q4 = convert_stories(d, "q4t");
  cmf::Reader r = cmf::Reader::open(q4);
  const auto down_dt = r.tensor(cmf::tensor_name(cmf::TensorRole::FfnDown, 0)).dtype;
  const auto gate_dt = r.tensor(cmf::tensor_name(cmf::TensorRole::FfnGate, 0)).dtype;
  DefragPlan plan;
  plan.keep = keep_of(r.header().arch, cmf::make_random_ffn_mask(r.header().arch, "x", 0, 0.4, 1));
  const std::string out = d / "q.cmf";
  const DefragResult res = defrag_file(r, out, plan, false);
  cmf::Reader ro = cmf::Reader::open(out);
  EXPECT_TRUE(ro.verify().empty());
  EXPECT_EQ(ro.tensor(cmf::tensor_name(cmf::TensorRole::FfnGate, 0)).dtype, gate_dt);
  if (down_dt == quant::DType::Q4Tiled) {
    EXPECT_EQ(ro.tensor(cmf::tensor_name(cmf::TensorRole::FfnDown, 0)).dtype, quant::DType::Q8_2F);
    ASSERT_FALSE(res.notes.empty());
    EXPECT_NE(res.notes[0].find("q8_2f"), std::string::npos);
  }
  runtime::LoadOptions lo;
  lo.exact = true;
  EXPECT_NO_THROW(runtime::load_model(out, lo));
}

CompileOptions tiny(const std::string& model, const std::string& out) {
  CompileOptions o;
  o.model = model;
  o.output = out;
  o.task = "stories";
  o.corpus = {kStory};
  o.split.chunk = 32;
  o.split.select_chunks = 4;
  o.split.report_chunks = 4;
  o.a.steps = 6;
  o.a.eval_every = 3;
  o.a.lr = 0.5;                // Adam moves each logit ≈ lr per step: m₀ = 2 crosses 0 in ~4
  o.a.l1_mult = 50.0;          // close neurons within a few steps
  o.a.target_sparsity = 0.05;  // and ship a cut even where dense scores better (REF --target-sparsity)
  o.b.steps = 2;
  o.b.eval_every = 1;
  o.b.layers = 2;
  o.b.lr = 1e-3;
  o.progress = false;
  if (std::getenv("CORTIQ_TEST_LOG")) o.log = [](const std::string& s) { std::printf("%s\n", s.c_str()); };
  return o;
}

// A tiny compile end to end: the specialist verifies, carries provenance.specialize with the
// report measured through the runtime (the same numbers score_chunks gives on the written file),
// per-layer widths aligned to 32 (or the full 172), and the corpus hash; --as mask adds a mask
// with its quality.
TEST(Compile, TinyEndToEnd) {
  TempDir d;
  const std::string f32 = convert_stories(d, "f32");
  const std::string out = d / "spec.cmf";
  const CompileResult r = compile_task(tiny(f32, out));
  cmf::Reader ro = cmf::Reader::open(out);
  EXPECT_TRUE(ro.verify().empty());
  ASSERT_TRUE(ro.header().provenance.contains("specialize"));
  const auto& c = ro.header().provenance["specialize"];
  EXPECT_EQ(c["task"], "stories");
  EXPECT_EQ(c["report"]["metric"], "ppl");
  EXPECT_EQ(c["report"]["kernels"], "exact");
  EXPECT_NEAR(c["report"]["dense_runtime"].get<double>(), r.dense_ppl, 1e-3);
  EXPECT_NEAR(c["report"]["specialist_runtime"].get<double>(), r.specialist_ppl, 1e-3);
  EXPECT_EQ(c["report"]["n_tokens"].get<uint64_t>(), 4u * 31u);
  EXPECT_EQ(c["corpus"]["sha256"][0].get<std::string>().size(), 64u);
  EXPECT_EQ(c["report"]["verdict"], r.verdict);
  const auto widths = c["size"]["kept_per_layer"].get<std::vector<uint32_t>>();
  ASSERT_EQ(widths.size(), 5u);
  for (size_t l = 0; l < widths.size(); ++l) {
    EXPECT_TRUE(widths[l] % 32 == 0 || widths[l] == 172) << widths[l];
    EXPECT_EQ(ro.tensor(cmf::tensor_name(cmf::TensorRole::FfnGate, static_cast<uint32_t>(l))).shape[0],
              widths[l]);
  }
  EXPECT_LT(c["size"]["kept_fraction"].get<double>(), 1.0) << "the target sparsity ships a cut";
  EXPECT_GE(c["selection"]["sparsity"].get<double>(), 0.05)
      << "a cut reaching the target beats one short of it";
  // the report numbers are what the runtime gives on the written file
  {
    const TaskCorpus corpus = story_corpus(f32);
    runtime::LoadOptions lo;
    lo.exact = true;
    auto lm = runtime::load_model(out, lo);
    EXPECT_NEAR(score_chunks(*lm.model, corpus.report).ppl(), r.specialist_ppl, 1e-9 * r.specialist_ppl);
  }
  // as a mask: same shapes, a new mask with its quality; a second compile of the same name is refused
  CompileOptions mo = tiny(f32, d / "mask.cmf");
  mo.as = CompileAs::Mask;
  const CompileResult rm = compile_task(mo);
  cmf::Reader rk = cmf::Reader::open(d / "mask.cmf");
  EXPECT_TRUE(rk.verify().empty());
  const cmf::TaskMask* m = rk.masks()->find("stories");
  ASSERT_NE(m, nullptr);
  EXPECT_NEAR(m->quality["value"].get<double>(), rm.specialist_ppl, 1e-3);
  EXPECT_NEAR(m->quality["baseline_dense"].get<double>(), rm.dense_ppl, 1e-3);
  EXPECT_TRUE(m->extra.contains("specialize"));
  EXPECT_EQ(rk.tensor(cmf::tensor_name(cmf::TensorRole::FfnGate, 0)).shape[0], 172u);
  mo.model = d / "mask.cmf";
  mo.output = d / "mask2.cmf";
  EXPECT_NE(msg_of([&] { compile_task(mo); }).find("already has a task mask"), std::string::npos);
}

TEST(Compile, AsSkillOverlaysOnlyTheTunedTailAndRoutesItsCorpus) {
  TempDir d;
  const std::string f32 = convert_stories(d, "f32");
  CompileOptions o = tiny(f32, d / "skill.cmf");
  o.as = CompileAs::Skill;
  o.skill_prompts = 8;
  o.b.steps = 20;  // enough for the tail to beat the mask alone on select
  o.b.eval_every = 20;
  o.b.lr = 1e-4;
  const CompileResult r = compile_task(o);
  cmf::Reader rs = cmf::Reader::open(o.output);
  EXPECT_TRUE(rs.verify().empty());
  // the overlays are exactly the trained tail's FFN tensors (layers 3 and 4), nothing else
  std::vector<std::string> want;
  for (uint32_t l : {3u, 4u})
    for (auto role : {cmf::TensorRole::FfnGate, cmf::TensorRole::FfnUp, cmf::TensorRole::FfnDown})
      want.push_back(cmf::tensor_name(role, l));
  std::vector<std::string> got = r.overlays, in_file;
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  for (const auto& t : rs.tensors())
    if (auto p = cmf::parse_skill_name(t.name)) in_file.push_back(p->second);
  std::sort(in_file.begin(), in_file.end());
  EXPECT_EQ(in_file, want);
  ASSERT_EQ(rs.skills().size(), 1u);
  const cmf::SkillRecord& rec = rs.skills()[0];
  EXPECT_EQ(rec.id, "stories");
  EXPECT_EQ(rec.input_mask_task, std::optional<std::string>("stories"));
  EXPECT_EQ(rec.layers, (std::vector<uint32_t>{3, 4}));
  ASSERT_TRUE(rec.selection.has_value());
  ASSERT_TRUE(rec.provenance && rec.provenance->contains("specialize"));
  EXPECT_EQ((*rec.provenance)["specialize"]["as"], "skill");
  ASSERT_NE(rs.masks()->find("stories"), nullptr);
  // the skill runs: its report score through the runtime is the contract's, and it differs from the
  // mask alone (the tuned tail is applied)
  const TaskCorpus corpus = story_corpus(f32);
  runtime::LoadOptions lo;
  lo.exact = true;
  lo.skill = "stories";
  auto lm = runtime::load_model(o.output, lo);
  const double with_skill = score_chunks(*lm.model, corpus.report, lm.variant.get()).ppl();
  EXPECT_NEAR(with_skill, r.specialist_ppl, 1e-9 * r.specialist_ppl);
  lo.skill = "none";
  lo.task = "stories";
  auto lm2 = runtime::load_model(o.output, lo);
  EXPECT_NE(score_chunks(*lm2.model, corpus.report, lm2.variant.get()).ppl(), with_skill);
  // the router picks it on its corpus (φ of report chunks through the backbone)
  size_t picked = 0;
  for (const Chunk& c : corpus.report) {
    const auto phi = compute_phis(*lm2.model, c, std::vector<uint32_t>{rec.selection->phi_layer});
    picked += choose_skill(rs.skills(), phi).chosen == "stories";
  }
  EXPECT_EQ(picked, corpus.report.size());
  // a second skill of the same name is refused; --fcd-steps 0 leaves nothing to store
  o.model = o.output;
  o.output = d / "skill2.cmf";
  EXPECT_NE(msg_of([&] { compile_task(o); }).find("already has a task mask"), std::string::npos);
  o.model = f32;
  o.b.steps = 0;
  EXPECT_NE(msg_of([&] { compile_task(o); }).find("leaves nothing to store"), std::string::npos);
  EXPECT_FALSE(fs::exists(d / "skill2.cmf"));
}

TEST(Compile, BadInput) {
  TempDir d;
  const std::string f32 = convert_stories(d, "f32");
  CompileOptions o = tiny(f32, d / "o.cmf");
  o.split.chunk = 256;  // the sample makes a handful of chunks of 256
  std::string msg = msg_of([&] { compile_task(o); });
  EXPECT_NE(msg.find("too short"), std::string::npos) << msg;
  EXPECT_NE(msg.find("6144 tokens"), std::string::npos) << msg;
  o = tiny(f32, f32);
  msg = msg_of([&] { compile_task(o); });
  EXPECT_NE(msg.find("is the input file"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(d / "o.cmf"));
  // a defragged model (FFN widths 32 and 64) is refused, naming the layer
  {
    cmf::Reader r = cmf::Reader::open(f32);
    DefragPlan plan;
    for (uint32_t l = 0; l < 5; ++l) {
      plan.keep.emplace_back(l == 0 ? 64 : 32);
      for (uint32_t j = 0; j < plan.keep.back().size(); ++j) plan.keep.back()[j] = 2 * j;
    }
    defrag_file(r, d / "narrow.cmf", plan, false);
  }
  o = tiny(d / "narrow.cmf", d / "o.cmf");
  msg = msg_of([&] { compile_task(o); });
  EXPECT_NE(msg.find("layer 1 has FFN width 32 but the arch says 64"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(d / "o.cmf"));
  for (const auto& e : fs::directory_iterator(d.p))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "left behind: " << e.path();
}

}  // namespace
}  // namespace cortiq::specialize
