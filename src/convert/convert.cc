#include "convert/convert.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "cmf/append.h"
#include "cmf/hash.h"
#include "cmf/reader.h"
#include "cmf/tensor_names.h"
#include "cmf/writer.h"
#include "convert/gguf.h"
#include "convert/gguf_codec.h"
#include "convert/gguf_model.h"
#include "convert/gguf_tokenizer.h"
#include "convert/hf_config.h"
#include "convert/safetensors.h"
#include "convert/tensor_map.h"
#include "quant/codec.h"
#include "tokenizer/jinja/jinja.h"
#include "util/error.h"
#include "util/progress.h"

namespace cortiq::convert {

namespace {

constexpr const char* kTool = "cortiq-cpp 0.1.0";

/// One tensor to produce: either `raw` bytes copied as is, or f32 values from `load` encoded.
struct Job {
  std::string name;
  std::vector<uint64_t> shape;
  TensorDecision decision;
  std::function<void(std::vector<float>&)> load;  ///< fills numel f32 values (encode path)
  std::function<std::span<const uint8_t>()> raw;  ///< verbatim payload (copy path)
  /// Zero-copy f32 source (an aligned little-endian F32 safetensors range): encoded in place,
  /// no f32 working copy.
  std::span<const float> direct;
  std::function<void()> release;  ///< after the tensor is written
  uint64_t source_bytes = 0;      ///< for progress / throughput
  /// The exact payload of the chosen dtype, made from the source without rounding (GGUF Q4_0 →
  /// q4_block); empty function or nullopt: encode.
  std::function<std::optional<std::vector<uint8_t>>()> exact;
  /// The source is already quantized: measure what encoding it again costs (JobStats).
  bool measure = false;
};

/// What re-encoding one already quantized tensor cost.
struct JobStats {
  bool measured = false;
  double max_abs = 0, se = 0, ss = 0;
};

struct Done {
  std::vector<uint8_t> payload;
  std::exception_ptr error;
  JobStats stats;
};

std::string nonfinite_text(float v) {
  return std::isnan(v) ? "NaN" : (v > 0 ? "+Inf" : "-Inf");
}

std::vector<uint8_t> run_job(const Job& j, bool allow_nonfinite, JobStats* stats) {
  if (j.raw) {
    auto b = j.raw();
    return {b.begin(), b.end()};
  }
  if (j.exact)
    if (auto b = j.exact()) return std::move(*b);
  std::vector<float> copy;
  std::span<const float> v = j.direct;
  if (v.empty()) {
    j.load(copy);
    v = copy;
  }
  const quant::DType t = j.decision.dtype;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      if (!quant::is_float_dtype(t))
        fail(ErrorKind::InvalidArgument,
             "tensor '{}': element {} is {}; the integer codec {} cannot store it (store it as a float dtype "
             "with "
             "--quant-rule '{}=f16' and --allow-nonfinite)",
             j.name, i, nonfinite_text(v[i]), quant::dtype_name(t), j.name);
      if (!allow_nonfinite)
        fail(ErrorKind::InvalidArgument,
             "tensor '{}': element {} is {} (pass --allow-nonfinite to keep it in {})", j.name, i,
             nonfinite_text(v[i]), quant::dtype_name(t));
      break;
    }
  }
  std::vector<uint8_t> out;
  try {
    out = quant::encode(t, j.shape, v, j.decision.opt);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("tensor '{}' ({}): {}", j.name, quant::dtype_name(t), e.message()));
  }
  if (j.measure && stats) {
    std::vector<float> back(v.size());
    quant::decode(t, j.shape, out, back);
    stats->measured = true;
    for (size_t i = 0; i < v.size(); ++i) {
      const double d = double(back[i]) - v[i];
      stats->max_abs = std::max(stats->max_abs, std::fabs(d));
      stats->se += d * d;
      stats->ss += double(v[i]) * v[i];
    }
  }
  return out;
}

/// Adds one re-encoded tensor's cost to `res`.
void add_stats(ConvertResult& res, const JobStats& s, const std::string& name) {
  if (!s.measured || s.max_abs == 0) return;
  ++res.requantized;
  res.requant_max_abs = std::max(res.requant_max_abs, s.max_abs);
  const double rel = std::sqrt(s.se / std::max(s.ss, 1e-30));
  if (rel >= res.requant_worst_rel) {
    res.requant_worst_rel = rel;
    res.requant_worst = name;
  }
}

/// Encodes jobs on `threads` workers and writes them to `w` in job order (deterministic).
void run_pipeline(std::vector<Job>& jobs, cmf::Writer& w, unsigned threads, bool allow_nonfinite,
                  bool show_progress, const std::string& label, ConvertResult* res = nullptr) {
  uint64_t total = 0;
  for (const auto& j : jobs) total += j.source_bytes;
  std::optional<Progress> bar;
  if (show_progress) bar.emplace(label, total);
  const size_t n = jobs.size();
  auto write_one = [&](size_t i, std::vector<uint8_t>& payload) {
    w.add_tensor(jobs[i].name, jobs[i].decision.dtype, jobs[i].shape, payload);
    if (jobs[i].release) jobs[i].release();
    if (bar) bar->advance(jobs[i].source_bytes);
  };
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) {
      JobStats st;
      auto p = run_job(jobs[i], allow_nonfinite, &st);
      if (res) add_stats(*res, st, jobs[i].name);
      write_one(i, p);
    }
    return;
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::optional<Done>> slots(n);
  size_t next_claim = 0, next_write = 0;
  bool abort = false;
  const size_t window = threads + 1;
  auto worker = [&] {
    for (;;) {
      size_t i;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return abort || next_claim >= n || next_claim < next_write + window; });
        if (abort || next_claim >= n) return;
        i = next_claim++;
      }
      Done d;
      try {
        d.payload = run_job(jobs[i], allow_nonfinite, &d.stats);
      } catch (...) {
        d.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lk(mu);
        slots[i] = std::move(d);
      }
      cv.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (unsigned k = 0; k < threads; ++k) pool.emplace_back(worker);
  std::exception_ptr err;
  try {
    for (size_t i = 0; i < n; ++i) {
      Done d;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return slots[i].has_value(); });
        d = std::move(*slots[i]);
        slots[i].reset();
      }
      if (d.error) std::rethrow_exception(d.error);
      if (res) add_stats(*res, d.stats, jobs[i].name);
      write_one(i, d.payload);
      {
        std::lock_guard<std::mutex> lk(mu);
        ++next_write;
      }
      cv.notify_all();
    }
  } catch (...) {
    err = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lk(mu);
    abort = true;
  }
  cv.notify_all();
  for (auto& t : pool) t.join();
  if (err) std::rethrow_exception(err);
}

/// Warnings about the plan's --quant-rule entries: a rule that matches no tensor (a typo in the
/// glob), and tensors a rule names that take another dtype (e.g. q4tp needs in % 32 == 0: q8_2f),
/// counted per rule with the first tensor's reason.
void rule_warnings(const QuantPlan& plan, const std::vector<Job>& jobs, std::vector<std::string>& out) {
  for (const auto& r : plan.rules) {
    size_t matched = 0, other = 0;
    const Job* first = nullptr;
    for (const Job& j : jobs) {
      // the first matching rule decides (decide()); a later rule shadowed by it is not this rule's
      const QuantRule* winner = nullptr;
      for (const auto& q : plan.rules)
        if (glob_match(q.glob, j.name)) {
          winner = &q;
          break;
        }
      if (winner != &r) continue;
      ++matched;
      if (j.decision.dtype != r.choice.dtype) {
        if (!first) first = &j;
        ++other;
      }
    }
    if (matched == 0)
      out.push_back(
          fmt::format("--quant-rule '{}' matches no tensor (or only tensors an earlier rule takes)", r.text));
    else if (other)
      out.push_back(fmt::format("--quant-rule '{}': {} of its {} tensors are not {} (e.g. '{}': {})", r.text,
                                other, matched, quant::dtype_name(r.choice.dtype), first->name,
                                first->decision.reason));
  }
}

/// The shared tail of convert / requant: runs `jobs` through the pipeline into `w` (`what` names
/// the step on the progress bar), adds the plan's rule warnings and finishes the file with header
/// `h`. Fills res.outputs, res.tensors and res.warnings; res.input_bytes is the caller's.
/// Errors: those of run_pipeline and cmf::Writer::finish (the output is then not created).
void write_jobs(std::vector<Job>& jobs, cmf::Writer& w, const cmf::Header& h, const QuantPlan& plan,
                unsigned threads, bool allow_nonfinite, bool progress, const char* what, ConvertResult& res) {
  run_pipeline(jobs, w, threads, allow_nonfinite, progress, what, &res);
  rule_warnings(plan, jobs, res.warnings);
  if (res.requantized)
    res.warnings.push_back(
        fmt::format("{} already quantized tensor(s) were quantized again (the chosen codec differs from the "
                    "source's): max "
                    "|Δ| {:.3g}, worst relative RMS error {:.3g} in '{}' (keep the source codec to avoid it)",
                    res.requantized, res.requant_max_abs, res.requant_worst_rel, res.requant_worst));
  res.outputs = w.finish(h);
  res.tensors = jobs.size();
}

unsigned resolve_threads(unsigned t) {
  if (t > 0) return t;
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : hc;
}

/// requant and compact write fresh hashes, so whatever they carry over must still match the hashes
/// it was stored with, or a damaged tensor would come out passing `verify`.
/// `payload` of tensor `t` of `input`, or Error(HashMismatch) naming the tensor.
std::span<const uint8_t> checked_payload(std::span<const uint8_t> payload, const cmf::TensorInfo& t,
                                         const std::string& input) {
  const uint64_t h = cmf::hash64(payload);
  if (h != t.hash)
    fail(ErrorKind::HashMismatch,
         "{}: tensor '{}' does not match its stored hash (stored {:016x}, actual {:016x}); the file is "
         "damaged (see `cortiq verify`), so it is not rewritten",
         input, t.name, t.hash, h);
  return payload;
}

/// The same check for a section carried over verbatim (vocab, masks) whose hash the header stores.
void check_section(std::span<const uint8_t> bytes, const std::optional<std::string>& stored, const char* name,
                   const std::string& input) {
  if (!stored || bytes.empty()) return;
  const std::string actual = fmt::format("{:016x}", cmf::hash64(bytes));
  std::string want = *stored;
  std::transform(want.begin(), want.end(), want.begin(), [](unsigned char c) { return std::tolower(c); });
  if (want != actual)
    fail(ErrorKind::HashMismatch,
         "{}: section '{}' does not match its stored hash (stored {}, actual {}); the file is damaged (see "
         "`cortiq verify`), so it is not rewritten",
         input, name, *stored, actual);
}

/// The chat template `b` stores, checked: one that does not parse (or uses a construct the engine
/// lacks) would be stored and fail only when `serve` renders it, so it is refused here with the
/// engine's error (kind Parse or Unsupported, line and column) naming `where` it came from; with
/// --no-chat-template none is stored (and none is checked).
void check_chat_template(std::optional<cmf::TokenizerBundle>& b, const ConvertOptions& opt,
                         const std::string& where) {
  if (!b || !b->chat_template) return;
  if (opt.no_chat_template) {
    b->chat_template.reset();
    return;
  }
  try {
    (void)jinja::Template(*b->chat_template);
  } catch (const jinja::TemplateError& e) {
    fail(e.kind(), "{}: {} (fix it, or convert with --no-chat-template to store none)", where, e.message());
  }
}

}  // namespace

std::string source_precision_quant(uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::F32:
      return "f32";
    case GgmlType::F16:
      return "f16";
    case GgmlType::BF16:
      return "bf16";
    case GgmlType::Q4_0:
      return "q4";
    default:
      return "q8";  // Q8_0, Q4_1, Q5_x, K-quants: 8-bit per row loses least
  }
}

namespace {

/// `cortiq convert model.gguf`: the GGUF's metadata stands in for config.json (hf_config_from_gguf)
/// and its tokenizer metadata for tokenizer.json (tokenizer_from_gguf); each tensor is dequantized
/// to f32 (gguf_to_f32), given its HF name and, for the llama architecture, HF's Q/K row order back
/// (unpermute_qk_rows), then encoded under the plan like a safetensors tensor.
ConvertResult convert_gguf(const ConvertOptions& opt) {
  ConvertResult res;
  GgufFile g(opt.model_dir);
  const nlohmann::json config = hf_config_from_gguf(g);
  cmf::ModelArch arch = arch_from_hf(config);
  arch.mtp.reset();
  // gemma's norm weights are llama.cpp's g = 1 + w (GemmaModel.modify_tensors): kept as they are and
  // run as x̂·g, which is the runtime's x̂·(1 + w) bit for bit (it computes 1.0f + w in f32 too)
  if (arch.norm_style == cmf::NormStyle::Gemma) arch.norm_style = cmf::NormStyle::Qwen;
  const bool permuted = arch.arch_name == "llama";  // convert_hf_to_gguf's LlamaModel.permute
  struct Src {
    std::string name;
    const GgufTensor* t;
    uint64_t row0 = 0, rows = 0;  // a row slice of t (phi3's fused projections); rows 0: all of t
  };
  std::vector<Src> srcs;
  const std::string gguf_arch = config["model_type"].get<std::string>();
  for (const auto& t : g.tensors()) {
    std::string name = hf_name_from_gguf(t.name, gguf_arch);
    if (name.empty()) {  // rope_freqs.weight: llama3's per-dimension RoPE factors
      std::vector<float> v(t.numel);
      gguf_to_f32(t, v);
      // one factor per rotary pair, each a finite positive divisor of its inverse frequency
      const auto pairs = static_cast<uint64_t>(arch.head_dim * arch.partial_rotary_factor) / 2;
      if (v.size() != pairs)
        fail(ErrorKind::Parse, "GGUF tensor '{}' has {} values; head_dim {} has {} rotary pairs", t.name,
             v.size(), arch.head_dim, pairs);
      for (size_t i = 0; i < v.size(); ++i)
        if (!std::isfinite(v[i]) || v[i] <= 0.0f)
          fail(ErrorKind::Parse, "GGUF tensor '{}': value {} is {} (RoPE factors are finite and > 0)", t.name,
               i, v[i]);
      arch.rope_freq_factors = std::vector<double>(v.begin(), v.end());
      continue;
    }
    // fused projections are split by rows as tensor_map splits HF's: q | k | v and gate | up
    const auto fused = cmf::parse_tensor_name(name);
    const auto cut = [&](std::initializer_list<std::pair<cmf::TensorRole, uint64_t>> parts) {
      uint64_t want = 0;
      for (const auto& [part, rows] : parts) want += rows;
      if (t.shape.size() != 2 || t.shape[0] != want)
        fail(ErrorKind::Parse, "GGUF tensor '{}' has shape [{}], the metadata needs {} rows", t.name,
             fmt::join(t.shape, ", "), want);
      uint64_t row0 = 0;
      for (const auto& [part, rows] : parts) {
        srcs.push_back({cmf::tensor_name(part, fused->layer), &t, row0, rows});
        row0 += rows;
      }
    };
    if (fused && fused->role == cmf::TensorRole::FusedQkv) {
      const uint64_t q = uint64_t{arch.num_attention_heads} * arch.head_dim,
                     kv = uint64_t{arch.num_kv_heads} * arch.head_dim;
      cut({{cmf::TensorRole::Q, q}, {cmf::TensorRole::K, kv}, {cmf::TensorRole::V, kv}});
      continue;
    }
    if (fused && fused->role == cmf::TensorRole::FusedGateUp) {
      const uint64_t width = t.shape.size() == 2 ? t.shape[0] / 2 : arch.intermediate_size;  // per layer
      cut({{cmf::TensorRole::FfnGate, width}, {cmf::TensorRole::FfnUp, width}});
      continue;
    }
    srcs.push_back({std::move(name), &t});
  }
  std::stable_sort(srcs.begin(), srcs.end(),
                   [](const Src& a, const Src& b) { return write_order_less(a.name, b.name); });
  const std::string embed_name = cmf::tensor_name(cmf::TensorRole::Embed);
  const auto embed =
      std::find_if(srcs.begin(), srcs.end(), [&](const Src& s) { return s.name == embed_name; });
  if (embed == srcs.end())
    fail(ErrorKind::Parse, "GGUF '{}' has no 'token_embd.weight'{}", opt.model_dir,
         g.tensors().empty() ? " (it has no tensors at all: a vocab-only GGUF holds no model)" : "");
  if (embed->t->shape != std::vector<uint64_t>{arch.vocab_size, arch.hidden_size})
    fail(ErrorKind::Parse,
         "GGUF tensor 'token_embd.weight' has shape [{}], the metadata says [vocab {}, hidden {}]",
         fmt::join(embed->t->shape, ", "), arch.vocab_size, arch.hidden_size);

  cmf::Header h;
  h.arch = arch;
  h.quant_type = header_quant_type(opt.plan.base);
  cmf::WriterOptions wo;
  wo.expected_tensors = srcs.size();
  wo.shard_max_bytes = opt.shard_max_bytes;
  // the tokenizer (and its chat template) is checked before the writer creates any file
  std::optional<GgufTokenizer> tok;
  if (g.metadata().contains("tokenizer.ggml.model")) {
    tok = tokenizer_from_gguf(g.metadata());
    cmf::TokenizerBundle b;
    b.chat_template = tok->chat_template;
    b.eos_token_ids = tok->eos_ids;
    b.bos_token_id = tok->bos_id;
    b.pad_token_id = tok->pad_id;
    h.tokenizer_config = b;
    check_chat_template(h.tokenizer_config, opt, fmt::format("'{}': tokenizer.chat_template", opt.model_dir));
  }
  cmf::Writer w(opt.output, wo);
  if (tok) {
    w.set_vocab(std::vector<uint8_t>(tok->tokenizer_json.begin(), tok->tokenizer_json.end()));
  } else {
    res.warnings.push_back(fmt::format(
        "'{}' has no tokenizer.ggml.* metadata: the file carries no vocab section", opt.model_dir));
  }
  nlohmann::json prov;
  prov["tool"] = std::string(kTool) + " convert";
  prov["source_model"] = std::filesystem::path(opt.model_dir).filename().string();
  prov["source_format"] = fmt::format("gguf v{}", g.version());
  for (const char* k : {"general.name", "general.file_type", "general.quantization_version"})
    if (auto it = g.metadata().find(k); it != g.metadata().end()) prov["gguf"][k] = *it;
  prov["plan"] = opt.plan.to_json();
  prov["hf_config_extras"] = {{"model_type", arch.arch_name}};
  h.provenance = prov;

  std::vector<Job> jobs;
  jobs.reserve(srcs.size());
  for (const auto& s : srcs) {
    const GgufTensor* t = s.t;
    Job j;
    j.name = s.name;
    j.shape = t->shape;
    const uint64_t row0 = s.row0, slice_rows = s.rows;
    if (slice_rows) j.shape[0] = slice_rows;
    if (opt.keep_source_precision) {
      QuantPlan keep;
      keep.base = parse_quant(source_precision_quant(t->type));
      j.decision = decide(keep, j.name, j.shape, false);
    } else {
      j.decision = decide(opt.plan, j.name, j.shape, false);
    }
    const auto gt = static_cast<GgmlType>(t->type);
    j.measure = gt != GgmlType::F32 && gt != GgmlType::F16 && gt != GgmlType::BF16;
    uint32_t qk_heads = 0;  // a weight or a bias of the Q or K projection
    const auto proj = cmf::tensor_place(j.name).module;
    if (permuted && proj == cmf::TensorRole::Q) qk_heads = arch.num_attention_heads;
    if (permuted && proj == cmf::TensorRole::K) qk_heads = arch.num_kv_heads;
    j.load = [t, qk_heads, row0, slice_rows, name = j.name](std::vector<float>& v) {
      v.resize(t->numel);
      gguf_to_f32(*t, v);
      if (slice_rows) {  // rows [row0, row0 + slice_rows) of the fused tensor
        const uint64_t cols = t->numel / t->shape[0];
        v.erase(v.begin() + static_cast<std::ptrdiff_t>((row0 + slice_rows) * cols), v.end());
        v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(row0 * cols));
      }
      if (qk_heads) {
        const uint64_t rows = t->shape[0], cols = t->shape.size() > 1 ? t->numel / rows : 1;
        unpermute_qk_rows(v, rows, cols, qk_heads, name);
      }
    };
    if (j.decision.dtype == quant::DType::Q4Block && gt == GgmlType::Q4_0 && t->shape.size() == 2 &&
        t->shape[1] % 32 == 0) {
      // the same blocks: copied, rows sliced (phi3) and un-permuted (llama Q/K) as whole rows
      j.exact = [t, qk_heads, row0, slice_rows]() -> std::optional<std::vector<uint8_t>> {
        const uint64_t rows = slice_rows ? slice_rows : t->shape[0];
        const uint64_t row_bytes = t->data.size() / t->shape[0];
        std::vector<uint8_t> bytes(t->data.begin() + static_cast<std::ptrdiff_t>(row0 * row_bytes),
                                   t->data.begin() + static_cast<std::ptrdiff_t>((row0 + rows) * row_bytes));
        if (qk_heads) {
          const std::vector<uint64_t> perm = llama_qk_permutation(rows, qk_heads);
          std::vector<uint64_t> inv(rows);
          for (uint64_t p = 0; p < rows; ++p) inv[perm[p]] = p;
          bytes = permute_rows(bytes, inv);
        }
        GgufTensor part = *t;
        part.shape[0] = rows;
        part.ne.back() = rows;
        part.numel = rows * t->shape[1];
        part.data = bytes;
        return cmf_exact_from_ggml(quant::DType::Q4Block, part);
      };
    }
    j.release = [&g, t] { g.release(*t); };
    j.source_bytes = slice_rows ? t->data.size() / t->shape[0] * slice_rows : t->data.size();
    jobs.push_back(std::move(j));
  }
  write_jobs(jobs, w, h, opt.plan, resolve_threads(opt.threads), opt.allow_nonfinite, opt.progress,
             "converting", res);
  res.input_bytes = g.total_tensor_bytes();
  return res;
}

}  // namespace

ConvertResult convert_checkpoint(const ConvertOptions& opt) {
  if (std::filesystem::is_regular_file(
          opt.model_dir)) {  // a GGUF file, else read_hf_files says what it takes
    char magic[4] = {};
    std::ifstream(opt.model_dir, std::ios::binary).read(magic, 4);
    if (std::string_view(magic, 4) == "GGUF") return convert_gguf(opt);
  }
  ConvertResult res;
  HfFiles files = read_hf_files(opt.model_dir);
  cmf::ModelArch arch = arch_from_hf(files.config);
  Checkpoint ckpt(opt.model_dir);
  TensorMapping mapping = map_tensors(ckpt, arch);
  if (mapping.has_mtp) {
    cmf::Mtp m = arch.mtp.value_or(cmf::Mtp{});
    m.num_layers = mapping.mtp_layers;
    arch.mtp = m;
  } else {
    arch.mtp.reset();  // declared but not shipped: nothing to run
  }
  const bool moe = arch.moe.has_value();

  cmf::Header h;
  h.arch = arch;
  h.quant_type = header_quant_type(opt.plan.base);
  h.tokenizer_config = bundle_from_hf(files);
  const bool from_jinja = files.chat_template_jinja && h.tokenizer_config &&
                          h.tokenizer_config->chat_template == files.chat_template_jinja;
  check_chat_template(
      h.tokenizer_config, opt,
      (std::filesystem::path(opt.model_dir) / (from_jinja ? "chat_template.jinja" : "tokenizer_config.json"))
          .string());
  nlohmann::json prov;
  prov["tool"] = std::string(kTool) + " convert";
  std::string source = std::filesystem::path(opt.model_dir).lexically_normal().string();
  while (source.size() > 1 && source.back() == '/') source.pop_back();
  const std::string base = std::filesystem::path(source).filename().string();
  prov["source_model"] = base.empty() || base == "." || base == ".." ? opt.model_dir : base;
  prov["source_format"] = "safetensors";
  prov["plan"] = opt.plan.to_json();
  const nlohmann::json tc = text_config(files.config);
  nlohmann::json extras;
  extras["model_type"] = files.config.value("model_type", std::string());
  if (tc.contains("rope_scaling") && !tc["rope_scaling"].is_null())
    extras["rope_scaling"] = tc["rope_scaling"];
  if (tc.contains("torch_dtype")) extras["torch_dtype"] = tc["torch_dtype"];
  prov["hf_config_extras"] = extras;
  h.provenance = prov;

  std::vector<Job> jobs;
  jobs.reserve(mapping.tensors.size());
  for (const auto& mt : mapping.tensors) {
    Job j;
    j.name = mt.name;
    j.shape = mt.shape;
    j.decision = decide(opt.plan, mt.name, mt.shape, moe);
    const StTensor* src = &mt.src;
    if (src->dtype == StDType::F32 && src->numel > 0 &&
        reinterpret_cast<uintptr_t>(src->data.data()) % alignof(float) == 0) {
      // The mapping is page-aligned and the range 4-aligned: the bytes are the f32 values
      // (little-endian host, util/half.h).
      j.direct = {reinterpret_cast<const float*>(src->data.data()), src->numel};
    }
    j.load = [src](std::vector<float>& v) {
      v.resize(src->numel);
      to_f32(*src, v);
    };
    // Only whole pages inside this tensor's bytes are dropped, so a page shared with a
    // neighbour (or with the next slice of a fused phi3 tensor) stays mapped.
    j.release = [&ckpt, src] { ckpt.release(*src); };
    j.source_bytes = mt.src.data.size();
    jobs.push_back(std::move(j));
  }
  cmf::WriterOptions wo;
  wo.expected_tensors = jobs.size();
  wo.shard_max_bytes = opt.shard_max_bytes;
  cmf::Writer w(opt.output, wo);
  if (files.tokenizer_from_model)
    res.warnings.push_back(
        fmt::format("no tokenizer.json in '{}': the tokenizer was built from tokenizer.model (as "
                    "transformers' LlamaConverter "
                    "does)",
                    opt.model_dir));
  if (files.tokenizer_json) {
    w.set_vocab(std::vector<uint8_t>(files.tokenizer_json->begin(), files.tokenizer_json->end()));
  } else {
    res.warnings.push_back(
        fmt::format("no tokenizer.json in '{}': the file carries no vocab section", opt.model_dir));
  }
  write_jobs(jobs, w, h, opt.plan, resolve_threads(opt.threads), opt.allow_nonfinite, opt.progress,
             "converting", res);
  res.input_bytes = ckpt.total_bytes();
  return res;
}

ConvertResult requant_file(const RequantOptions& opt) {
  ConvertResult res;
  cmf::Reader r = cmf::Reader::open(opt.input);
  r.check_sections();  // a changed header or section is refused, not laundered into a file with fresh hashes
  cmf::Header h = r.header();
  const bool moe = h.arch.moe.has_value();
  std::vector<Job> jobs;
  for (const auto& t : r.tensors()) {
    Job j;
    j.name = t.name;
    j.shape = t.shape;
    const std::span<const uint8_t> payload = r.payload(t);
    j.source_bytes = payload.size();
    const quant::DType src_dtype = t.dtype;
    const std::string input = opt.input;
    if (!quant::dtype_has_codec(src_dtype)) {
      j.decision.dtype = src_dtype;
      j.decision.reason = "no codec: copied";
      j.raw = [payload, t, input] { return checked_payload(payload, t, input); };
    } else {
      j.decision = decide(opt.plan, t.name, t.shape, moe);
      if (j.decision.dtype == src_dtype) {
        j.raw = [payload, t, input] { return checked_payload(payload, t, input); };
      } else {
        const std::vector<uint64_t> shape = t.shape;
        const std::string name = t.name;
        j.measure = !quant::is_float_dtype(src_dtype);
        j.load = [payload, shape, src_dtype, name, t, input](std::vector<float>& v) {
          uint64_t n = 1;
          for (uint64_t x : shape) n *= x;
          v.resize(n);
          (void)checked_payload(payload, t, input);
          try {
            quant::decode(src_dtype, shape, payload, v);
          } catch (const Error& e) {
            throw Error(e.kind(), fmt::format("tensor '{}': {}", name, e.message()));
          }
        };
      }
    }
    jobs.push_back(std::move(j));
  }
  nlohmann::json prov = h.provenance.is_object() ? h.provenance : nlohmann::json::object();
  if (!h.provenance.is_null() && !h.provenance.is_object()) prov["previous"] = h.provenance;
  nlohmann::json rq;
  rq["tool"] = std::string(kTool) + " requant";
  rq["plan"] = opt.plan.to_json();
  prov["requant"] = rq;
  h.provenance = prov;
  h.quant_type = header_quant_type(opt.plan.base);
  cmf::WriterOptions wo;
  wo.expected_tensors = jobs.size();
  check_section(r.masks_bytes(), r.header().section_hashes.masks, "masks", opt.input);
  check_section(r.vocab(), r.header().section_hashes.vocab, "vocab", opt.input);
  cmf::Writer w(opt.output, wo);
  if (!r.masks_bytes().empty()) w.set_masks_raw({r.masks_bytes().begin(), r.masks_bytes().end()});
  if (!r.vocab().empty()) w.set_vocab({r.vocab().begin(), r.vocab().end()});
  write_jobs(jobs, w, h, opt.plan, resolve_threads(opt.threads), opt.allow_nonfinite, opt.progress,
             "requantizing", res);
  for (const auto& j : jobs) res.input_bytes += j.source_bytes;
  return res;
}

namespace {

/// compact_file's body; `masks` non-null replaces the masks section.
ConvertResult copy_tight(const std::string& input, const std::string& output, bool progress,
                         const cmf::MaskCatalog* masks) {
  ConvertResult res;
  cmf::Reader r = cmf::Reader::open(input);
  r.check_sections();  // as requant: nothing damaged gets fresh hashes
  std::vector<Job> jobs;
  for (const auto& t : r.tensors()) {
    Job j;
    j.name = t.name;
    j.shape = t.shape;
    j.decision.dtype = t.dtype;
    const std::span<const uint8_t> payload = r.payload(t);
    j.raw = [payload, t, input] { return checked_payload(payload, t, input); };
    j.source_bytes = payload.size();
    jobs.push_back(std::move(j));
  }
  check_section(r.masks_bytes(), r.header().section_hashes.masks, "masks", input);
  check_section(r.vocab(), r.header().section_hashes.vocab, "vocab", input);
  cmf::WriterOptions wo;
  wo.expected_tensors = jobs.size();
  // Tight: room for the envelope, this header (+1 KiB: the hashes are regenerated) and the
  // directory the writer will encode (its size depends on the names and shapes only), not the
  // 1 MiB default that leaves room for a header to grow.
  std::vector<cmf::DirRecord> dir;
  for (const auto& t : r.tensors()) dir.push_back({t.name, t.dtype, t.shape});
  // The header is measured without the dead-byte list of in-place growth (cmf/append.h), which the
  // writer drops: compacting a grown file gives the bytes compacting the same content written fresh does.
  cmf::Header header = r.header();
  header.extra.erase(std::string(cmf::kDeadBytesKey));
  wo.reserve_bytes =
      cmf::kEnvelopeSize + cmf::serialize_header(header).size() + 1024 + cmf::encode_directory(dir).size();
  std::vector<uint8_t> new_masks;
  if (masks) {
    new_masks = cmf::encode_masks(*masks, r.header().arch);  // before the output exists
    wo.reserve_bytes += 4096;                                // the header's masks hash and features may grow
  }
  cmf::Writer w(output, wo);
  if (masks)
    w.set_masks_raw(std::move(new_masks));
  else if (!r.masks_bytes().empty())
    w.set_masks_raw({r.masks_bytes().begin(), r.masks_bytes().end()});
  if (!r.vocab().empty()) w.set_vocab({r.vocab().begin(), r.vocab().end()});
  run_pipeline(jobs, w, 1, true, progress, masks ? "copying" : "compacting");
  res.outputs = w.finish(header);
  for (const auto& j : jobs) res.input_bytes += j.source_bytes;
  res.tensors = jobs.size();
  return res;
}

}  // namespace

ConvertResult compact_file(const std::string& input, const std::string& output, bool progress) {
  return copy_tight(input, output, progress, nullptr);
}

ConvertResult write_with_masks(const std::string& input, const std::string& output,
                               const cmf::MaskCatalog& masks, bool progress) {
  return copy_tight(input, output, progress, &masks);
}

}  // namespace cortiq::convert
