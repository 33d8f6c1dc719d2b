// add_load_flags (cli/command.h): the model-loading flags shared by run, ppl, serve and bench, and
// resolve_model_path: a .gguf model converted once into the cache folder.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <vector>

#include "cli/command.h"
#include "cli/gguf_input.h"
#include "cmf/reader.h"
#include "cmf/signature.h"
#include "convert/convert.h"
#include "runtime/session.h"
#include "util/error.h"

namespace cortiq::cli {

namespace {

namespace fs = std::filesystem;

std::mutex g_temp_mu;
std::vector<std::string> g_temps;  // temporary CMFs of this process, removed at exit

void remove_temps() {
  std::lock_guard<std::mutex> lk(g_temp_mu);
  for (const auto& p : g_temps) ::unlink(p.c_str());
}

bool is_gguf(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  char magic[4] = {};
  std::ifstream(path, std::ios::binary).read(magic, 4);
  return std::string_view(magic, 4) == "GGUF";
}

/// The cache folder, created; nullopt when it cannot be created or written.
std::optional<fs::path> cache_dir(std::string& why) {
  fs::path d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    d = fs::path(x) / "cortiq";
  else if (const char* h = std::getenv("HOME"); h && *h)
    d = fs::path(h) / ".cache" / "cortiq";
  else {
    why = "neither XDG_CACHE_HOME nor HOME is set";
    return std::nullopt;
  }
  std::error_code ec;
  fs::create_directories(d, ec);
  if (ec || ::access(d.c_str(), W_OK) != 0) {
    why = fmt::format("the cache folder '{}' cannot be {}", d.string(), ec ? "created" : "written");
    return std::nullopt;
  }
  return d;
}

}  // namespace

void add_gguf_flag(CLI::App* cmd, std::string& quant) {
  cmd->add_option(
      "--quant", quant,
      "for a .gguf model: the codec of the CMF it is converted to once (cached under "
      "$XDG_CACHE_HOME/cortiq); default: each tensor's own precision (Q8_0 → q8, Q4_0 → q4 exactly, "
      "F16 → f16)");
}

std::string resolve_model_path(const std::string& path, const std::string& quant) {
  if (!is_gguf(path)) return path;
  const auto sha = cmf::sha256_file(path);
  std::string hex;
  for (size_t i = 0; i < 8; ++i) hex += fmt::format("{:02x}", sha[i]);
  convert::ConvertOptions o;
  o.model_dir = path;
  o.plan.base = convert::parse_quant(quant.empty() ? "q8" : quant);
  o.keep_source_precision = quant.empty();
  const std::string key = fmt::format("gguf-{}-{}.cmf", hex, quant.empty() ? "src" : o.plan.base.name);
  std::string why;
  const auto dir = cache_dir(why);
  if (dir) {
    const fs::path cached = *dir / key;
    std::error_code ec;
    if (fs::exists(cached, ec)) {
      try {
        (void)cmf::Reader::open(cached.string());
        return cached.string();
      } catch (const Error&) {
        std::fprintf(stderr, "note: the cached '%s' does not open; converting again\n", cached.c_str());
      }
    }
    o.output = cached.string();
  } else {
    const fs::path tmp = fs::temp_directory_path() / fmt::format("cortiq-{}-{}", ::getpid(), key);
    std::fprintf(stderr, "note: %s: converting '%s' to the temporary file '%s' (removed at exit)\n",
                 why.c_str(), path.c_str(), tmp.c_str());
    o.output = tmp.string();
    std::lock_guard<std::mutex> lk(g_temp_mu);
    if (g_temps.empty()) std::atexit(remove_temps);
    g_temps.push_back(o.output);
  }
  o.progress = true;
  const auto r = convert::convert_checkpoint(o);
  for (const auto& w : r.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (dir)
    std::fprintf(stderr, "converted '%s' once to '%s' (%s; reused from now on)\n", path.c_str(),
                 o.output.c_str(),
                 quant.empty() ? "source precision" : ("--quant " + o.plan.base.name).c_str());
  return o.output;
}

void add_load_flags(CLI::App* cmd, runtime::LoadOptions& opts, unsigned which) {
  if (which & kLoadThreads) cmd->add_option("-t,--threads", opts.threads, "kernel threads (0 = all cores)");
  if (which & kLoadExact)
    cmd->add_flag("--exact", opts.exact, "f32 activations in every matvec (no int8 approximation)");
  if (which & kLoadNoMmap)
    cmd->add_flag(
        "--no-mmap", opts.no_mmap,
        "load the file into huge-page memory instead of mmap'ing it (faster decode, file-sized RSS)");
  if (which & kLoadKvF16) cmd->add_flag("--kv-f16", opts.kv_f16, "store the KV cache in f16");
  if (which & kLoadCheckTensors)
    cmd->add_flag("--check-tensors", opts.check_tensors,
                  "verify every tensor's hash before running (as `cortiq verify`; reads the whole file). The "
                  "header, directory, masks, vocab and index hashes are checked on every open");
  if (which & kLoadSkill) {
    cmd->add_option("--skill", opts.skill,
                    "skill of the file to run on its backbone: an id, 'auto' (route on the prompt) or 'none' "
                    "(the backbone). Unlike the reference, routing falls back to the backbone when no skill "
                    "fits the prompt (novelty)");
    cmd->add_option("--blend", opts.blend,
                    "blend of skills 'id:w,id:w' (weights normalized; the touched tensors are materialized "
                    "in f32), or 'auto': the 2 skills of lowest routing energy, softmax(-E/0.4)");
  }
}

}  // namespace cortiq::cli
