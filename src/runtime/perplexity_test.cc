// Perplexity through the engine (runtime/perplexity.h) equals the procedure computed here from
// Model::forward alone, bit for bit, for any number of parallel slots and any batch: chunks run as
// prompt-scoring jobs, several in one batched step, and the forward contract makes each position's
// logits the same in every step shape.
#include "runtime/perplexity.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "cmf/writer.h"
#include "model/test_support.h"
#include "util/error.h"

namespace cortiq::runtime {
namespace {

namespace fs = std::filesystem;

class PplEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cortiq_ppl_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // the llama forward-parity checkpoint with q8_row matrices: int8 activations, the fast path
    const auto c = model::test::load_case("llama", quant::DType::Q8Row);
    ASSERT_NE(c, nullptr);
    std::vector<cmf::TensorData> td;
    for (const auto& n : c->src.names()) {
      const auto w = *c->src.find(n);
      td.push_back({n, w.dtype, w.shape, std::vector<uint8_t>(w.payload.begin(), w.payload.end())});
    }
    cmf::Header h;
    h.arch = c->arch;
    h.quant_type = cmf::QuantType::Q8Row;
    h.provenance = {{"tool", "perplexity_test"}};
    path_ = (dir_ / "llama.cmf").string();
    cmf::write_file(path_, h, td);
    std::mt19937 g(7);
    ids_.resize(7 * 16 + 5);  // 7 chunks of 16 and a remainder
    for (auto& id : ids_) id = static_cast<uint32_t>(g() % c->arch.vocab_size);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The oracle: llama.cpp's chunked procedure straight on Model::forward, one chunk at a time.
  static PplResult reference(model::Model& m, const model::Variant* var, std::span<const uint32_t> ids,
                             size_t n_ctx, uint32_t bos) {
    double s = 0, s2 = 0;
    size_t n = 0;
    std::vector<float> logits(n_ctx * m.vocab_size());
    for (size_t c = 0; c < ids.size() / n_ctx; ++c) {
      std::vector<uint32_t> chunk(ids.begin() + c * n_ctx, ids.begin() + (c + 1) * n_ctx);
      chunk[0] = bos;
      model::KvCache kv(m.arch(), n_ctx, false);
      m.forward(chunk, kv, logits, model::LogitsMode::All, var);
      for (size_t j = n_ctx / 2; j + 1 < n_ctx; ++j) {
        const double x = token_nll(std::span<const float>(logits).subspan(j * m.vocab_size(), m.vocab_size()),
                                   chunk[j + 1]);
        s += x;
        s2 += x * x;
        ++n;
      }
    }
    PplResult r;
    r.tokens_scored = n;
    r.mean_nll = s / static_cast<double>(n);
    r.ppl = std::exp(r.mean_nll);
    const double var2 = s2 / static_cast<double>(n) - r.mean_nll * r.mean_nll;
    r.ppl_stderr = r.ppl * std::sqrt(var2 / static_cast<double>(n - 1));
    return r;
  }

  fs::path dir_;
  std::string path_;
  std::vector<uint32_t> ids_;
};

TEST_F(PplEngine, ChunkedEqualsTheForwardOracleForEverySlotCountAndBatch) {
  LoadOptions lo;
  lo.ctx = 16;
  lo.threads = 2;
  LoadedModel lm = load_model(path_, lo);
  const PplResult want = reference(*lm.model, nullptr, ids_, 16, 1);
  EXPECT_EQ(want.tokens_scored, 7u * 7u);
  for (size_t parallel : {1, 3, 4, 8})
    for (size_t batch : {0, 5, 8}) {
      size_t progressed = 0;
      PplOptions o{.batch = batch, .parallel = parallel, .progress = [&](size_t k) { progressed += k; }};
      const PplResult r = perplexity_chunked(lm, ids_, 16, 1u, o);
      EXPECT_EQ(r.ppl, want.ppl) << parallel << " " << batch;  // bit for bit
      EXPECT_EQ(r.ppl_stderr, want.ppl_stderr) << parallel << " " << batch;
      EXPECT_EQ(r.mean_nll, want.mean_nll);
      EXPECT_EQ(r.tokens_scored, want.tokens_scored);
      EXPECT_EQ(r.chunks, 7u);
      EXPECT_EQ(progressed, 7u * 16u);  // every position of every chunk, also those without logits
    }
}

TEST_F(PplEngine, PrefixModeScoresEveryNextToken) {
  LoadedModel lm = load_model(path_, LoadOptions{});
  const std::span<const uint32_t> ids(ids_.data(), 40);
  model::KvCache kv(lm.model->arch(), ids.size(), false);
  std::vector<float> logits(ids.size() * lm.model->vocab_size());
  lm.model->forward(ids, kv, logits, model::LogitsMode::All);
  double s = 0;
  const size_t V = lm.model->vocab_size();
  for (size_t j = 0; j + 1 < ids.size(); ++j)
    s += token_nll(std::span<const float>(logits).subspan(j * V, V), ids[j + 1]);
  for (size_t batch : {0, 7}) {
    PplOptions o;
    o.batch = batch;
    const PplResult r = perplexity_prefix(lm, ids, o);
    EXPECT_EQ(r.tokens_scored, ids.size() - 1);
    EXPECT_EQ(r.mean_nll, s / static_cast<double>(ids.size() - 1)) << batch;
  }
}

TEST_F(PplEngine, BadArgumentsAreRefused) {
  LoadOptions lo;
  lo.ctx = 16;
  LoadedModel lm = load_model(path_, lo);
  EXPECT_THROW(perplexity_chunked(lm, std::span<const uint32_t>(ids_.data(), 10), 16, 1u), Error);
  EXPECT_THROW(perplexity_chunked(lm, ids_, 3, 1u), Error);
  PplOptions none;
  none.parallel = 0;
  EXPECT_THROW(perplexity_chunked(lm, ids_, 16, 1u, none), Error);
  EXPECT_THROW(perplexity_prefix(lm, std::span<const uint32_t>(ids_.data(), 1)), Error);
}

}  // namespace
}  // namespace cortiq::runtime
