// Tests of the pure parts of `cortiq bench` (runtime/bench.h): statistics, weight accounting
// (hand-counted bytes of a tiny llama-shaped model), the roofline arithmetic and the JSON /
// markdown shape of a real (tiny, few-token) run on a .cmf written in a temp dir.
#include "runtime/bench.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "cmf/writer.h"
#include "kernels/kernels.h"
#include "model/test_support.h"
#include "quant/codec.h"
#include "util/error.h"

namespace cortiq::runtime::bench {
namespace {

namespace fs = std::filesystem;
using quant::DType;

TEST(BenchStats, MeanAndSampleSd) {
  const std::vector<double> xs{2, 4, 4, 4, 5, 5, 7, 9};  // mean 5, Σ(x−5)² = 32
  const Stats s = mean_sd(xs);
  EXPECT_EQ(s.n, 8u);
  EXPECT_DOUBLE_EQ(s.mean, 5.0);
  EXPECT_DOUBLE_EQ(s.sd, std::sqrt(32.0 / 7.0));  // n−1 divisor (llama-bench)
}

TEST(BenchStats, DegenerateInputs) {
  const Stats e = mean_sd(std::vector<double>{});
  EXPECT_EQ(e.n, 0u);
  EXPECT_EQ(e.mean, 0.0);
  EXPECT_EQ(e.sd, 0.0);
  const Stats one = mean_sd(std::vector<double>{3.5});
  EXPECT_EQ(one.mean, 3.5);
  EXPECT_EQ(one.sd, 0.0);
  // Large offset: the two-pass form keeps the small spread exact.
  const Stats big = mean_sd(std::vector<double>{1e9 + 1, 1e9 + 3});
  EXPECT_DOUBLE_EQ(big.mean, 1e9 + 2);
  EXPECT_DOUBLE_EQ(big.sd, std::sqrt(2.0));
}

// Tiny llama-shaped arch: hidden 8, 2 layers, 2 heads / 1 KV head of dim 4, FFN 12, vocab 16.
cmf::ModelArch tiny_arch(bool tied) {
  return model::test::llama_arch({.hidden_size = 8,
                                  .intermediate_size = 12,
                                  .num_layers = 2,
                                  .num_attention_heads = 2,
                                  .num_kv_heads = 1,
                                  .head_dim = 4,
                                  .vocab_size = 16,
                                  .max_position_embeddings = 64,
                                  .tie_word_embeddings = tied});
}

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 0.2f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// f32 everywhere except the FFN matrices, which are q8_row. With `head`, an f16 lm_head.
model::MemoryTensorSource tiny_source(bool head) {
  model::MemoryTensorSource s;
  uint32_t seed = 1;
  auto f32 = [&](const std::string& n, std::vector<uint64_t> shape) {
    uint64_t k = 1;
    for (auto d : shape) k *= d;
    std::vector<float> v = randn(k, seed++);
    if (shape.size() == 1)
      for (auto& x : v) x += 1.0f;  // norms near 1
    s.add_f32(n, shape, v);
  };
  auto enc = [&](const std::string& n, DType t, std::vector<uint64_t> shape) {
    const std::vector<float> v = randn(shape[0] * shape[1], seed++);
    s.add(n, t, shape, quant::encode(t, shape, v));
  };
  f32("model.embed_tokens.weight", {16, 8});
  f32("model.norm.weight", {8});
  if (head) enc("lm_head.weight", DType::F16, {16, 8});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    f32(p + "input_layernorm.weight", {8});
    f32(p + "post_attention_layernorm.weight", {8});
    f32(p + "self_attn.q_proj.weight", {8, 8});
    f32(p + "self_attn.k_proj.weight", {4, 8});
    f32(p + "self_attn.v_proj.weight", {4, 8});
    f32(p + "self_attn.o_proj.weight", {8, 8});
    enc(p + "mlp.gate_proj.weight", DType::Q8Row, {12, 8});
    enc(p + "mlp.up_proj.weight", DType::Q8Row, {12, 8});
    enc(p + "mlp.down_proj.weight", DType::Q8Row, {8, 12});
  }
  return s;
}

// Hand count. f32 per layer: norms 2·8·4 = 64, q 256, k 128, v 128, o 256 → 832.
// q8_row [r, c] = r·c int8 codes + r f16 scales (quant::expected_nbytes): gate/up 12·8+12·2 = 120
// each, down 8·12+8·2 = 112 → 352. Layer = 1184, two layers 2368. norm 32, embedding 16·8·4 = 512.
constexpr uint64_t kLayers = 2 * (64 + 256 + 128 + 128 + 256 + 120 + 120 + 112);

TEST(BenchAccounting, TiedHeadIsTheEmbeddingCountedOnce) {
  const auto src = tiny_source(false);
  const auto ts = tensor_stats(src);
  const auto q8 = std::find_if(ts.begin(), ts.end(),
                               [](auto& t) { return t.name == "model.layers.0.mlp.up_proj.weight"; });
  ASSERT_NE(q8, ts.end());
  EXPECT_EQ(q8->bytes, 120u);  // the codec's payload length agrees with the hand count
  const WeightAccounting w = account_weights(tiny_arch(true), ts);
  EXPECT_EQ(kLayers, 2368u);
  EXPECT_EQ(w.total_bytes, kLayers + 32 + 512);
  EXPECT_EQ(w.decode_bytes_per_token, kLayers + 32 + 512);  // whole embedding as head, no extra row
  EXPECT_EQ(w.params, 2 * (8 + 8 + 64 + 32 + 32 + 64 + 96 * 3) + 8 + 128u);
  EXPECT_EQ(w.bytes_by_dtype.at("q8_row"), 2 * 352u);
  EXPECT_EQ(w.bytes_by_dtype.at("f32"), 2 * 832u + 32 + 512);
  EXPECT_EQ(w.params_by_dtype.at("q8_row"), 2 * 96 * 3u);
  EXPECT_EQ(w.bytes_by_dtype.size(), 2u);
}

TEST(BenchAccounting, UntiedHeadPlusOneEmbeddingRowAndExcludedTensors) {
  auto src = tiny_source(true);
  // Not part of a decode step: an MTP block and a layer index past num_layers.
  src.add_f32("mtp.layers.0.mlp.up_proj.weight", {4, 8}, std::vector<float>(32, 0.5f));
  src.add_f32("model.layers.2.mlp.up_proj.weight", {4, 8}, std::vector<float>(32, 0.5f));
  const WeightAccounting w = account_weights(tiny_arch(false), tensor_stats(src));
  EXPECT_EQ(w.total_bytes, kLayers + 32 + 512 + 256 + 128 + 128);
  EXPECT_EQ(w.decode_bytes_per_token, kLayers + 32 + 256 + 512 / 16);  // f16 head + one f32 row
  EXPECT_EQ(w.bytes_by_dtype.at("f16"), 256u);
  // Same file declared tied but with a stored head: the stored head is what runs.
  EXPECT_EQ(account_weights(tiny_arch(true), tensor_stats(src)).decode_bytes_per_token,
            kLayers + 32 + 256 + 32);
}

TEST(BenchAccounting, MoeExpertsCountTheirExpectedShare) {
  cmf::ModelArch a = tiny_arch(true);
  a.moe = cmf::Moe{};
  a.moe->num_experts = 4;
  a.moe->top_k = 1;
  std::vector<TensorStat> ts;
  ts.push_back({"model.embed_tokens.weight", DType::F32, {16, 8}, 512});
  ts.push_back({"model.layers.0.mlp.gate.weight", DType::F32, {4, 8}, 128});
  for (int e = 0; e < 4; ++e)
    ts.push_back(
        {"model.layers.0.mlp.experts." + std::to_string(e) + ".up_proj.weight", DType::Q8Row, {12, 8}, 144});
  ts.push_back({"model.layers.1.mlp.shared_expert.up_proj.weight", DType::Q8Row, {12, 8}, 144});
  const WeightAccounting w = account_weights(a, ts);
  EXPECT_EQ(w.total_bytes, 512 + 128 + 4 * 144 + 144u);
  EXPECT_EQ(w.decode_bytes_per_token, 512 + 128 + 4 * 144 / 4 + 144u);
}

TEST(BenchRoofline, DerivedFields) {
  TestResult t;
  t.test = "tg4";
  t.n_gen = 4;
  t.threads = 1;
  t.samples_ns = {2e6, 4e6};  // 2000 and 1000 tok/s
  t.bandwidth_gbs = 10.0;
  finish_result(t, 1000000);  // 1 MB per token
  ASSERT_EQ(t.samples_ts.size(), 2u);
  EXPECT_DOUBLE_EQ(t.samples_ts[0], 2000.0);
  EXPECT_DOUBLE_EQ(t.samples_ts[1], 1000.0);
  EXPECT_DOUBLE_EQ(t.ts.mean, 1500.0);
  EXPECT_DOUBLE_EQ(t.ts.sd, std::sqrt(500.0 * 500.0 * 2));
  EXPECT_DOUBLE_EQ(t.ns.mean, 3e6);
  ASSERT_TRUE(t.roofline && t.bound_ts);
  EXPECT_DOUBLE_EQ(*t.bound_ts, 10000.0);  // 10 GB/s ÷ 1 MB
  EXPECT_DOUBLE_EQ(*t.roofline, 0.15);
  TestResult pp;
  pp.test = "pp8";
  pp.n_prompt = 8;
  pp.samples_ns = {1e9};
  pp.bandwidth_gbs = 10.0;
  finish_result(pp, 1000000);
  EXPECT_DOUBLE_EQ(pp.ts.mean, 8.0);
  EXPECT_FALSE(pp.roofline.has_value());
  // 4 sequences per step: 4·4 tokens per sample, the weights read once per step
  TestResult b4 = t;
  b4.n_seqs = 4;
  finish_result(b4, 1000000);
  EXPECT_DOUBLE_EQ(b4.samples_ts[0], 8000.0);
  EXPECT_DOUBLE_EQ(b4.ts.mean, 6000.0);
  EXPECT_DOUBLE_EQ(*b4.bound_ts, 40000.0);  // 4 × 10 GB/s ÷ 1 MB
  EXPECT_DOUBLE_EQ(*b4.roofline, 0.15);     // 1500 steps/s × 1 MB ÷ 10 GB/s
}

TEST(BenchRoofline, PairedBandwidthSamples) {
  // Each repetition against the bandwidth measured right before it: 2000 tok/s at 10 GB/s and
  // 1000 tok/s at 5 GB/s are both 20% of the bound, although the mean t/s (1500) against the mean
  // bandwidth (7.5 GB/s) gives 20% only by chance and against the first figure alone 15%.
  TestResult t;
  t.test = "tg4";
  t.n_gen = 4;
  t.samples_ns = {2e6, 4e6};  // 2000 and 1000 tok/s
  t.samples_bw_gbs = {10.0, 5.0};
  t.bandwidth_gbs = 10.0;     // the start's figure: replaced by the samples' mean
  finish_result(t, 1000000);  // 1 MB per token
  ASSERT_TRUE(t.roofline && t.bound_ts);
  EXPECT_DOUBLE_EQ(*t.roofline, 0.2);
  EXPECT_DOUBLE_EQ(t.roofline_sd, 0.0);
  EXPECT_DOUBLE_EQ(t.bandwidth_gbs, 7.5);
  EXPECT_DOUBLE_EQ(*t.bound_ts, 7500.0);
  // shares 0.2 and 0.1: mean 0.15, sample sd sqrt(2)·0.05
  t.samples_bw_gbs = {10.0, 10.0};
  finish_result(t, 1000000);
  EXPECT_DOUBLE_EQ(*t.roofline, 0.15);
  EXPECT_NEAR(t.roofline_sd, std::sqrt(2.0) * 0.05, 1e-12);
  EXPECT_TRUE(t.roofline_paired);
  // one bandwidth sample too few: the single figure is used, and the table shows no sd
  t.samples_bw_gbs = {10.0};
  t.bandwidth_gbs = 10.0;
  finish_result(t, 1000000);
  EXPECT_DOUBLE_EQ(*t.roofline, 0.15);
  EXPECT_DOUBLE_EQ(t.roofline_sd, 0.0);
  EXPECT_FALSE(t.roofline_paired);
  BenchReport r;
  r.results = {t};
  const std::string md = to_markdown(r);
  EXPECT_NE(md.find("| 15.0% |"), std::string::npos) << md;
  EXPECT_EQ(md.find("15.0 ±"), std::string::npos) << md;
}

TEST(BenchFormat, HumanUnits) {
  EXPECT_EQ(format_params(494032768), "494.03 M");
  EXPECT_EQ(format_params(1540000000), "1.54 B");
  EXPECT_EQ(format_params(999), "999");
  EXPECT_EQ(format_size(491400032), "468.64 MiB");
  EXPECT_EQ(format_size(3ull << 30), "3.00 GiB");
  EXPECT_EQ(format_size(100), "100 B");
}

TEST(BenchBandwidth, MeasuresAPositiveRateAndRejectsBadArgs) {
  kernels::ThreadPool pool(2);
  const Bandwidth b = measure_bandwidth(pool, 4u << 20, 2);
  EXPECT_EQ(b.buffer_bytes, 4u << 20);
  EXPECT_EQ(b.threads, 2u);
  EXPECT_GT(b.best_gbs, 0.0);
  EXPECT_GE(b.best_gbs, b.mean_gbs);
  EXPECT_THROW(measure_bandwidth(pool, 1000, 1), Error);
  EXPECT_THROW(measure_bandwidth(pool, 4u << 20, 0), Error);
  EXPECT_GE(default_bandwidth_buffer_bytes(), 256u << 20);
  EXPECT_LE(default_bandwidth_buffer_bytes(), uint64_t{1} << 30);  // held during the decode tests
}

class BenchRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cortiq_bench_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write_tiny() {
    const auto src = tiny_source(false);
    std::vector<cmf::TensorData> td;
    for (const auto& n : src.names()) {
      const auto w = *src.find(n);
      td.push_back({n, w.dtype, w.shape, std::vector<uint8_t>(w.payload.begin(), w.payload.end())});
    }
    cmf::Header h;
    h.arch = tiny_arch(true);
    h.quant_type = cmf::QuantType::F32;
    h.provenance = {{"tool", "bench_test"}};
    const std::string path = (dir_ / "tiny.cmf").string();
    cmf::write_file(path, h, td);
    return path;
  }
  fs::path dir_;
};

TEST_F(BenchRun, TinyModelJsonAndMarkdownShape) {
  const std::string path = write_tiny();
  BenchOptions o;
  o.n_prompt = 5;
  o.n_gen = 3;
  o.reps = 2;
  o.threads = {1, 2};
  o.bandwidth_bytes = 2u << 20;
  o.bandwidth_passes = 1;
  o.exact = true;
  std::vector<std::string> lines;
  const BenchReport r = run_bench(path, o, [&](const std::string& s) { lines.push_back(s); });
  EXPECT_EQ(r.arch_name, "llama");
  EXPECT_EQ(r.weights.decode_bytes_per_token, kLayers + 32 + 512);
  EXPECT_EQ(r.file_bytes, fs::file_size(path));
  EXPECT_TRUE(r.exact_requested);
  EXPECT_EQ(r.mode, "exact");
  EXPECT_EQ(kernels::matmul_mode(), kernels::MatmulMode::Fast);  // the model's, not the process's
  EXPECT_EQ(r.dtype_kernel.size(), 2u);
  ASSERT_EQ(r.bandwidth.size(), 2u);
  EXPECT_EQ(r.bandwidth[1].threads, 2u);
  ASSERT_EQ(r.results.size(), 4u);
  EXPECT_FALSE(lines.empty());

  const nlohmann::json j = to_json(r);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 4u);
  const char* tests[] = {"pp5", "tg3", "pp5", "tg3"};
  const size_t threads[] = {1, 1, 2, 2};
  for (size_t i = 0; i < 4; ++i) {
    const auto& o2 = j[i];
    EXPECT_EQ(o2.at("test"), tests[i]);
    EXPECT_EQ(o2.at("n_threads"), threads[i]);
    EXPECT_EQ(o2.at("n_prompt"), i % 2 == 0 ? 5u : 0u);
    EXPECT_EQ(o2.at("n_gen"), i % 2 == 0 ? 0u : 3u);
    EXPECT_EQ(o2.at("model_filename"), path);
    EXPECT_EQ(o2.at("model_size"), kLayers + 32 + 512);
    EXPECT_EQ(o2.at("decode_bytes_per_token"), kLayers + 32 + 512);
    EXPECT_EQ(o2.at("model_n_params"), r.weights.params);
    EXPECT_EQ(o2.at("dtype_bytes").at("q8_row"), 2 * 352u);
    EXPECT_EQ(o2.at("samples_ts").size(), 2u);
    EXPECT_EQ(o2.at("samples_ns").size(), 2u);
    EXPECT_GT(o2.at("avg_ts").get<double>(), 0.0);
    EXPECT_GT(o2.at("bandwidth_gbs").get<double>(), 0.0);
    EXPECT_EQ(o2.at("roofline").is_null(), i % 2 == 0);
    EXPECT_EQ(o2.at("roofline_sd").is_null(), i % 2 == 0);
    // a bandwidth sample before each tg repetition, none for pp
    EXPECT_EQ(o2.at("samples_bw_gbs").size(), i % 2 == 0 ? 0u : 2u);
    EXPECT_EQ(o2.at("exact"), true);
    EXPECT_EQ(o2.at("matmul_mode"), "exact");
    EXPECT_TRUE(o2.at("dtype_kernel").contains("q8_row"));
    EXPECT_TRUE(o2.contains("stddev_ts") && o2.contains("avg_ns") && o2.contains("stddev_ns"));
  }
  const std::string md = to_markdown(r);
  EXPECT_NE(md.find("| model | size | params | dtypes | threads | test | t/s |"), std::string::npos);
  EXPECT_NE(md.find("| 2 | tg3 | "), std::string::npos);
  EXPECT_NE(md.find("f32 "), std::string::npos);
  size_t rows = 0;
  for (size_t p = md.find("\n| llama "); p != std::string::npos; p = md.find("\n| llama ", p + 1)) ++rows;
  EXPECT_EQ(rows, 4u);
}

TEST_F(BenchRun, BatchedDecodeRunsOneTestPerSequenceCount) {
  const std::string path = write_tiny();
  BenchOptions o;
  o.n_prompt = 0;
  o.n_gen = 3;
  o.reps = 1;
  o.threads = {2};
  o.parallel = {1, 3};
  o.bandwidth_bytes = 2u << 20;
  o.bandwidth_passes = 1;
  const BenchReport r = run_bench(path, o);
  ASSERT_EQ(r.results.size(), 2u);
  EXPECT_EQ(r.results[0].test, "tg3");
  EXPECT_EQ(r.results[0].n_seqs, 1u);
  EXPECT_EQ(r.results[1].test, "tg3x3");
  EXPECT_EQ(r.results[1].n_seqs, 3u);
  EXPECT_EQ(r.results[1].n_gen, 3u);
  // aggregate rate: 3 steps × 3 sequences in the sample's wall time
  EXPECT_DOUBLE_EQ(r.results[1].samples_ts[0], 9e9 / r.results[1].samples_ns[0]);
  const nlohmann::json j = to_json(r);
  EXPECT_EQ(j[1].at("n_seqs"), 3u);
  EXPECT_EQ(j[1].at("test"), "tg3x3");
  EXPECT_NE(to_markdown(r).find("| 2 | tg3x3 | "), std::string::npos);
}

TEST_F(BenchRun, RejectsBadOptions) {
  const std::string path = write_tiny();
  BenchOptions o;
  o.reps = 0;
  EXPECT_THROW(run_bench(path, o), Error);
  o.reps = 1;
  o.threads = {};
  EXPECT_THROW(run_bench(path, o), Error);
  o.threads = {0};
  EXPECT_THROW(run_bench(path, o), Error);
  o.threads = {1};
  o.parallel = {};
  EXPECT_THROW(run_bench(path, o), Error);
  o.parallel = {2, 0};
  EXPECT_THROW(run_bench(path, o), Error);
  o.parallel = {1};
  o.n_prompt = o.n_gen = 0;
  EXPECT_THROW(run_bench(path, o), Error);
}

}  // namespace
}  // namespace cortiq::runtime::bench
