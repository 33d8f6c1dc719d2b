// MoE statistics, cover rule, expert cut and expert mask (specialize/moe.h) on the tiny qwen3_moe /
// qwen2_moe checkpoints of the forward goldens (model/test_support.h), written as f32 CMF files;
// compile's refusal of MoE and non-SiLU models.
#include "specialize/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "cmf/tensor_names.h"
#include "cmf/writer.h"
#include "model/test_support.h"
#include "runtime/session.h"
#include "specialize/compile.h"
#include "support/errors.h"
#include "support/temp_dir.h"

namespace cortiq::specialize {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

/// The golden family's tiny checkpoint as an f32 CMF file (no vocab: ids only).
std::string write_case(const TempDir& d, const std::string& fam) {
  auto c = model::test::load_case(fam);
  EXPECT_TRUE(c) << fam;
  const std::string out = d / (fam + ".cmf");
  cmf::Writer w(out);
  for (const auto& t : c->g["tensors"]) {
    const auto shape = t["shape"].get<std::vector<uint64_t>>();
    const auto v = model::test::gen_tensor(c->g["seed"], t["name"], shape, t["init"]);
    w.add_tensor(t["name"].get<std::string>(), quant::DType::F32, shape,
                 std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4));
  }
  cmf::Header h;
  h.arch = c->arch;
  h.quant_type = cmf::QuantType::F32;
  w.finish(h);
  return out;
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

/// max |a − b| over max |a|.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(a[i])));
  }
  return worst / scale;
}

MoeStats stats_of(const std::string& path, const std::vector<Chunk>& chunks,
                  const std::string& task = "off") {
  runtime::LoadOptions lo;
  lo.exact = true;
  lo.task = task;
  auto lm = runtime::load_model(path, lo);
  return collect_moe_stats(*lm.model, chunks, lm.variant.get(), 2);
}

const std::vector<Chunk> kText = {{18, 18, 5, 36, 29, 13, 40, 5, 17, 6, 28, 25}, {3, 9, 60, 2, 33}, {7}};

TEST(MoeCover, RuleTieBreakAndMinimum) {
  const std::vector<double> v = {0.1, 0.5, 0.3, 0.1};
  EXPECT_EQ(cover_keep(v, 0.8, 1), (std::vector<uint32_t>{1, 2}));      // 0.5 + 0.3 = 0.8 ≥ 0.8
  EXPECT_EQ(cover_keep(v, 0.81, 1), (std::vector<uint32_t>{0, 1, 2}));  // the tie goes to expert 0
  EXPECT_EQ(cover_keep(v, 0.4, 1), (std::vector<uint32_t>{1}));
  EXPECT_EQ(cover_keep(v, 0.4, 3), (std::vector<uint32_t>{0, 1, 2}));  // never fewer than top_k
  EXPECT_EQ(cover_keep(std::vector<double>{0, 2, 0, 1}, 1.0, 1),
            (std::vector<uint32_t>{1, 3}));  // zeros drop
  EXPECT_EQ(cover_keep(std::vector<double>{0, 0, 0}, 0.5, 1),
            (std::vector<uint32_t>{0, 1, 2}));  // no data: all
  EXPECT_NE(test::error_of([&] { cover_keep(v, 0.0, 1); }), std::nullopt);
  EXPECT_NE(test::error_of([&] { cover_keep(v, 1.5, 1); }), std::nullopt);
}

TEST(MoeStats, JsonRoundTripAndReferenceCounts) {
  MoeStats s;
  s.layers[1] = MoeLayerStats{{3, 0, 5}, {1.5, 0.0, 2.25}, {0.5, 0.0, 1.0}};
  const MoeStats r = parse_moe_stats(moe_stats_json(s));
  ASSERT_EQ(r.layers.size(), 1u);
  EXPECT_EQ(r.layers.at(1).count, s.layers[1].count);
  EXPECT_EQ(r.layers.at(1).weight, s.layers[1].weight);
  EXPECT_EQ(r.layers.at(1).saliency, s.layers[1].saliency);
  const MoeStats ref = parse_moe_stats(nlohmann::json::parse(R"({"0": [4, 1, 0, 2]})"));
  EXPECT_EQ(ref.values(0, MoeStatistic::Count), (std::vector<double>{4, 1, 0, 2}));
  EXPECT_TRUE(ref.values(0, MoeStatistic::Weight).empty());
  const auto e = test::error_of([] { parse_moe_stats(nlohmann::json::parse(R"({"x": [1]})")); });
  ASSERT_TRUE(e);
  EXPECT_NE(std::string(e->what()).find("'x'"), std::string::npos) << e->what();
}

// The oracle: the FFN inputs the runtime kept, routed here in double from the golden weights
// (softmax over the 4 experts, top 2 with ties to the lower index, renormalized: qwen3_moe).
TEST(MoeStats, WeightedSharesMatchAnIndependentRouting) {
  TempDir d;
  const std::string f = write_case(d, "qwen3_moe");
  const MoeStats s = stats_of(f, kText);
  EXPECT_EQ(s.tokens, 18u);
  ASSERT_EQ(s.layers.size(), 2u);
  auto c = model::test::load_case("qwen3_moe");
  runtime::LoadOptions lo;
  lo.exact = true;
  lo.task = "off";
  auto lm = runtime::load_model(f, lo);
  const size_t H = 32, E = 4;
  std::vector<std::vector<double>> want_w(2, std::vector<double>(E, 0.0));
  std::vector<std::vector<uint64_t>> want_c(2, std::vector<uint64_t>(E, 0));
  for (const Chunk& ch : kText) {
    model::KvCache kv(lm.model->arch(), ch.size());
    model::Activations act;
    act.keep = true;
    act.kept.resize(2);
    model::SeqStep st{ch, &kv, {}, false, nullptr};
    lm.model->forward_batch(std::span(&st, 1), nullptr, &act);
    for (uint32_t l = 0; l < 2; ++l) {
      const auto router =
          model::test::gen_tensor(c->g["seed"], cmf::tensor_name(cmf::TensorRole::Router, l), {E, H}, "mat");
      const auto& x = act.kept[l].x_ffn;
      ASSERT_EQ(x.size(), ch.size() * H);
      for (size_t t = 0; t < ch.size(); ++t) {
        std::vector<double> z(E);
        double mx = -1e300, sum = 0;
        for (size_t e = 0; e < E; ++e) {
          for (size_t k = 0; k < H; ++k) z[e] += static_cast<double>(router[e * H + k]) * x[t * H + k];
          mx = std::max(mx, z[e]);
        }
        for (auto& v : z) sum += (v = std::exp(v - mx));
        std::vector<size_t> o = {0, 1, 2, 3};
        std::stable_sort(o.begin(), o.end(), [&](size_t a, size_t b) { return z[a] > z[b]; });
        const double k2 = z[o[0]] + z[o[1]];
        for (size_t i = 0; i < 2; ++i) {
          ++want_c[l][o[i]];
          want_w[l][o[i]] += z[o[i]] / k2;
        }
        (void)sum;
      }
    }
  }
  for (uint32_t l = 0; l < 2; ++l) {
    EXPECT_EQ(s.layers.at(l).count, want_c[l]) << "layer " << l;
    double tot = 0;
    for (size_t e = 0; e < E; ++e) {
      EXPECT_NEAR(s.layers.at(l).weight[e], want_w[l][e], 1e-4) << "layer " << l << " expert " << e;
      EXPECT_GE(s.layers.at(l).saliency[e], 0.0);
      EXPECT_EQ(s.layers.at(l).saliency[e] > 0.0, want_c[l][e] > 0);
      tot += s.layers.at(l).weight[e];
    }
    EXPECT_NEAR(tot, 18.0, 1e-4);  // renormalized top-k: one unit of weight per token
  }
}

// moe-mask then moe-defrag of the masked file: the cut runs the masked model's numbers (qwen3_moe
// renormalizes its top-k, so restricting the candidates and removing the others are the same math),
// the masks' expert rows follow the renumbering, and the runtime never routes to a masked expert.
TEST(MoeDefrag, EqualsTheExpertMaskAndRemapsMasks) {
  TempDir d;
  const std::string f = write_case(d, "qwen3_moe");
  cmf::Reader r = cmf::Reader::open(f);
  MoeStats s = stats_of(f, kText);
  // a hand-made statistic: layer 0 keeps {1, 3}, layer 1 keeps {0, 2}
  s.layers[0].weight = {0.1, 5.0, 0.2, 4.0};
  s.layers[1].weight = {6.0, 0.1, 3.0, 0.1};
  const auto keep = moe_selection(r, s, MoeStatistic::Weight, 0.9);
  ASSERT_EQ(keep.at(0), (std::vector<uint32_t>{1, 3}));
  ASSERT_EQ(keep.at(1), (std::vector<uint32_t>{0, 2}));
  const std::string masked = d / "masked.cmf";
  add_mask_file(r, masked, expert_mask_of(r, keep, "task", 0));
  cmf::Reader rm0 = cmf::Reader::open(masked);
  // two more masks: one routing to {0, 1} in layer 0 (1 survives as new 0), one only to dropped experts
  cmf::TaskMask other = cmf::make_full_mask(r.header().arch, "other", 0, true);
  for (uint32_t e = 0; e < 4; ++e) other.experts->set(0, e, e < 2);
  const std::string masked2 = d / "masked2.cmf";
  add_mask_file(rm0, masked2, other);
  cmf::Reader rm1 = cmf::Reader::open(masked2);
  cmf::TaskMask gone = cmf::make_full_mask(r.header().arch, "gone", 0, true);
  for (uint32_t e = 0; e < 4; ++e) gone.experts->set(1, e, e == 1 || e == 3);
  const std::string masked3 = d / "masked3.cmf";
  add_mask_file(rm1, masked3, gone);
  cmf::Reader rm = cmf::Reader::open(masked3);
  ASSERT_TRUE(rm.verify().empty());
  ASSERT_EQ(rm.masks()->masks.size(), 3u);
  EXPECT_EQ(rm.masks()->find("task")->task_id, 1u);
  EXPECT_EQ(rm.masks()->find("gone")->task_id, 3u);
  EXPECT_NEAR(rm.masks()->find("task")->sparsity, 0.5, 1e-6);
  EXPECT_TRUE(test::error_of([&] { add_mask_file(rm, d / "dup.cmf", expert_mask_of(r, keep, "task", 0)); }));

  const std::string cut = d / "cut.cmf";
  const auto res = moe_defrag_file(rm, cut, keep, &s, {{"tool", "test"}}, false);
  EXPECT_EQ(res.kept, (std::vector<uint32_t>{2, 2}));
  cmf::Reader rc = cmf::Reader::open(cut);
  EXPECT_TRUE(rc.verify().empty());
  EXPECT_EQ(rc.tensor(cmf::tensor_name(cmf::TensorRole::Router, 0)).shape, (std::vector<uint64_t>{2, 32}));
  EXPECT_EQ(rc.find(cmf::tensor_name(cmf::TensorRole::ExpertGate, 0, 2)), nullptr);
  EXPECT_EQ(rc.header().arch.moe->num_experts, 4u);  // nominal
  // expert 3 of layer 0 is now expert 1, byte for byte; router row 3 is row 1
  EXPECT_EQ(rc.tensor(cmf::tensor_name(cmf::TensorRole::ExpertDown, 0, 1)).hash,
            rm.tensor(cmf::tensor_name(cmf::TensorRole::ExpertDown, 0, 3)).hash);
  const auto rs = rm.payload(rm.tensor(cmf::tensor_name(cmf::TensorRole::Router, 0)));
  const auto rd = rc.payload(rc.tensor(cmf::tensor_name(cmf::TensorRole::Router, 0)));
  EXPECT_TRUE(std::equal(rd.begin() + 128, rd.end(), rs.begin() + 3 * 128));
  const auto& pm = rc.header().provenance["moe_defrag"];
  EXPECT_EQ(pm["kept_per_layer"], nlohmann::json({2, 2}));
  EXPECT_EQ(pm["routing_stats"]["0"]["weight"], nlohmann::json({5.0, 4.0}));
  EXPECT_EQ(pm["routing_counts"]["1"].size(), 2u);
  // masks: 'task' → all kept experts open; 'other' → layer 0 {1} → {0}; 'gone' dropped
  ASSERT_NE(rc.masks(), nullptr);
  ASSERT_EQ(rc.masks()->masks.size(), 2u);
  EXPECT_EQ(rc.masks()->find("gone"), nullptr);
  const auto* mt = rc.masks()->find("task");
  const auto* mo = rc.masks()->find("other");
  for (uint32_t l = 0; l < 2; ++l)
    for (uint32_t e = 0; e < 4; ++e) EXPECT_EQ(mt->experts->get(l, e), e < 2) << l << "," << e;
  for (uint32_t e = 0; e < 4; ++e) {
    EXPECT_EQ(mo->experts->get(0, e), e == 0) << e;
    EXPECT_EQ(mo->experts->get(1, e), e < 2) << e;
  }
  EXPECT_NE(std::find_if(res.notes.begin(), res.notes.end(),
                         [](const std::string& n) { return n.find("'gone' dropped") != std::string::npos; }),
            res.notes.end());

  // numbers: cut (no mask) == original under the expert mask; and the mask changes the dense numbers
  const std::vector<uint32_t> ids = {18, 18, 5, 36, 29, 13, 40, 5, 17, 6, 28, 25};
  const auto want = logits_of(masked, "task", ids), got = logits_of(cut, "off", ids),
             dense = logits_of(masked, "off", ids);
  EXPECT_LE(rel_diff(want, got), 1e-5);
  EXPECT_GT(rel_diff(want, dense), 1e-3) << "the mask must change the logits for this test to mean anything";
  // the cut under its renumbered 'task' mask is the same model again
  EXPECT_LE(rel_diff(want, logits_of(cut, "task", ids)), 1e-5);
  // the runtime honours the mask: masked experts are never selected
  const MoeStats sm = stats_of(masked, kText, "task");
  for (uint32_t l = 0; l < 2; ++l)
    for (uint32_t e = 0; e < 4; ++e)
      EXPECT_EQ(sm.layers.at(l).count[e] > 0, std::count(keep.at(l).begin(), keep.at(l).end(), e) > 0)
          << "layer " << l << " expert " << e;
}

// Text whose routing only uses the kept experts: the cut (cover 1 of that text's weight drops
// exactly the unused experts) gives the dense model's logits on it.
TEST(MoeDefrag, TextRoutedOnlyToKeptExpertsKeepsItsLogits) {
  TempDir d;
  const std::string f = write_case(d, "qwen3_moe");
  cmf::Reader r = cmf::Reader::open(f);
  runtime::LoadOptions lo;
  lo.exact = true;
  lo.task = "off";
  auto lm = runtime::load_model(f, lo);
  // the first 3-token text (ids from a fixed walk) that leaves an expert unused in some layer
  Chunk text;
  MoeStats s;
  for (uint32_t i = 0; i < 300 && text.empty(); ++i) {
    const Chunk c = {(i * 7) % 64, (i * 13 + 5) % 64, (i * 29 + 11) % 64};
    s = collect_moe_stats(*lm.model, std::vector<Chunk>{c});
    for (const auto& [l, x] : s.layers)
      if (std::count(x.count.begin(), x.count.end(), 0u) > 0) text = c;
  }
  ASSERT_FALSE(text.empty()) << "no 3-token text leaves an expert unused";
  const auto keep = moe_selection(r, s, MoeStatistic::Weight, 1.0);
  size_t dropped = 0;
  for (const auto& [l, k] : keep) dropped += 4 - k.size();
  EXPECT_GT(dropped, 0u);
  const std::string cut = d / "cut.cmf";
  moe_defrag_file(r, cut, keep, &s, nlohmann::json::object(), false);
  EXPECT_TRUE(cmf::Reader::open(cut).verify().empty());
  const std::vector<uint32_t> ids(text.begin(), text.end());
  EXPECT_LE(rel_diff(logits_of(f, "off", ids), logits_of(cut, "off", ids)), 1e-5);
}

// qwen2_moe (shared expert, no top-k renormalization): the cut loads and runs; an empty keep set
// and a non-MoE layer are refused naming the layer; nothing is left behind.
TEST(MoeDefrag, SharedExpertModelAndBadInput) {
  TempDir d;
  const std::string f = write_case(d, "qwen2_moe");
  cmf::Reader r = cmf::Reader::open(f);
  const std::map<uint32_t, std::vector<uint32_t>> keep = {{0, {0, 2, 3}}};
  const std::string cut = d / "cut.cmf";
  const auto res = moe_defrag_file(r, cut, keep, nullptr, nlohmann::json::object(), false);
  EXPECT_EQ(res.kept, (std::vector<uint32_t>{3, 4}));
  cmf::Reader rc = cmf::Reader::open(cut);
  EXPECT_TRUE(rc.verify().empty());
  EXPECT_NE(rc.find("model.layers.0.mlp.shared_expert.gate_proj.weight"), nullptr);
  const std::vector<uint32_t> ids = {44, 6, 42, 34, 1, 58};
  const auto a = logits_of(f, "off", ids), b = logits_of(cut, "off", ids);
  for (float x : b) ASSERT_TRUE(std::isfinite(x));
  EXPECT_GT(rel_diff(a, b), 0.0);  // the softmax denominator changed (not renormalized)
  auto e = test::error_of([&] { moe_defrag_file(r, d / "e.cmf", {{1, {}}}, nullptr, {}, false); });
  ASSERT_TRUE(e);
  EXPECT_NE(std::string(e->what()).find("layer 1"), std::string::npos) << e->what();
  e = test::error_of([&] { moe_defrag_file(r, d / "e.cmf", {{0, {1, 7}}}, nullptr, {}, false); });
  ASSERT_TRUE(e);
  EXPECT_FALSE(fs::exists(d / "e.cmf"));
}

// Phase A of compile differentiates dense SwiGLU FFNs only: a MoE layer and a non-SiLU activation
// are refused, naming the layer.
TEST(MoeCompile, PhaseARefusesMoeAndNonSiluNamingTheLayer) {
  for (const std::string fam : {"qwen3_moe", "gemma"}) {
    auto c = model::test::load_case(fam);
    ASSERT_TRUE(c) << fam;
    auto m = model::Model::bind(c->arch, c->src);
    const auto e = test::error_of([&] { check_compilable(*m); });
    ASSERT_TRUE(e) << fam;
    const std::string msg = e->what();
    EXPECT_NE(msg.find("layer 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fam == "gemma" ? "not SiLU" : "mixture-of-experts"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace cortiq::specialize
