// Bad files end to end (issue 27, items 4 and 5): a model whose header JSON or vocab was edited
// after it was written is refused by every command that runs it (HashMismatch naming the section);
// a GGUF with a zero dimension or a general.alignment that is not u32 is a typed error of
// `cortiq convert` that leaves nothing behind; a convert killed by SIGTERM or SIGINT mid-way leaves
// no temporary and no partial output. Inputs come from the embedded models/stories260K (always
// in the repo); the GGUF files and the larger checkpoint are written here, without python.
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cmf/reader.h"
#include "convert/safetensors.h"
#include "shell.h"

namespace {

namespace fs = std::filesystem;

std::string run_sh(const std::string& cmd, int* rc) {
  return cortiq::test::sh(cmd + " 2>&1", rc);
}
int exit_status(int rc) {
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}
std::string cli(const std::string& args, int* rc) {
  return run_sh(std::string(CORTIQ_CLI_PATH) + " " + args, rc);
}
std::vector<uint8_t> slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}
void spit(const fs::path& p, const void* data, size_t n) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}
/// Names of the entries of folder `d` (sorted), to show what a failed command left there.
std::vector<std::string> entries(const fs::path& d) {
  std::vector<std::string> r;
  for (const auto& e : fs::directory_iterator(d)) r.push_back(e.path().filename().string());
  std::sort(r.begin(), r.end());
  return r;
}
std::string joined(const std::vector<std::string>& v) {
  return fmt::format("[{}]", fmt::join(v, ", "));
}

template <typename T>
void put(std::string& b, T v) {
  b.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_str(std::string& b, std::string_view s) {
  put<uint64_t>(b, s.size());
  b.append(s);
}

/// GGUF metadata value types used here.
enum : uint32_t { kU8 = 0, kU32 = 4, kI32 = 5, kF32 = 6, kString = 8, kU64 = 10 };

/// A llama GGUF v3 of the embedded stories260K checkpoint (f32, the HF shapes reversed, llama.cpp's
/// names; Q/K rows not permuted, which only changes the weights), written by hand. `zero_dim`: that
/// tensor is stored as ne [ne0, 0] with no data (the attn_q). `alignment_type`: also store
/// general.alignment = 32 as that value type.
std::string stories_gguf(const std::string& zero_dim = "", int alignment_type = -1) {
  const std::string src = std::string(CORTIQ_SOURCE_DIR) + "/models/stories260K";
  const nlohmann::json c = nlohmann::json::parse(std::ifstream(src + "/config.json"));
  std::string kv;
  uint64_t n_kv = 0;
  auto key = [&](const std::string& k, uint32_t type) {
    ++n_kv;
    put_str(kv, k);
    put<uint32_t>(kv, type);
  };
  auto u32 = [&](const std::string& k, uint64_t v) {
    key(k, kU32);
    put<uint32_t>(kv, static_cast<uint32_t>(v));
  };
  auto f32 = [&](const std::string& k, double v) {
    key(k, kF32);
    put<float>(kv, static_cast<float>(v));
  };
  key("general.architecture", kString);
  put_str(kv, "llama");
  u32("llama.context_length", c["max_position_embeddings"]);
  u32("llama.embedding_length", c["hidden_size"]);
  u32("llama.block_count", c["num_hidden_layers"]);
  u32("llama.feed_forward_length", c["intermediate_size"]);
  u32("llama.attention.head_count", c["num_attention_heads"]);
  u32("llama.attention.head_count_kv", c["num_key_value_heads"]);
  u32("llama.vocab_size", c["vocab_size"]);
  u32("llama.rope.dimension_count", c["head_dim"]);
  f32("llama.rope.freq_base", c["rope_theta"]);
  f32("llama.attention.layer_norm_rms_epsilon", c["rms_norm_eps"]);
  u32("general.file_type", 0);
  if (alignment_type >= 0) {
    key("general.alignment", static_cast<uint32_t>(alignment_type));
    if (alignment_type == kU8) put<uint8_t>(kv, 32);
    if (alignment_type == kU32) put<uint32_t>(kv, 32);
    if (alignment_type == kI32) put<int32_t>(kv, 32);
    if (alignment_type == kU64) put<uint64_t>(kv, 32);
  }
  static const std::pair<const char*, const char*> kLayer[] = {
      {"input_layernorm", "attn_norm"},    {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},      {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"}, {"post_attention_layernorm", "ffn_norm"},
      {"mlp.gate_proj", "ffn_gate"},       {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"}};
  auto gguf_name = [](const std::string& hf) -> std::string {
    if (hf == "model.embed_tokens.weight") return "token_embd.weight";
    if (hf == "model.norm.weight") return "output_norm.weight";
    const size_t dot = hf.find('.', 13);  // after "model.layers."
    const std::string layer = hf.substr(13, dot - 13), tail = hf.substr(dot + 1);
    for (const auto& [h, g] : kLayer)
      if (tail == std::string(h) + ".weight") return fmt::format("blk.{}.{}.weight", layer, g);
    ADD_FAILURE() << "no GGUF name for " << hf;
    return hf;
  };
  const cortiq::convert::Checkpoint ck(src);
  std::string table, data;
  uint64_t n_t = 0;
  for (const cortiq::convert::StTensor* t : ck.tensors()) {
    const std::string name = gguf_name(t->name);
    std::vector<uint64_t> ne(t->shape.rbegin(), t->shape.rend());
    const std::vector<float> v = cortiq::convert::to_f32(*t);
    std::string bytes(reinterpret_cast<const char*>(v.data()), v.size() * 4);
    if (name == zero_dim) ne = {ne[0], 0}, bytes.clear();
    ++n_t;
    put_str(table, name);
    put<uint32_t>(table, static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) put<uint64_t>(table, d);
    put<uint32_t>(table, 0);  // GGML_TYPE_F32
    put<uint64_t>(table, data.size());
    data += bytes;
    data.resize((data.size() + 31) / 32 * 32, '\0');
  }
  std::string out = "GGUF";
  put<uint32_t>(out, 3);
  put<uint64_t>(out, n_t);
  put<uint64_t>(out, n_kv);
  out += kv + table;
  out.resize((out.size() + 31) / 32 * 32, '\0');
  return out + data;
}

class BadFilesE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("cortiq_bad_files_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    int rc = 0;
    log_ = cli("convert " + std::string(CORTIQ_SOURCE_DIR) + "/models/stories260K --quant f32 -o " +
                   (dir_ / "s.cmf").string(),
               &rc);
    ok_ = rc == 0;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  /// A fresh empty folder under dir_.
  static fs::path folder(const std::string& name) {
    const fs::path d = dir_ / name;
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }
  /// A copy of the converted model with the byte at `pick(bytes, envelope)` replaced by `to`.
  static fs::path edited_copy(
      const std::string& name,
      const std::function<uint64_t(const std::vector<uint8_t>&, const cortiq::cmf::Envelope&)>& pick,
      uint8_t to) {
    std::vector<uint8_t> b = slurp(dir_ / "s.cmf");
    const cortiq::cmf::Envelope e = cortiq::cmf::Reader::open((dir_ / "s.cmf").string()).envelope();
    const uint64_t at = pick(b, e);
    EXPECT_LT(at, b.size());
    EXPECT_NE(b[at], to);
    b[at] = to;
    spit(dir_ / name, b.data(), b.size());
    return dir_ / name;
  }
  static inline fs::path dir_;
  static inline std::string log_;
  static inline bool ok_ = false;
};

/// `run`, `ppl`, `bench` and `serve` on `model` all exit 1 with a message that contains `expect`
/// (each under `timeout 60`: a serve that did load the file would otherwise never end).
void expect_every_loader_refuses(const fs::path& model, const fs::path& text, const std::string& expect) {
  const std::string m = model.string();
  for (const std::string& cmd : {"run " + m + " -p Once -n 4 --greedy --threads 1",
                                 "ppl " + m + " -f " + text.string() + " -c 16 --chunks 1 --threads 1",
                                 "bench " + m + " -p 8 -n 8 -r 1 -t 1", "serve " + m + " --port 0"}) {
    int rc = 0;
    const std::string log = run_sh("timeout 60 " + std::string(CORTIQ_CLI_PATH) + " " + cmd, &rc);
    EXPECT_EQ(exit_status(rc), 1) << cmd << "\n" << log;
    EXPECT_NE(log.find("Error: HashMismatch: " + m + ": " + expect), std::string::npos) << cmd << "\n" << log;
  }
}

// The file: rope_theta changed in the header JSON (same length, still valid JSON, so it
// parses and would run with another RoPE base). Every loader refuses it naming the header.
TEST_F(BadFilesE2E, EditedHeaderJsonIsRefused) {
  ASSERT_TRUE(ok_) << log_;
  const fs::path text = dir_ / "text.txt";
  spit(text, "Once upon a time there was a little girl named Lily.", 52);
  const fs::path h = edited_copy(
      "header.cmf",
      [](const std::vector<uint8_t>& b, const cortiq::cmf::Envelope& e) -> uint64_t {
        const std::string json(b.begin() + static_cast<ptrdiff_t>(e.header.off),
                               b.begin() + static_cast<ptrdiff_t>(e.header.end()));
        const size_t p = json.find("\"rope_theta\":10000");
        EXPECT_NE(p, std::string::npos) << json;
        return p == std::string::npos ? b.size() : e.header.off + p + 13;  // 10000 → 20000
      },
      '2');
  EXPECT_EQ(cortiq::cmf::Reader::open(h.string()).header().arch.rope_theta, 20000.0);  // it parses
  expect_every_loader_refuses(h, text, "section 'header': hash mismatch");
  // and requant / compact refuse it too, instead of writing it out again with fresh hashes
  for (const std::string& cmd : {"requant " + h.string() + " --quant q8 -o " + (dir_ / "laundered.cmf").string(),
                                 "compact " + h.string() + " -o " + (dir_ / "laundered.cmf").string()}) {
    int rc = 0;
    const std::string log = run_sh("timeout 60 " + std::string(CORTIQ_CLI_PATH) + " " + cmd, &rc);
    EXPECT_EQ(exit_status(rc), 1) << cmd << "\n" << log;
    EXPECT_NE(log.find("section 'header': hash mismatch"), std::string::npos) << cmd << "\n" << log;
    EXPECT_FALSE(fs::exists(dir_ / "laundered.cmf")) << cmd;
  }
}

// One byte of the vocab section (the tokenizer.json) changed: refused before the tokenizer is built.
TEST_F(BadFilesE2E, FlippedVocabByteIsRefused) {
  ASSERT_TRUE(ok_) << log_;
  const fs::path v = edited_copy(
      "vocab.cmf",
      [](const std::vector<uint8_t>& b, const cortiq::cmf::Envelope& e) -> uint64_t {
        uint64_t at = e.vocab.off + e.vocab.len / 2;
        while (at < e.vocab.end() && !std::isalpha(b[at])) ++at;  // a letter of the JSON
        return at;
      },
      0);
  int rc = 0;
  const std::string log = cli("run " + v.string() + " -p Once -n 4 --greedy --threads 1", &rc);
  EXPECT_EQ(exit_status(rc), 1) << log;
  EXPECT_NE(log.find("Error: HashMismatch: " + v.string() + ": section 'vocab': hash mismatch"),
            std::string::npos)
      << log;
}

// The unmodified file still runs (8 greedy tokens after "Once"), and gives the same text with
// --check-tensors.
TEST_F(BadFilesE2E, UnmodifiedFileRuns) {
  ASSERT_TRUE(ok_) << log_;
  int rc = 0;
  const std::string cmd = "run " + (dir_ / "s.cmf").string() + " -p Once -n 8 --greedy --threads 1";
  const std::string out = cortiq::test::sh(std::string(CORTIQ_CLI_PATH) + " " + cmd + " 2>/dev/null", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, " upon a time, there was a little\n");  // the model's greedy continuation
  const std::string checked =
      cortiq::test::sh(std::string(CORTIQ_CLI_PATH) + " " + cmd + " --check-tensors 2>/dev/null", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(checked, out);
}

// A GGUF whose attn_q (or attn_k) has ne [64, 0] used to crash convert with SIGFPE and leave its
// .tmp.PID; it is a Parse error naming the tensor, and the output folder stays empty. The same
// GGUF without the zero converts (the file is otherwise valid).
TEST_F(BadFilesE2E, ZeroDimensionGgufIsAParseErrorAndLeavesNothing) {
  const fs::path in = folder("gguf_in"), out = folder("gguf_out");
  const std::string good = stories_gguf();
  spit(in / "good.gguf", good.data(), good.size());
  int rc = 0;
  std::string log =
      cli("convert " + (in / "good.gguf").string() + " --quant f32 -o " + (out / "m.cmf").string(), &rc);
  ASSERT_EQ(exit_status(rc), 0) << log;
  fs::remove(out / "m.cmf");
  for (const std::string victim : {"blk.0.attn_q.weight", "blk.3.attn_k.weight"}) {
    const std::string bad = stories_gguf(victim);
    spit(in / "bad.gguf", bad.data(), bad.size());
    log = cli("convert " + (in / "bad.gguf").string() + " --quant q8 -o " + (out / "m.cmf").string(), &rc);
    EXPECT_EQ(exit_status(rc), 1) << victim << ": " << log;
    EXPECT_NE(log.find("Error: Parse: gguf '" + (in / "bad.gguf").string() + "': tensor '" + victim + "'"),
              std::string::npos)
        << log;
    EXPECT_NE(log.find("dimension ne[1] is 0"), std::string::npos) << log;
    EXPECT_TRUE(fs::is_empty(out)) << victim << " left " << joined(entries(out));
  }
}

// general.alignment stored as i32, u64 or u8 (llama.cpp reads only u32) is a Parse error naming the
// key and the type; as u32 the same file converts.
TEST_F(BadFilesE2E, GgufAlignmentNotU32IsRefused) {
  const fs::path in = folder("align_in"), out = folder("align_out");
  struct Case {
    int type;
    const char* name;
  };
  for (const Case c : {Case{kI32, "i32"}, Case{kU64, "u64"}, Case{kU8, "u8"}, Case{kU32, "u32"}}) {
    const std::string g = stories_gguf("", c.type);
    spit(in / "a.gguf", g.data(), g.size());
    int rc = 0;
    const std::string log =
        cli("convert " + (in / "a.gguf").string() + " --quant f32 -o " + (out / "m.cmf").string(), &rc);
    if (c.type == kU32) {
      EXPECT_EQ(exit_status(rc), 0) << log;
      EXPECT_TRUE(fs::exists(out / "m.cmf"));
      continue;
    }
    EXPECT_EQ(exit_status(rc), 1) << c.name << ": " << log;
    EXPECT_NE(log.find(fmt::format("Error: Parse: gguf '{}': general.alignment is stored as {} (type {})",
                                   (in / "a.gguf").string(), c.name, c.type)),
              std::string::npos)
        << log;
    EXPECT_TRUE(fs::is_empty(out)) << c.name << " left " << joined(entries(out));
  }
}

// ---------------------------------------------------------------- signals

/// A random-weight llama checkpoint (config.json + model.safetensors, f32) large enough that its
/// conversion to q4tp takes seconds: hidden 512, 6 layers, ffn 1536 (~19M weights, 76 MB).
fs::path big_checkpoint(const fs::path& d) {
  if (fs::exists(d / "model.safetensors")) return d;
  fs::create_directories(d);
  const uint64_t H = 512, F = 1536, V = 512, L = 6;
  const nlohmann::json cfg = {{"architectures", {"LlamaForCausalLM"}},
                              {"model_type", "llama"},
                              {"hidden_size", H},
                              {"intermediate_size", F},
                              {"num_hidden_layers", L},
                              {"num_attention_heads", 8},
                              {"num_key_value_heads", 8},
                              {"vocab_size", V},
                              {"max_position_embeddings", 512},
                              {"rms_norm_eps", 1e-5},
                              {"rope_theta", 10000.0},
                              {"tie_word_embeddings", true},
                              {"torch_dtype", "float32"}};
  std::ofstream(d / "config.json") << cfg.dump(2);
  std::vector<std::pair<std::string, std::vector<uint64_t>>> ts = {{"model.embed_tokens.weight", {V, H}},
                                                                   {"model.norm.weight", {H}}};
  for (uint64_t l = 0; l < L; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    for (const char* n : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"})
      ts.push_back({p + n + ".weight", {H, H}});
    ts.push_back({p + "mlp.gate_proj.weight", {F, H}});
    ts.push_back({p + "mlp.up_proj.weight", {F, H}});
    ts.push_back({p + "mlp.down_proj.weight", {H, F}});
    ts.push_back({p + "input_layernorm.weight", {H}});
    ts.push_back({p + "post_attention_layernorm.weight", {H}});
  }
  nlohmann::json header = nlohmann::json::object();
  uint64_t off = 0;
  for (const auto& [name, shape] : ts) {
    const uint64_t n = shape.size() == 1 ? shape[0] : shape[0] * shape[1];
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {off, off + 4 * n}}};
    off += 4 * n;
  }
  std::string h = header.dump();
  h.resize((h.size() + 7) / 8 * 8, ' ');
  std::ofstream f(d / "model.safetensors", std::ios::binary);
  const uint64_t hl = h.size();
  f.write(reinterpret_cast<const char*>(&hl), 8);
  f << h;
  uint64_t state = 88172645463325252ull;  // xorshift64: weights uniform in [-0.05, 0.05), norms 1
  std::vector<float> buf;
  for (const auto& [name, shape] : ts) {
    const uint64_t n = shape.size() == 1 ? shape[0] : shape[0] * shape[1];
    buf.assign(n, 1.0f);
    if (shape.size() == 2)
      for (float& x : buf) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        x = static_cast<float>(static_cast<double>(state >> 11) / 9007199254740992.0 * 0.1 - 0.05);
      }
    f.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(4 * n));
  }
  return d;
}

/// Starts `cortiq args...` with its output to /dev/null; returns the pid.
pid_t spawn(const std::vector<std::string>& args) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> argv{const_cast<char*>(CORTIQ_CLI_PATH)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execv(CORTIQ_CLI_PATH, argv.data());
    ::_exit(127);
  }
  return pid;
}

/// Waits (up to 120 s) until `out` holds a `.tmp.<pid>` temporary of more than 2 MiB (past the
/// 1 MiB header gap: tensors are being written; the whole file is ~12 MB), the writer then being
/// mid-way; false if the process ended first.
bool wait_for_temporary(const fs::path& out, pid_t pid) {
  const std::string suffix = ".tmp." + std::to_string(pid);
  for (int i = 0; i < 120000; ++i) {
    for (const auto& e : fs::directory_iterator(out)) {
      const std::string n = e.path().filename().string();
      std::error_code ec;
      if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0 &&
          fs::file_size(e.path(), ec) > (2u << 20) && !ec)
        return true;
    }
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// A convert (and a requant) killed by SIGTERM or SIGINT while it writes dies of that signal and
// leaves nothing in the output folder: no temporary, no partial .cmf.
TEST_F(BadFilesE2E, KilledConvertLeavesNoTemporary) {
  const fs::path ck = big_checkpoint(dir_ / "big");
  const fs::path q8 = dir_ / "big-q8.cmf";
  int rc = 0;
  const std::string log = cli("convert " + ck.string() + " --quant q8 -o " + q8.string(), &rc);
  ASSERT_EQ(exit_status(rc), 0) << log;
  for (const std::string cmd : {"convert", "requant"}) {
    for (const int sig : {SIGTERM, SIGINT}) {
      const fs::path out = folder(fmt::format("killed_{}_{}", cmd, sig));
      const pid_t pid = spawn({cmd, cmd == "convert" ? ck.string() : q8.string(), "--quant", "q4tp",
                               "--threads", "1", "-o", (out / "big.cmf").string()});
      ASSERT_GT(pid, 0);
      const bool mid_way = wait_for_temporary(out, pid);
      ASSERT_TRUE(mid_way) << cmd << ": no temporary grew while it ran; left " << joined(entries(out));
      ASSERT_EQ(::kill(pid, sig), 0);
      int st = 0;
      ASSERT_EQ(::waitpid(pid, &st, 0), pid);
      EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == sig) << cmd << " signal " << sig << ": status " << st;
      EXPECT_TRUE(fs::is_empty(out)) << cmd << " signal " << sig << " left " << joined(entries(out));
    }
  }
}

}  // namespace
