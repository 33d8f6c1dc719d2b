// `cortiq bench`: prefill / decode throughput, weight accounting and the memory-bandwidth roofline
// (issue 6 item 3; the contract follows llama-bench: pp = one batched prefill of n_prompt tokens,
// tg = n_gen single-token decode steps from an empty KV cache, tok/s as mean ± sample sd over
// repetitions after one warmup).
//
// Roofline: decode on a CPU is memory-bound, so tok/s ≤ B / W where W = bytes of weights a decode
// step reads (decode_bytes_per_token) and B = the streaming-read bandwidth measured in the same
// process with the same thread count (measure_bandwidth). roofline = W · tg_tok/s / B.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cmf/header.h"
#include "cmf/reader.h"
#include "kernels/thread_pool.h"
#include "model/tensor_source.h"
#include "quant/dtype.h"
#include "util/mmap_file.h"

namespace cortiq::runtime::bench {

// ---------------------------------------------------------------------------------------------
// Statistics

/// Mean and sample standard deviation (divisor n−1, as llama-bench; 0 for n < 2) of `xs`.
struct Stats {
  double mean = 0.0;
  double sd = 0.0;
  size_t n = 0;
};

/// Stats of `xs` (two-pass: mean first, then Σ(x−mean)²; empty → all zero).
Stats mean_sd(std::span<const double> xs);

// ---------------------------------------------------------------------------------------------
// Weight accounting

/// One stored tensor: name, dtype, logical shape and exact payload length (bytes).
struct TensorStat {
  std::string name;
  quant::DType dtype = quant::DType::F32;
  std::vector<uint64_t> shape;
  uint64_t bytes = 0;
};

/// Tensors of an opened .cmf (every shard), in directory order.
std::vector<TensorStat> tensor_stats(const cmf::Reader& r);
/// Tensors of an in-memory source (tests), in name order.
std::vector<TensorStat> tensor_stats(const model::MemoryTensorSource& s);

/// What a model's weights weigh, and what one decode step reads.
struct WeightAccounting {
  uint64_t total_bytes = 0;  ///< Σ payload bytes of every tensor
  uint64_t params = 0;       ///< Σ element counts of every tensor (a tied head is stored once)
  std::map<std::string, uint64_t> bytes_by_dtype;   ///< dtype_name → payload bytes
  std::map<std::string, uint64_t> params_by_dtype;  ///< dtype_name → elements
  /// Bytes of weights one decode step (T = 1) reads: every tensor of layers 0..num_layers−1
  /// (for MoE layers the routed experts' tensors scaled by top_k / num_experts, the expected
  /// share), model.norm.weight, the output head (lm_head.weight, or model.embed_tokens.weight
  /// when tie_word_embeddings and no lm_head is stored), and one row of model.embed_tokens
  /// (payload / rows) unless the head IS the embedding (then the row is inside the bytes already
  /// counted). Tensors outside the forward pass (mtp.*, skill.*) are not counted.
  uint64_t decode_bytes_per_token = 0;
};

/// Accounts `tensors` against `arch` (the rules on WeightAccounting). Pure; never throws.
WeightAccounting account_weights(const cmf::ModelArch& arch, std::span<const TensorStat> tensors);

/// "q8_row 99.2%, f32 0.8%": each dtype's share of the sum of `amount_by_dtype` (payload bytes or
/// elements), largest first, one decimal ("<0.1%" under 0.05%). `cortiq bench` prints the shares of
/// bytes (WeightAccounting::bytes_by_dtype), `cortiq info` those of parameters (params_by_dtype).
std::string dtype_mix(const std::map<std::string, uint64_t>& amount_by_dtype);

// ---------------------------------------------------------------------------------------------
// Memory bandwidth

/// Streaming-read bandwidth result.
struct Bandwidth {
  double best_gbs = 0.0;  ///< best pass, 10^9 bytes/s (STREAM convention: the best of the passes)
  double mean_gbs = 0.0;  ///< mean of the passes
  uint64_t buffer_bytes = 0;
  size_t threads = 0;
};

/// Default read-buffer size: 2 × the last-level cache sysconf reports, clamped to [256 MiB, 1 GiB],
/// so the read streams from DRAM, not cache. (A VM may report the whole chip's L3 — 508 MiB on this
/// project's 2-vCPU EPYC, against 32 MiB per core complex — and the buffer stays allocated while the
/// decode tests run, BandwidthProbe, so it is capped.)
uint64_t default_bandwidth_buffer_bytes() noexcept;

/// A streaming-read probe: a `buffer_bytes` buffer (rounded down to 4 KiB), allocated and touched
/// once (every thread its own slice, so its pages are local to it), read again by every measure().
/// Keeping the buffer lets the benchmark measure the bandwidth right before each decode repetition
/// (TestResult::samples_bw_gbs) without paying the page faults each time. Holds buffer_bytes of
/// memory until destroyed. Throws Error(InvalidArgument) for buffer_bytes < 1 MiB, Error(Io) when
/// the buffer cannot be allocated.
class BandwidthProbe {
 public:
  BandwidthProbe(kernels::ThreadPool& pool, uint64_t buffer_bytes);
  ~BandwidthProbe();
  BandwidthProbe(const BandwidthProbe&) = delete;
  BandwidthProbe& operator=(const BandwidthProbe&) = delete;

  /// Reads the buffer `passes` times, each pass split over the pool in contiguous slices, with the
  /// widest vector loads this CPU has (AVX-512, AVX2, else 64-bit scalar; XOR-reduced so the loads
  /// cannot be elided). Throws Error(InvalidArgument) for passes == 0.
  Bandwidth measure(size_t passes);

 private:
  kernels::ThreadPool& pool_;
  HugeBuffer buf_;  // the probe's bytes (buffer_bytes rounded down to 4 KiB)
  size_t slice_ = 0;
  std::vector<uint64_t> sink_;
};

/// One-shot probe: BandwidthProbe(pool, buffer_bytes).measure(passes).
Bandwidth measure_bandwidth(kernels::ThreadPool& pool, uint64_t buffer_bytes, size_t passes = 5);

// ---------------------------------------------------------------------------------------------
// The benchmark

/// `cortiq bench` options.
struct BenchOptions {
  size_t n_prompt = 512;              ///< pp test size in tokens (0 = skip pp)
  size_t n_gen = 128;                 ///< tg test size in tokens (0 = skip tg)
  size_t reps = 5;                    ///< measured repetitions per test (>= 1)
  std::vector<size_t> threads{1, 2};  ///< thread counts, each >= 1
  /// Decode sequences per step, each >= 1: the tg test runs once per entry. An entry B > 1 decodes
  /// B sequences together through the generation engine (runtime::Engine with B slots, the code
  /// `cortiq serve --parallel` runs): each a one-id random prompt then greedy tokens, one
  /// Model::forward_batch per step (one pass over the weights serves all B tokens); its test is
  /// "tg<n_gen>x<B>" and its t/s is the aggregate over the B sequences.
  std::vector<size_t> parallel{1};
  uint64_t seed = 42;  ///< token-id RNG seed (std::mt19937_64)
  bool exact = false;  ///< ask for the f32-activation kernels (LoadOptions::exact)
  /// Task mask the tests run under (LoadOptions::task): "off" = none (dense), "" = the file's
  /// fallback. A mask keeping ≤ 50 % of a layer's FFN reads only its alive gate/up rows
  /// (model::GatheredFfn), which is what decode time shows falling with the alive fraction.
  std::string task = "off";
  bool no_mmap = false;  ///< LoadOptions::no_mmap (huge-page anonymous copy)
  /// The skill the tests run (LoadOptions::skill): "" / "none" = the backbone, else an id of the
  /// file (`bench --skill auto` resolves the routed id before calling run_bench).
  std::string skill;
  /// How the skill was chosen, for the report ("" = as given; e.g. "auto: routed to skill: code").
  std::string skill_how;
  uint64_t bandwidth_bytes = 0;  ///< 0 = default_bandwidth_buffer_bytes()
  size_t bandwidth_passes = 5;   ///< passes of the measurement at the start of each thread count
  /// Passes of the measurement taken right before each tg repetition (its best pass is that
  /// repetition's bandwidth, TestResult::samples_bw_gbs); 0 = none (the start's figure is used).
  size_t bandwidth_rep_passes = 2;
};

/// One test at one thread count.
struct TestResult {
  std::string test;  ///< "pp512", "tg128" (llama-bench naming); "tg128x4": 4 sequences per step
  size_t n_prompt = 0, n_gen = 0, threads = 0;
  size_t n_seqs = 1;               ///< sequences decoded per step (BenchOptions::parallel)
  std::vector<double> samples_ns;  ///< wall time of each repetition
  std::vector<double> samples_ts;  ///< tokens/s of each repetition (all n_seqs sequences together)
  Stats ts;                        ///< over samples_ts
  Stats ns;                        ///< over samples_ns
  /// 10^9 bytes/s: the mean of samples_bw_gbs when there is one per repetition, else the figure
  /// measured at the start of this thread count (best pass).
  double bandwidth_gbs = 0.0;
  /// tg only, optional: the bandwidth measured right before each repetition (best pass, GB/s), so
  /// that each decode sample has a bandwidth sample taken seconds from it. A shared host's speed
  /// drifts by 20–30% within a minute; dividing by one figure taken at the start turns that drift
  /// into roofline error.
  std::vector<double> samples_bw_gbs;
  /// tg only: the share of the bandwidth the weight reads use, decode_bytes_per_token · steps/s /
  /// (bandwidth·1e9) with steps/s = tokens/s ÷ n_seqs (a batched step reads the weights once). With
  /// samples_bw_gbs: the mean over repetitions of each repetition's own share (roofline_sd their
  /// sample sd); else ts.mean against bandwidth_gbs (roofline_sd 0). nullopt for pp.
  std::optional<double> roofline;
  double roofline_sd = 0.0;
  /// Whether roofline is that mean of per-repetition shares (one bandwidth sample per repetition);
  /// the markdown table then prints it as "mean ± sd%", else as "mean%".
  bool roofline_paired = false;
  /// tg only: the memory bound in tok/s, n_seqs · bandwidth_gbs / decode_bytes_per_token.
  std::optional<double> bound_ts;
};

/// Everything `cortiq bench` prints.
struct BenchReport {
  std::string model_path;
  std::string arch_name;
  uint64_t file_bytes = 0;  ///< Σ sizes of the .cmf file(s)
  WeightAccounting weights;
  bool exact_requested = false;  ///< --exact (LoadOptions::exact → kernels::MatmulMode::Exact)
  std::string mode;              ///< matmul mode the run used: "fast", "exact" or "reference"
  /// dtype_name → "avx512", "avx2" or "reference" (kernels::kernel_name): which kernels run that dtype's
  /// matrices.
  std::map<std::string, std::string> dtype_kernel;
  /// AMX on this CPU for this process: "absent", "refused" or "ready" (kernels::amx_support); no
  /// kernel uses the tiles yet, so "ready" says only that an AMX tier could run here.
  std::string amx = "absent";
  std::vector<Bandwidth> bandwidth;  ///< one per thread count
  std::string load;                  ///< "mmap" or "memory" (LoadOptions::no_mmap)
  std::string task = "off";          ///< the task mask the tests ran under ("off" = dense)
  std::string skill = "none";        ///< the skill the tests ran (LoadedModel::skill; "none" = backbone)
  std::string skill_how;             ///< BenchOptions::skill_how
  double ffn_alive = 1.0;            ///< its alive FFN fraction (model::Variant::ffn_alive_fraction)
  uint64_t gathered_bytes = 0;       ///< its gathered gate/up rows (model::Variant::gathered_bytes)
  /// Per thread count: the process's resident set (VmRSS, bytes) after its tests, with the model
  /// loaded and its KV cache allocated (the bandwidth buffer is freed by then), the KV cache's
  /// bytes, and the anonymous huge-page bytes (AnonHugePages of /proc/self/smaps_rollup).
  std::vector<uint64_t> rss_bytes, kv_bytes, huge_bytes;
  std::vector<TestResult> results;  ///< per thread count: pp then tg
};

/// Fills the derived fields of `t` (ts, ns, samples_ts, roofline, roofline_sd, bound_ts, and
/// bandwidth_gbs when samples_bw_gbs has one entry per sample) from samples_ns, the test's token
/// count (n_prompt, or n_gen · n_seqs), samples_bw_gbs or bandwidth_gbs, and
/// `decode_bytes_per_token`.
void finish_result(TestResult& t, uint64_t decode_bytes_per_token);

/// Progress callback: a human-readable line ("t=2 tg128 rep 3/5").
using BenchProgress = std::function<void(const std::string&)>;

/// Runs the benchmark on the .cmf at `path`: per thread count, loads the model (task mask off,
/// LoadOptions::exact = opt.exact; the process-wide matmul mode is restored on return),
/// measures the bandwidth, warms up (a prefill of min(n_prompt, 16) tokens and one decode step,
/// which touches every weight), then times `reps` prefills (one forward of n_prompt random ids,
/// logits of the last position) and, per entry B of `parallel`, `reps` decodes (n_gen steps from
/// empty KV caches: for B = 1 one forward() per random id; otherwise B engine jobs of a random
/// one-id prompt and n_gen − 1 greedy tokens, end-of-turn ids ignored, one forward_batch per step). Token ids
/// are uniform in [0, vocab) from `seed`. Throws Error(InvalidArgument) for reps == 0, an empty or zero
/// thread or parallel list, or nothing to run (n_prompt == n_gen == 0); load errors propagate.
BenchReport run_bench(const std::string& path, const BenchOptions& opt, const BenchProgress& progress = {});

/// llama-bench-style markdown: one line describing the model, then a table
/// `| model | size | params | dtypes | threads | test | t/s | BW GB/s | B/token | roofline |`.
std::string to_markdown(const BenchReport& r);

/// JSON array with one object per test (llama-bench field names where one exists: model_filename,
/// model_type, model_size, model_n_params, n_threads, n_prompt, n_gen, test, avg_ns, stddev_ns,
/// avg_ts, stddev_ts, samples_ns, samples_ts) plus dtype_bytes {dtype: bytes},
/// decode_bytes_per_token, bandwidth_gbs, roofline (null for pp), bound_ts, exact (bool),
/// matmul_mode, dtype_kernel {dtype: "avx512"|"avx2"|"reference"} (kernels::kernel_name), amx
/// ("absent"|"refused"|"ready").
nlohmann::json to_json(const BenchReport& r);

/// "494.03 M" / "1.54 B" style count; "468.64 MiB" / "1.20 GiB" style size (llama-bench).
std::string format_params(uint64_t n);
std::string format_size(uint64_t bytes);

}  // namespace cortiq::runtime::bench
