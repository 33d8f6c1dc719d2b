#include "runtime/bench.h"

#include <fmt/format.h>
#include <unistd.h>

#include "cmf/tensor_names.h"
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CORTIQ_BENCH_X86 1
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>

#include "kernels/cpu_amx.h"
#include "kernels/kernels.h"
#include "kernels/simd_matvec.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/session.h"
#include "util/error.h"

namespace cortiq::runtime::bench {

Stats mean_sd(std::span<const double> xs) {
  Stats s;
  s.n = xs.size();
  if (xs.empty()) return s;
  double sum = 0.0;
  for (double x : xs) sum += x;
  s.mean = sum / static_cast<double>(xs.size());
  if (xs.size() < 2) return s;
  double ss = 0.0;
  for (double x : xs) ss += (x - s.mean) * (x - s.mean);
  s.sd = std::sqrt(ss / static_cast<double>(xs.size() - 1));
  return s;
}

// ---------------------------------------------------------------------------------------------

std::vector<TensorStat> tensor_stats(const cmf::Reader& r) {
  std::vector<TensorStat> out;
  out.reserve(r.tensors().size());
  for (const auto& t : r.tensors()) out.push_back({t.name, t.dtype, t.shape, t.nbytes});
  return out;
}

std::vector<TensorStat> tensor_stats(const model::MemoryTensorSource& s) {
  std::vector<TensorStat> out;
  for (const auto& n : s.names()) {
    const auto w = s.find(n);
    if (w) out.push_back({n, w->dtype, w->shape, w->payload.size()});
  }
  return out;
}

namespace {

uint64_t numel(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

// Layer index of "model.layers.<i>.…", or nullopt.
std::optional<uint64_t> layer_index(std::string_view name) {
  constexpr std::string_view p = "model.layers.";
  if (name.substr(0, p.size()) != p) return std::nullopt;
  name.remove_prefix(p.size());
  uint64_t v = 0;
  size_t i = 0;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && i < 10; ++i) v = v * 10 + (name[i] - '0');
  if (i == 0 || i >= name.size() || name[i] != '.') return std::nullopt;
  return v;
}

}  // namespace

WeightAccounting account_weights(const cmf::ModelArch& arch, std::span<const TensorStat> tensors) {
  WeightAccounting a;
  const TensorStat* embed = nullptr;
  const TensorStat* head = nullptr;
  const TensorStat* norm = nullptr;
  uint64_t layer_bytes = 0;
  for (const auto& t : tensors) {
    const uint64_t n = numel(t.shape);
    const std::string dn(quant::dtype_name(t.dtype));
    a.total_bytes += t.bytes;
    a.params += n;
    a.bytes_by_dtype[dn] += t.bytes;
    a.params_by_dtype[dn] += n;
    if (t.name == cmf::tensor_name(cmf::TensorRole::Embed))
      embed = &t;
    else if (t.name == cmf::tensor_name(cmf::TensorRole::Head))
      head = &t;
    else if (t.name == cmf::tensor_name(cmf::TensorRole::FinalNorm))
      norm = &t;
    else if (auto l = layer_index(t.name); l && *l < arch.num_layers) {
      if (arch.moe && arch.moe->num_experts > 0 && t.name.find(".mlp.experts.") != std::string::npos) {
        // Expected share of a routed expert: top_k of num_experts are read per token.
        layer_bytes += t.bytes * std::min(arch.moe->top_k, arch.moe->num_experts) / arch.moe->num_experts;
      } else {
        layer_bytes += t.bytes;
      }
    }
  }
  uint64_t d = layer_bytes + (norm ? norm->bytes : 0);
  if (head) {
    d += head->bytes;
    if (embed && !embed->shape.empty() && embed->shape[0] > 0) d += embed->bytes / embed->shape[0];
  } else if (embed && arch.tie_word_embeddings) {
    d += embed->bytes;  // the head is the embedding: the looked-up row lies inside these bytes
  } else if (embed && !embed->shape.empty() && embed->shape[0] > 0) {
    d += embed->bytes / embed->shape[0];
  }
  a.decode_bytes_per_token = d;
  return a;
}

// ---------------------------------------------------------------------------------------------
// Bandwidth

namespace {

#ifdef CORTIQ_BENCH_X86
__attribute__((target("avx512f"))) uint64_t read_avx512(const uint8_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 256 <= n; i += 256) {
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(reinterpret_cast<const void*>(p + i)));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(reinterpret_cast<const void*>(p + i + 64)));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(reinterpret_cast<const void*>(p + i + 128)));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(reinterpret_cast<const void*>(p + i + 192)));
  }
  a0 = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(reinterpret_cast<void*>(lanes), a0);
  uint64_t r = 0;
  for (uint64_t v : lanes) r ^= v;
  for (; i < n; ++i) r ^= p[i];
  return r;
}

__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a0);
  uint64_t r = lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
  for (; i < n; ++i) r ^= p[i];
  return r;
}
#endif

uint64_t read_scalar(const uint8_t* p, size_t n) {
  uint64_t a[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (size_t j = 0; j < 4; ++j) {
      uint64_t v;
      std::memcpy(&v, p + i + 8 * j, 8);
      a[j] ^= v;
    }
  uint64_t r = a[0] ^ a[1] ^ a[2] ^ a[3];
  for (; i < n; ++i) r ^= p[i];
  return r;
}

using ReadFn = uint64_t (*)(const uint8_t*, size_t);
ReadFn pick_reader() {
#ifdef CORTIQ_BENCH_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return read_avx512;
  if (__builtin_cpu_supports("avx2")) return read_avx2;
#endif
  return read_scalar;  // other CPUs: the compiler vectorizes the 4-lane loop for the target
}

}  // namespace

uint64_t default_bandwidth_buffer_bytes() noexcept {
  uint64_t llc = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
  const long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (v > 0) llc = static_cast<uint64_t>(v);
#endif
  return std::clamp<uint64_t>(2 * llc, uint64_t{256} << 20, uint64_t{1} << 30);
}

BandwidthProbe::BandwidthProbe(kernels::ThreadPool& pool, uint64_t buffer_bytes) : pool_(pool) {
  if (buffer_bytes < (uint64_t{1} << 20))
    fail(ErrorKind::InvalidArgument, "bandwidth buffer of {} bytes is below 1 MiB", buffer_bytes);
  // A HugeBuffer, as the weights of a --no-mmap load are: the read then measures DRAM, not page walks.
  buf_ = HugeBuffer(static_cast<size_t>(buffer_bytes) & ~size_t{4095}, "the bandwidth probe");
  const size_t n = buf_.size();
  // Touch every page with distinct bytes (from every thread's slice, so pages are local to it).
  const size_t nt = pool_.size();
  slice_ = ((n / nt) + 255) & ~size_t{255};
  sink_.assign(nt, 0);
  pool_.parallel_for(nt, [&](size_t b, size_t e) {
    for (size_t t = b; t < e; ++t) {
      const size_t lo = std::min(n, t * slice_), hi = std::min(n, lo + slice_);
      for (size_t i = lo; i < hi; ++i) buf_.data()[i] = static_cast<uint8_t>(i * 131 + 7);
    }
  });
}

BandwidthProbe::~BandwidthProbe() {
  // Keep the reductions observable so the reads cannot be removed.
  volatile uint64_t keep = 0;
  for (uint64_t v : sink_) keep = keep ^ v;
  (void)keep;
}

Bandwidth BandwidthProbe::measure(size_t passes) {
  if (passes == 0) fail(ErrorKind::InvalidArgument, "bandwidth passes must be >= 1");
  const ReadFn rd = pick_reader();
  const size_t nt = pool_.size();
  std::vector<double> gbs;
  using clock = std::chrono::steady_clock;
  for (size_t pass = 0; pass < passes; ++pass) {
    const auto t0 = clock::now();
    pool_.parallel_for(nt, [&](size_t b, size_t e) {
      for (size_t t = b; t < e; ++t) {
        const size_t lo = std::min(buf_.size(), t * slice_), hi = std::min(buf_.size(), lo + slice_);
        sink_[t] ^= rd(buf_.data() + lo, hi - lo);
      }
    });
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    gbs.push_back(static_cast<double>(buf_.size()) / s / 1e9);
  }
  Bandwidth bw;
  bw.best_gbs = *std::max_element(gbs.begin(), gbs.end());
  bw.mean_gbs = mean_sd(gbs).mean;
  bw.buffer_bytes = buf_.size();
  bw.threads = nt;
  return bw;
}

Bandwidth measure_bandwidth(kernels::ThreadPool& pool, uint64_t buffer_bytes, size_t passes) {
  if (passes == 0) fail(ErrorKind::InvalidArgument, "bandwidth passes must be >= 1");
  BandwidthProbe probe(pool, buffer_bytes);
  return probe.measure(passes);
}

// ---------------------------------------------------------------------------------------------
// Benchmark

void finish_result(TestResult& t, uint64_t decode_bytes_per_token) {
  const size_t seqs = std::max<size_t>(1, t.n_seqs);
  const double tokens = static_cast<double>(t.n_gen ? t.n_gen * seqs : t.n_prompt);
  t.samples_ts.clear();
  for (double ns : t.samples_ns) t.samples_ts.push_back(ns > 0 ? tokens * 1e9 / ns : 0.0);
  t.ts = mean_sd(t.samples_ts);
  t.ns = mean_sd(t.samples_ns);
  t.roofline.reset();
  t.roofline_sd = 0.0;
  t.roofline_paired = false;
  t.bound_ts.reset();
  if (t.n_gen == 0 || decode_bytes_per_token == 0) return;
  const double b = static_cast<double>(decode_bytes_per_token);
  const bool paired =
      !t.samples_bw_gbs.empty() && t.samples_bw_gbs.size() == t.samples_ts.size() &&
      std::all_of(t.samples_bw_gbs.begin(), t.samples_bw_gbs.end(), [](double g) { return g > 0; });
  if (paired) {  // each repetition against the bandwidth measured right before it
    std::vector<double> share;
    for (size_t i = 0; i < t.samples_ts.size(); ++i)
      share.push_back(b * (t.samples_ts[i] / static_cast<double>(seqs)) / (t.samples_bw_gbs[i] * 1e9));
    const Stats st = mean_sd(share);
    t.roofline = st.mean;
    t.roofline_sd = st.sd;
    t.roofline_paired = true;
    t.bandwidth_gbs = mean_sd(t.samples_bw_gbs).mean;
  } else if (t.bandwidth_gbs > 0) {
    t.roofline = b * (t.ts.mean / static_cast<double>(seqs)) / (t.bandwidth_gbs * 1e9);
  }
  if (t.roofline) t.bound_ts = static_cast<double>(seqs) * t.bandwidth_gbs * 1e9 / b;
}

namespace {

/// The "<key> <n> kB" line of a /proc file in bytes; 0 when the file or key is missing.
uint64_t proc_status_bytes(const char* file, std::string_view key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with(key)) return std::strtoull(line.c_str() + key.size(), nullptr, 10) * 1024;
  return 0;
}

}  // namespace

namespace {

/// Runs `seqs` greedy jobs of `n_gen` tokens on `engine` (which has `seqs` free slots), sequence
/// b's prompt the single id ids[b·n_gen], and waits for their end. Rethrows a job's failure.
void decode_batch(Engine& engine, const LoadedModel& lm, const std::vector<uint32_t>& ids, size_t n_gen,
                  size_t seqs) {
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  std::vector<std::shared_ptr<Job>> jobs(seqs);
  for (size_t b = 0; b < seqs; ++b) {
    auto& j = jobs[b] = std::make_shared<Job>();
    j->prompt = {ids[b * n_gen]};
    j->sampler = SamplerParams::greedy();
    j->max_tokens = n_gen;
    j->ignore_eos = true;
    j->use_cache = false;
    j->mask = lm.mask;
    j->on_done = [&](const std::string&, size_t, const std::string&) {
      std::lock_guard<std::mutex> g(mu);
      ++done;
      cv.notify_all();
    };
  }
  if (!engine.submit(std::span<const std::shared_ptr<Job>>(jobs)))
    fail(ErrorKind::InvalidArgument, "bench: the engine has fewer than {} free slots", seqs);
  std::unique_lock<std::mutex> lk(mu);
  cv.wait(lk, [&] { return done == seqs; });
  for (const auto& j : jobs)
    if (j->failure) std::rethrow_exception(j->failure);
}

}  // namespace

BenchReport run_bench(const std::string& path, const BenchOptions& opt, const BenchProgress& progress) {
  if (opt.reps == 0) fail(ErrorKind::InvalidArgument, "-r/--repetitions must be >= 1");
  if (opt.threads.empty()) fail(ErrorKind::InvalidArgument, "no thread counts given (-t)");
  for (size_t t : opt.threads)
    if (t == 0) fail(ErrorKind::InvalidArgument, "thread count 0 in -t (use explicit counts >= 1)");
  if (opt.n_prompt == 0 && opt.n_gen == 0)
    fail(ErrorKind::InvalidArgument, "nothing to run: -p and -n are both 0");
  if (opt.parallel.empty()) fail(ErrorKind::InvalidArgument, "no sequence counts given (--parallel)");
  for (size_t b : opt.parallel)
    if (b == 0) fail(ErrorKind::InvalidArgument, "sequence count 0 in --parallel (use counts >= 1)");
  auto say = [&](const std::string& s) {
    if (progress) progress(s);
  };

  BenchReport rep;
  rep.model_path = path;
  rep.exact_requested = opt.exact;
  rep.load = opt.no_mmap ? "memory" : "mmap";
  using clock = std::chrono::steady_clock;
  auto ns_since = [](clock::time_point t0) {
    return std::chrono::duration<double, std::nano>(clock::now() - t0).count();
  };

  for (size_t threads : opt.threads) {
    LoadOptions lo;
    lo.threads = threads;
    lo.task = opt.task;
    lo.exact = opt.exact;  // this model's kernel table (kernels::Ops)
    lo.no_mmap = opt.no_mmap;
    lo.skill = opt.skill.empty() ? "none" : opt.skill;
    if (lo.skill == "auto")
      fail(ErrorKind::InvalidArgument, "bench: --skill auto must be resolved to an id first");
    LoadedModel lm = load_model(path, lo);
    rep.skill = lm.skill.empty() ? "none" : lm.skill;
    rep.skill_how = opt.skill_how;
    const cmf::Reader& r = *lm.reader;
    if (rep.arch_name.empty()) {
      rep.arch_name = r.header().arch.arch_name;
      rep.file_bytes = 0;
      for (size_t f = 0; f < r.num_files(); ++f) rep.file_bytes += r.file_bytes(f).size();
      const auto ts = tensor_stats(r);
      rep.weights = account_weights(r.header().arch, ts);
      const kernels::Ops& ops = lm.model->ops();
      const kernels::MatmulMode mode = ops.config().mode;
      rep.mode = mode == kernels::MatmulMode::Exact       ? "exact"
                 : mode == kernels::MatmulMode::Reference ? "reference"
                                                          : "fast";
      for (const auto& [name, bytes] : rep.weights.bytes_by_dtype) {
        (void)bytes;
        const auto dt = quant::dtype_from_name(name);
        rep.dtype_kernel[name] = dt ? ops.kernel_name(*dt) : "reference";
      }
      rep.amx = kernels::amx_state_name(kernels::amx_support().state);
    }
    model::Model& m = *lm.model;
    const model::Variant* var = lm.variant.get();  // the task mask load_model chose (--task)
    rep.task = var ? var->name : "off";
    rep.ffn_alive = var ? var->ffn_alive_fraction() : 1.0;
    rep.gathered_bytes = var ? var->gathered_bytes() : 0;
    uint64_t vocab = m.vocab_size();
    if (const auto* e = r.find(cmf::tensor_name(cmf::TensorRole::Embed)); e && !e->shape.empty())
      vocab = std::min<uint64_t>(vocab, e->shape[0]);
    if (vocab == 0) fail(ErrorKind::Parse, "model '{}' has an empty vocabulary", path);
    std::mt19937_64 rng(opt.seed + threads);
    std::uniform_int_distribution<uint64_t> dist(0, vocab - 1);
    auto random_ids = [&](size_t n) {
      std::vector<uint32_t> ids(n);
      for (auto& id : ids) id = static_cast<uint32_t>(dist(rng));
      return ids;
    };
    const size_t cap = std::max<size_t>({opt.n_prompt, opt.n_gen, 16}) + 1;
    // positions past max_position_embeddings are no test of the model (run and ppl refuse them too)
    if (const uint64_t maxpos = m.arch().max_position_embeddings; maxpos && cap - 1 > maxpos)
      fail(ErrorKind::InvalidArgument, "-p {} / -n {}: this model has {} positions (max_position_embeddings)",
           opt.n_prompt, opt.n_gen, maxpos);
    model::KvCache kv(m.arch(), cap, false);
    std::vector<float> logits(m.vocab_size());

    say(fmt::format("t={} bandwidth", threads));
    std::optional<BandwidthProbe> probe(
        std::in_place, m.pool(),
        opt.bandwidth_bytes ? opt.bandwidth_bytes : default_bandwidth_buffer_bytes());
    const Bandwidth bw = probe->measure(opt.bandwidth_passes);
    rep.bandwidth.push_back(bw);

    say(fmt::format("t={} warmup", threads));
    {
      kv.truncate(0);
      const auto ids = random_ids(std::max<size_t>(1, std::min<size_t>(opt.n_prompt, 16)));
      m.forward(ids, kv, logits, model::LogitsMode::Last, var);
      const auto one = random_ids(1);
      m.forward(one, kv, logits, model::LogitsMode::Last, var);
    }

    // One test: `reps` timed runs of `body(ids)` on n · seqs fresh random ids from empty KV caches
    // (the body truncates the batched caches it owns).
    auto run_test = [&](std::string name, size_t n, size_t seqs, bool prefill, auto&& body) {
      TestResult t;
      t.test = std::move(name);
      (prefill ? t.n_prompt : t.n_gen) = n;
      t.n_seqs = seqs;
      t.threads = threads;
      t.bandwidth_gbs = bw.best_gbs;
      for (size_t i = 0; i < opt.reps; ++i) {
        say(fmt::format("t={} {} rep {}/{}", threads, t.test, i + 1, opt.reps));
        if (!prefill && opt.bandwidth_rep_passes > 0)
          t.samples_bw_gbs.push_back(probe->measure(opt.bandwidth_rep_passes).best_gbs);
        const auto ids = random_ids(n * seqs);
        kv.truncate(0);
        const auto t0 = clock::now();
        body(ids);
        t.samples_ns.push_back(ns_since(t0));
      }
      finish_result(t, rep.weights.decode_bytes_per_token);
      rep.results.push_back(std::move(t));
    };
    if (opt.n_prompt > 0)  // prefill: one forward over all ids
      run_test(fmt::format("pp{}", opt.n_prompt), opt.n_prompt, 1, true,
               [&](const std::vector<uint32_t>& ids) {
                 m.forward(ids, kv, logits, model::LogitsMode::Last, var);
               });
    for (size_t seqs : opt.n_gen > 0 ? opt.parallel : std::vector<size_t>{}) {
      if (seqs == 1) {  // decode: one forward per id
        run_test(fmt::format("tg{}", opt.n_gen), opt.n_gen, 1, false, [&](const std::vector<uint32_t>& ids) {
          for (size_t k = 0; k < ids.size(); ++k)
            m.forward(std::span<const uint32_t>(&ids[k], 1), kv, logits, model::LogitsMode::Last, var);
        });
        continue;
      }
      // Batched decode through the generation engine (what serve --parallel runs): B slots, B jobs
      // admitted together, each a random one-token prompt then greedy tokens, end-of-turn ids
      // ignored: n_gen steps of one forward_batch over B rows (the first is the prompts' prefill).
      Engine engine(lm, EngineOptions{.parallel = seqs, .queue = 0, .ctx = cap});
      run_test(fmt::format("tg{}x{}", opt.n_gen, seqs), opt.n_gen, seqs, false,
               [&](const std::vector<uint32_t>& ids) { decode_batch(engine, lm, ids, opt.n_gen, seqs); });
    }
    probe.reset();  // the RSS below is the model's, not the probe buffer's
    rep.rss_bytes.push_back(proc_status_bytes("/proc/self/status", "VmRSS:"));
    rep.huge_bytes.push_back(proc_status_bytes("/proc/self/smaps_rollup", "AnonHugePages:"));
    rep.kv_bytes.push_back(kv.bytes());
  }
  return rep;
}

// ---------------------------------------------------------------------------------------------
// Output

std::string format_params(uint64_t n) {
  const double v = static_cast<double>(n);
  if (n >= 1000000000ull) return fmt::format("{:.2f} B", v / 1e9);
  if (n >= 1000000ull) return fmt::format("{:.2f} M", v / 1e6);
  if (n >= 1000ull) return fmt::format("{:.2f} K", v / 1e3);
  return fmt::format("{}", n);
}

std::string dtype_mix(const std::map<std::string, uint64_t>& amount_by_dtype) {
  std::vector<std::pair<std::string, uint64_t>> v(amount_by_dtype.begin(), amount_by_dtype.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  uint64_t total = 0;
  for (const auto& [name, n] : v) total += n;
  std::string s;
  for (const auto& [name, n] : v) {
    const double pct = total ? 100.0 * static_cast<double>(n) / static_cast<double>(total) : 0;
    s += pct >= 0.05 ? fmt::format("{}{} {:.1f}%", s.empty() ? "" : ", ", name, pct)
                     : fmt::format("{}{} <0.1%", s.empty() ? "" : ", ", name);
  }
  return s;
}

std::string format_size(uint64_t bytes) {
  const double v = static_cast<double>(bytes);
  if (bytes >= (1ull << 30)) return fmt::format("{:.2f} GiB", v / (1ull << 30));
  if (bytes >= (1ull << 20)) return fmt::format("{:.2f} MiB", v / (1ull << 20));
  if (bytes >= (1ull << 10)) return fmt::format("{:.2f} KiB", v / (1ull << 10));
  return fmt::format("{} B", bytes);
}

namespace {

std::string model_label(const BenchReport& r) {
  std::string main = "?";
  uint64_t best = 0;
  for (const auto& [name, bytes] : r.weights.bytes_by_dtype)
    if (bytes > best) best = bytes, main = name;
  return fmt::format("{} {} {}", r.arch_name, format_params(r.weights.params), main);
}

}  // namespace

std::string to_markdown(const BenchReport& r) {
  std::string s;
  std::string kern;
  for (const auto& [name, k] : r.dtype_kernel)
    kern += fmt::format("{}{}: {}", kern.empty() ? "" : ", ", name, k);
  s += fmt::format(
      "model: `{}` · file {} · weights {} · params {} · decode reads {} per token · matmul mode: {} ({}) · "
      "AMX: {}\n\n",
      r.model_path, format_size(r.file_bytes), format_size(r.weights.total_bytes),
      format_params(r.weights.params), format_size(r.weights.decode_bytes_per_token), r.mode, kern, r.amx);
  if (r.skill != "none" || !r.skill_how.empty())
    s += fmt::format("skill: {}{}\n\n", r.skill, r.skill_how.empty() ? "" : " (" + r.skill_how + ")");
  if (r.task != "off")
    s += fmt::format("task: {} · FFN {:.1f}% alive · gathered gate/up rows {}\n\n", r.task,
                     100.0 * r.ffn_alive, format_size(r.gathered_bytes));
  for (size_t i = 0; i < r.rss_bytes.size() && i < r.kv_bytes.size(); ++i) {
    const uint64_t limit = r.file_bytes + r.kv_bytes[i] + (uint64_t{100} << 20);
    s += fmt::format(
        "load: {} · after the t={} tests: RSS {} (file + KV + 100 MiB = {}; KV {}; huge pages {})\n", r.load,
        i < r.bandwidth.size() ? r.bandwidth[i].threads : 0, format_size(r.rss_bytes[i]), format_size(limit),
        format_size(r.kv_bytes[i]), format_size(i < r.huge_bytes.size() ? r.huge_bytes[i] : 0));
  }
  if (!r.rss_bytes.empty()) s += "\n";
  s += "| model | size | params | dtypes | threads | test | t/s | BW GB/s | bound t/s | roofline |\n";
  s += "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  const std::string label = model_label(r), size = format_size(r.weights.total_bytes),
                    params = format_params(r.weights.params), mix = dtype_mix(r.weights.bytes_by_dtype);
  for (const auto& t : r.results) {
    std::string roof = "-";
    if (t.roofline)
      roof = t.roofline_paired ? fmt::format("{:.1f} ± {:.1f}%", *t.roofline * 100.0, t.roofline_sd * 100.0)
                               : fmt::format("{:.1f}%", *t.roofline * 100.0);
    s += fmt::format("| {} | {} | {} | {} | {} | {} | {:.2f} ± {:.2f} | {:.1f} | {} | {} |\n", label, size,
                     params, mix, t.threads, t.test, t.ts.mean, t.ts.sd, t.bandwidth_gbs,
                     t.bound_ts ? fmt::format("{:.1f}", *t.bound_ts) : std::string("-"), roof);
  }
  return s;
}

nlohmann::json to_json(const BenchReport& r) {
  nlohmann::json arr = nlohmann::json::array();
  nlohmann::json dtypes = nlohmann::json::object();
  for (const auto& [name, bytes] : r.weights.bytes_by_dtype) dtypes[name] = bytes;
  for (const auto& t : r.results) {
    nlohmann::json o;
    o["model_filename"] = r.model_path;
    o["model_type"] = model_label(r);
    o["arch"] = r.arch_name;
    o["file_size"] = r.file_bytes;
    o["model_size"] = r.weights.total_bytes;
    o["model_n_params"] = r.weights.params;
    o["dtype_bytes"] = dtypes;
    o["decode_bytes_per_token"] = r.weights.decode_bytes_per_token;
    o["n_threads"] = t.threads;
    o["n_prompt"] = t.n_prompt;
    o["n_gen"] = t.n_gen;
    o["n_seqs"] = t.n_seqs;
    o["test"] = t.test;
    o["avg_ns"] = t.ns.mean;
    o["stddev_ns"] = t.ns.sd;
    o["avg_ts"] = t.ts.mean;
    o["stddev_ts"] = t.ts.sd;
    o["samples_ns"] = t.samples_ns;
    o["samples_ts"] = t.samples_ts;
    o["bandwidth_gbs"] = t.bandwidth_gbs;
    o["samples_bw_gbs"] = t.samples_bw_gbs;
    o["roofline"] = t.roofline ? nlohmann::json(*t.roofline) : nlohmann::json(nullptr);
    o["roofline_sd"] = t.roofline ? nlohmann::json(t.roofline_sd) : nlohmann::json(nullptr);
    o["bound_ts"] = t.bound_ts ? nlohmann::json(*t.bound_ts) : nlohmann::json(nullptr);
    o["exact"] = r.exact_requested;
    o["matmul_mode"] = r.mode;
    o["task"] = r.task;
    o["skill"] = r.skill;
    if (!r.skill_how.empty()) o["skill_how"] = r.skill_how;
    o["ffn_alive_fraction"] = r.ffn_alive;
    o["gathered_bytes"] = r.gathered_bytes;
    o["dtype_kernel"] = r.dtype_kernel;
    o["amx"] = r.amx;
    o["load"] = r.load;
    for (size_t i = 0; i < r.bandwidth.size(); ++i)
      if (r.bandwidth[i].threads == t.threads && i < r.rss_bytes.size()) {
        o["rss_bytes"] = r.rss_bytes[i];
        o["kv_bytes"] = r.kv_bytes[i];
        o["anon_huge_bytes"] = r.huge_bytes[i];
      }
    arr.push_back(std::move(o));
  }
  return arr;
}

}  // namespace cortiq::runtime::bench
