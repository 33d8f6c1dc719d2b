// Skills at run time: a tiny llama file with three skills (an overlay equal to the backbone's
// tensor, a scaled layer-1 down projection, and a skill touching two layers). Oracles: the backbone
// (an identical overlay must give identical logits), a model bound from scratch on the replaced
// tensors (bit for bit), a blend recomputed here in f32, and separate runs for a mixed-skill batch.
#include "runtime/skills.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "cmf/tensor_names.h"
#include "cmf/writer.h"
#include "model/test_support.h"
#include "runtime/engine.h"
#include "runtime/session.h"
#include "util/error.h"

namespace cortiq::runtime {
namespace {

namespace fs = std::filesystem;
using R = cmf::TensorRole;

std::vector<float> decoded(const model::TensorSource& src, const std::string& name) {
  auto w = src.find(name);
  std::vector<float> v(w->numel());
  kernels::decode_rows(*w, 0, w->rows(), v.data());
  return v;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<float> scaled(std::vector<float> v, float k) {
  for (float& x : v) x *= k;
  return v;
}

class SkillFile : public ::testing::Test {
 protected:
  void SetUp() override {
    c_ = model::test::load_case("llama");
    ASSERT_TRUE(c_);
    ASSERT_GE(c_->arch.num_layers, 2u);
    dir_ = fs::temp_directory_path() / ("cortiq_skills_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    down1_ = cmf::tensor_name(R::FfnDown, 1);
    up0_ = cmf::tensor_name(R::FfnUp, 0);
    std::vector<cmf::TensorData> td;
    for (const auto& n : c_->src.names()) {
      const auto w = *c_->src.find(n);
      td.push_back({n, w.dtype, w.shape, std::vector<uint8_t>(w.payload.begin(), w.payload.end())});
    }
    const auto d = *c_->src.find(down1_);
    const auto u = *c_->src.find(up0_);
    auto add = [&](const std::string& id, const std::string& name, const std::vector<uint64_t>& shape,
                   const std::vector<float>& v) {
      td.push_back({cmf::skill_tensor_name(id, name), quant::DType::F32, shape, f32_bytes(v)});
    };
    add("same", down1_, d.shape, decoded(c_->src, down1_));
    add("a", down1_, d.shape, scaled(decoded(c_->src, down1_), -1.5f));
    add("b", down1_, d.shape, scaled(decoded(c_->src, down1_), 0.5f));
    add("b", up0_, u.shape, scaled(decoded(c_->src, up0_), 0.8f));
    cmf::Header h;
    h.arch = c_->arch;
    h.quant_type = cmf::QuantType::F32;
    for (const char* id : {"same", "a", "b"}) {
      cmf::SkillRecord r;
      r.id = id;
      r.layers = std::string(id) == "b" ? std::vector<uint32_t>{0, 1} : std::vector<uint32_t>{1};
      h.skills.push_back(r);
    }
    path_ = (dir_ / "skills.cmf").string();
    cmf::write_file(path_, h, td);
    // A SKILL_FILE: the same with a base_dir_hash on a record.
    h.skills[1].base_dir_hash = "0123456789abcdef";
    skill_file_ = (dir_ / "skill_file.cmf").string();
    cmf::write_file(skill_file_, h, td);
  }
  void TearDown() override { fs::remove_all(dir_); }

  LoadedModel load(const std::string& skill, const std::string& blend = "") {
    LoadOptions o;
    o.exact = true;
    o.skill = skill;
    o.blend = blend;
    return load_model(path_, o);
  }
  std::vector<float> logits(model::Model& m, const model::Variant* v = nullptr) {
    model::KvCache kv(m.arch(), 64);
    std::vector<float> out(m.vocab_size());
    m.forward(c_->prompt, kv, out, model::LogitsMode::Last, v);
    return out;
  }
  /// A model over the backbone with `replace` swapped in, bound from scratch (f32 everywhere).
  std::vector<float> oracle(const std::map<std::string, std::vector<float>>& replace) {
    model::MemoryTensorSource src;
    for (const auto& n : c_->src.names()) {
      auto it = replace.find(n);
      src.add_f32(n, c_->src.find(n)->shape, it != replace.end() ? it->second : decoded(c_->src, n));
    }
    auto m = model::Model::bind(c_->arch, src,
                                {1, kernels::KernelConfig{kernels::MatmulMode::Exact, kernels::simd_tier()}});
    return logits(*m);
  }

  std::unique_ptr<model::test::Case> c_;
  fs::path dir_;
  std::string path_, skill_file_, down1_, up0_;
};

TEST_F(SkillFile, OverlaysChangeOutputsOnlyWhereTheyDifferAndShareUntouchedLayers) {
  LoadedModel base = load("none");
  const auto want_base = logits(*base.model);
  EXPECT_EQ(base.skill, "");

  LoadedModel same = load("same");
  EXPECT_EQ(same.skill, "same");
  EXPECT_EQ(logits(*same.model), want_base);  // an overlay equal to the backbone tensor

  LoadedModel a = load("a");
  const auto got_a = logits(*a.model);
  EXPECT_NE(got_a, want_base);
  EXPECT_EQ(got_a, oracle({{down1_, scaled(decoded(c_->src, down1_), -1.5f)}}));
  // Zero copy, shared: layer 0 is the backbone's object, layer 1 rebound; the tensor the skill
  // replaces is read in place from the file.
  const auto& w = *a.model->weights();
  EXPECT_EQ(w.layers[0].get(), a.backbone->layers[0].get());
  EXPECT_NE(w.layers[1].get(), a.backbone->layers[1].get());
  for (size_t l = 2; l < w.layers.size(); ++l) EXPECT_EQ(w.layers[l].get(), a.backbone->layers[l].get());
  const cmf::TensorInfo* t = a.reader->find(cmf::skill_tensor_name("a", down1_));
  ASSERT_TRUE(t);
  EXPECT_EQ(w.layers[1]->ffn.down.payload.data(), a.reader->payload(*t).data());

  // Switching back to the backbone in place gives its logits again.
  bind_skill(a, "none", false);
  EXPECT_EQ(logits(*a.model), want_base);
  EXPECT_EQ(a.model->weights(), a.backbone);
}

TEST_F(SkillFile, BlendsNormalizeAndEqualTheirF32Recomputation) {
  LoadedModel a = load("a");
  LoadedModel one = load("", "a:1,b:0");
  EXPECT_EQ(one.skill, "a");
  EXPECT_EQ(logits(*one.model), logits(*a.model));

  LoadedModel bl = load("", "a:7,b:3");  // normalized to 0.7, 0.3
  EXPECT_EQ(bl.skill, "blend");
  ASSERT_EQ(bl.blend.size(), 2u);
  EXPECT_DOUBLE_EQ(bl.blend[0].weight, 0.7);
  EXPECT_EQ(describe_blend(bl.blend), "a 0.70, b 0.30");
  const float wa = static_cast<float>(7.0 / 10.0), wb = static_cast<float>(3.0 / 10.0);
  const auto d = decoded(c_->src, down1_), u = decoded(c_->src, up0_);
  std::vector<float> down(d.size()), up(u.size());
  for (size_t i = 0; i < d.size(); ++i) down[i] = wa * (-1.5f * d[i]) + wb * (0.5f * d[i]);
  for (size_t i = 0; i < u.size(); ++i) up[i] = wa * u[i] + wb * (0.8f * u[i]);  // a lacks up0: backbone
  EXPECT_EQ(logits(*bl.model), oracle({{down1_, down}, {up0_, up}}));
  // Only the touched tensors are materialized (the layers' other tensors are the file's).
  EXPECT_EQ(bl.overlay->names(), (std::vector<std::string>{up0_, down1_}));
}

TEST_F(SkillFile, BadChoicesAreRefusedNamingTheKnownSkills) {
  try {
    load("nope");
    FAIL() << "unknown skill accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("same, a, b"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load("", "a:-1,b:2"), Error);
  EXPECT_THROW(load("", "a:0,b:0"), Error);
  EXPECT_THROW(load("", "a:0.5,zz:0.5"), Error);
  EXPECT_THROW(load("", "a"), Error);
  EXPECT_THROW(load("", "a:x"), Error);
  EXPECT_THROW(load("", "a:1,a:2"), Error);
  EXPECT_THROW(load("a", "a:1"), Error);
  EXPECT_EQ(parse_blend("a:0.7,b:0.3").size(), 2u);

  LoadOptions o;
  try {
    load_model(skill_file_, o);
    FAIL() << "SKILL_FILE ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("skill apply"), std::string::npos) << e.what();
  }
}

TEST_F(SkillFile, MixedSkillBatchEqualsSeparateRunsBitForBit) {
  LoadedModel lm = load("none");
  auto a = make_skill_binding(lm, "a");
  auto b = make_skill_binding(lm, "b");
  EXPECT_EQ(a->weights->layers[0].get(), lm.backbone->layers[0].get());
  // Separately: each skill alone on its own model.
  std::vector<std::vector<float>> want;
  for (const char* id : {"none", "a", "b"}) {
    LoadedModel x = load(id);
    want.push_back(logits(*x.model));
  }
  // One forward_batch with three sequences: backbone, a, b (prefill), then a decode step.
  const size_t V = lm.model->vocab_size();
  std::vector<model::KvCache> kv;
  for (int i = 0; i < 3; ++i) kv.emplace_back(c_->arch, 64);
  std::vector<std::vector<float>> out(3, std::vector<float>(V));
  const model::Weights* ws[3] = {nullptr, a->weights.get(), b->weights.get()};
  std::vector<model::SeqStep> steps;
  for (int i = 0; i < 3; ++i) steps.push_back({c_->prompt, &kv[i], out[i], false, nullptr, ws[i]});
  lm.model->forward_batch(steps);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], want[i]) << i;

  // The engine: three jobs of different skills decoding together equal three runs alone.
  auto run = [&](size_t parallel, const std::vector<std::shared_ptr<const SkillBinding>>& skills) {
    Engine eng(lm, EngineOptions{parallel, 8});
    std::vector<std::vector<uint32_t>> got(skills.size());
    std::vector<std::shared_ptr<Job>> jobs;
    std::mutex mu;
    std::condition_variable cv;
    size_t done = 0;
    for (size_t i = 0; i < skills.size(); ++i) {
      auto j = std::make_shared<Job>();
      j->prompt = c_->prompt;
      j->sampler = SamplerParams::greedy();
      j->max_tokens = 6;
      j->skill = skills[i];
      j->on_token = [&got, i](uint32_t id) { got[i].push_back(id); };
      j->on_done = [&](const std::string&, size_t, const std::string&) {
        std::lock_guard<std::mutex> g(mu);
        ++done;
        cv.notify_all();
      };
      jobs.push_back(j);
    }
    for (auto& j : jobs) EXPECT_TRUE(eng.submit(j));
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done == jobs.size(); });
    return got;
  };
  const auto together = run(3, {nullptr, a, b});
  const auto alone = run(1, {nullptr, a, b});
  EXPECT_EQ(together, alone);
  EXPECT_NE(together[0], together[1]);  // the skill changed the greedy continuation
}

}  // namespace
}  // namespace cortiq::runtime
