// One request can only fail itself (issue 27): the generation engine behind `cortiq serve` ends a
// sequence whose forward pass, sampling or detokenization throws with an "error" finish naming the
// cause, while every other sequence of the same step finishes exactly as it would alone; and the
// request that killed the server (a logit_bias that pushes byte-fallback pieces into an invalid
// UTF-8 run) completes with the text the whole-sequence decode gives.
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/session.h"
#include "shell.h"
#include "support/engine_jobs.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace fs = std::filesystem;
using cortiq::runtime::Job;
using cortiq::runtime::StepItem;
using cortiq::test::Collected;
using cortiq::test::make_job;
using cortiq::test::wait_done;

namespace {

class EngineFaults : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path hf = fs::path(CORTIQ_SOURCE_DIR) / "models" / "stories260K";
    if (!fs::exists(hf / "model.safetensors")) return;
    dir_ = fs::temp_directory_path() / ("cortiq_faults_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    model_ = (dir_ / "s.cmf").string();
    int rc = 0;
    const std::string out = cortiq::test::sh(
        std::string(CORTIQ_CLI_PATH) + " convert " + hf.string() + " -o " + model_ + " --quant f32 2>&1",
        &rc);
    if (rc != 0) {
      std::fprintf(stderr, "convert failed: %s\n", out.c_str());
      model_.clear();
    }
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (model_.empty()) GTEST_SKIP() << "models/stories260K missing or not convertible";
  }
  static inline fs::path dir_;
  static inline std::string model_;
};

// Throws for the sequence whose prompt is `poison` once its cache holds `at` positions (mid-way
// through its generation), in the batched step and when run alone.
class PoisonBackend : public cortiq::runtime::StepBackend {
 public:
  PoisonBackend(cortiq::model::Model& m, std::vector<uint32_t> poison, size_t at)
      : inner_(m), poison_(std::move(poison)), at_(at) {}
  void run(std::span<StepItem> items) override {
    for (const auto& it : items) {
      // The poisoned prompt's prefill: its tokens after what the slot's prompt cache kept (a slot
      // that served "Once upon a time" before keeps the BOS, so the prefill is the prompt's tail).
      const size_t kept = it.kv->size();
      if (kept < poison_.size() && it.tokens.size() == poison_.size() - kept &&
          std::equal(it.tokens.begin(), it.tokens.end(), poison_.begin() + static_cast<std::ptrdiff_t>(kept)))
        victim_ = it.kv;
      if (it.kv == victim_ && it.kv->size() >= at_)
        cortiq::fail(cortiq::ErrorKind::InvalidArgument, "injected fault at position {}", it.kv->size());
    }
    ++steps_;
    inner_.run(items);
  }
  size_t steps_ = 0;

 private:
  cortiq::runtime::BatchedBackend inner_;
  std::vector<uint32_t> poison_;
  size_t at_;
  const cortiq::model::KvCache* victim_ = nullptr;
};

TEST_F(EngineFaults, AFailingSequenceEndsAloneAndTheOthersAreUnchanged) {
  auto lm = cortiq::runtime::load_model(model_, {});
  const std::vector<std::string> prompts = {"Once upon a time", "The cat", "Lily wanted"};
  std::vector<std::string> want;
  for (const auto& p : prompts) {
    cortiq::runtime::Session s(lm);
    cortiq::runtime::GenerateParams gp;
    gp.max_tokens = 30;
    gp.sampler = cortiq::runtime::SamplerParams::greedy();
    want.push_back(s.generate(lm.encode_raw(p), gp).text);
  }
  const auto poison = lm.encode_raw(prompts[1]);
  cortiq::runtime::Engine eng(lm, {3, 0},
                              std::make_unique<PoisonBackend>(*lm.model, poison, poison.size() + 5));
  std::vector<std::shared_ptr<Collected>> got;
  for (const auto& p : prompts) {
    got.push_back(std::make_shared<Collected>());
    ASSERT_TRUE(eng.submit(make_job(lm, p, 30, got.back(), 0)));
  }
  for (auto& r : got) wait_done(*r);
  EXPECT_EQ(got[0]->text, want[0]);
  EXPECT_EQ(got[0]->finish, "length");
  EXPECT_EQ(got[2]->text, want[2]);
  EXPECT_EQ(got[2]->finish, "length");
  EXPECT_EQ(got[1]->finish, "error");
  EXPECT_NE(got[1]->error.find("injected fault at position"), std::string::npos) << got[1]->error;
  EXPECT_EQ(want[1].compare(0, got[1]->text.size(), got[1]->text), 0)
      << "what it sent before is its greedy text";

  // The engine keeps serving.
  auto again = std::make_shared<Collected>();
  ASSERT_TRUE(eng.submit(make_job(lm, prompts[0], 30, again, 0)));
  wait_done(*again);
  EXPECT_EQ(again->text, want[0]);
}

// The request of issue 27 that killed the server: logit_bias on "<0x41>" ("A"), "<0xA3>" and a
// merge piece at temperature 1.5 makes runs of byte pieces that are not UTF-8, whose whole decode
// rewrites the "A" already decoded into U+FFFD. The engine finishes it, and the text equals the
// decode of prompt + output with the prompt's text cut off (the IncrementalDecoder rule).
TEST_F(EngineFaults, ByteFallbackRewriteCompletesWithTheWholeDecode) {
  auto lm = cortiq::runtime::load_model(model_, {});
  ASSERT_TRUE(lm.tokenizer);
  cortiq::runtime::Engine eng(lm, {2, 0});
  size_t fffd = 0;
  for (uint64_t seed : {2u, 3u, 4u, 5u}) {
    auto r = std::make_shared<Collected>();
    auto j = make_job(lm, "Once upon a time", 40, r, 0);
    j->sampler.temperature = 1.5f;
    j->sampler.top_k = 0;
    j->sampler.top_p = 1.0f;
    j->sampler.min_p = 0.0f;
    j->sampler.seed = seed;
    j->logit_bias = {{68, 100.0f}, {166, 100.0f}, {265, 80.0f}};
    ASSERT_TRUE(eng.submit(j));
    wait_done(*r);
    EXPECT_EQ(r->finish, "length") << r->error;
    ASSERT_EQ(r->ids.size(), 40u);
    std::vector<uint32_t> all = j->prompt;
    const std::string head = lm.tokenizer->decode(all, true);
    all.insert(all.end(), r->ids.begin(), r->ids.end());
    const std::string whole = lm.tokenizer->decode(all, true);
    ASSERT_EQ(whole.compare(0, head.size(), head), 0);
    EXPECT_EQ(r->text, whole.substr(head.size())) << "seed " << seed;
    for (size_t at = r->text.find("\xEF\xBF\xBD"); at != std::string::npos;
         at = r->text.find("\xEF\xBF\xBD", at + 1))
      ++fffd;
  }
  EXPECT_GT(fffd, 0u) << "the biased draws must produce invalid byte runs";
}

// Exactly tied logits: greedy takes one of them, and top_logprobs lists the chosen one first (then
// the other tied ids, lowest first), so "greedy takes the first entry" holds under ties too.
class TiedBackend : public cortiq::runtime::StepBackend {
 public:
  void run(std::span<StepItem> items) override {
    for (auto& it : items) {
      std::fill(it.logits.begin(), it.logits.end(), -10.0f);
      for (uint32_t id : {300u, 301u, 305u}) it.logits[id] = 2.0f;
      it.logits[200] = 1.0f;
      it.kv->set_size(it.kv->size() + it.tokens.size());
    }
  }
};

TEST_F(EngineFaults, TiedLogitsListTheChosenTokenFirst) {
  auto lm = cortiq::runtime::load_model(model_, {});
  cortiq::runtime::Engine eng(lm, {1, 0}, std::make_unique<TiedBackend>());
  auto r = std::make_shared<Collected>();
  auto j = make_job(lm, "Once upon a time", 3, r, 0);
  j->top_logprobs = 4;
  std::vector<std::vector<uint32_t>> tops;
  std::vector<uint32_t> chosen;
  j->on_text = [&, r](std::string_view, std::vector<cortiq::runtime::TokenLogprob>&& lps) {
    std::lock_guard<std::mutex> g(r->mu);
    for (const auto& lp : lps) {
      chosen.push_back(lp.id);
      tops.emplace_back();
      for (const auto& [id, v] : lp.top) tops.back().push_back(id);
    }
  };
  ASSERT_TRUE(eng.submit(j));
  wait_done(*r);
  ASSERT_EQ(chosen.size(), 3u);
  for (size_t i = 0; i < chosen.size(); ++i) {
    ASSERT_EQ(tops[i].size(), 4u);
    EXPECT_EQ(tops[i][0], chosen[i]);
    std::vector<uint32_t> rest;
    for (uint32_t id : {300u, 301u, 305u})
      if (id != chosen[i]) rest.push_back(id);
    EXPECT_EQ(std::vector<uint32_t>(tops[i].begin() + 1, tops[i].begin() + 3), rest);
    EXPECT_EQ(tops[i][3], 200u);
  }
}

}  // namespace
