// `cortiq ppl <model.cmf> -f FILE` — perplexity: llama.cpp's chunked procedure (default) or the
// reference's prefix procedure (--mode prefix). Result on stdout; a progress bar on stderr when it
// is a terminal.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include "cli/command.h"
#include "cli/gguf_input.h"
#include "runtime/perplexity.h"
#include "runtime/session.h"
#include "specialize/skill_choice.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/progress.h"
#include "util/utf8.h"

namespace cortiq::cli {
namespace {

struct PplArgs {
  std::string model, file, mode = "chunked";
  size_t ctx = 512, batch = 0, tokens = 1024, parallel = 1;
  int64_t chunks = -1;        ///< --chunks: score at most the first N chunks (-1 = all)
  bool ctx_given = false;     ///< --ctx on the command line (chunked mode only)
  bool tokens_given = false;  ///< --tokens on the command line (prefix mode only)
  runtime::LoadOptions load;  ///< --threads (default 0 = all cores), --exact, --no-mmap, --kv-f16, -t
};

/// "1 token", "2 tokens".
std::string tokens_str(size_t n) {
  return std::to_string(n) + (n == 1 ? " token" : " tokens");
}

void ppl_cmd(const PplArgs& a) {
  const std::string text = read_file(a.file);
  // a text file, as the help says: binary input would be scored as byte-fallback noise
  if (const size_t bad = first_invalid_utf8(text); bad != std::string_view::npos)
    fail(ErrorKind::Parse, "'{}' is not UTF-8 text: byte {} (0x{:02X}) starts no valid sequence", a.file, bad,
         static_cast<unsigned char>(text[bad]));
  if (a.mode == "prefix" && a.ctx_given)
    fail(ErrorKind::InvalidArgument,
         "--ctx sets the chunk length of chunked mode; prefix mode takes --tokens");
  if (a.mode == "prefix" && a.chunks >= 0)
    fail(ErrorKind::InvalidArgument, "--chunks applies to chunked mode; prefix mode takes --tokens");
  if (a.mode == "chunked" && a.tokens_given)
    fail(ErrorKind::InvalidArgument,
         "--tokens applies to prefix mode (--mode prefix); chunked mode takes --ctx and --chunks");
  runtime::LoadOptions lo = a.load;
  lo.ctx = a.mode == "prefix" ? 0 : a.ctx;  // prefix: the model's context, --tokens checked below
  runtime::LoadedModel lm = runtime::load_model(resolve_model_path(a.model, a.load), lo);
  std::vector<uint32_t> ids = lm.encode_raw(text);
  if (const std::string routed = specialize::bind_routed(lm, lo, ids, false); !routed.empty())
    std::fprintf(stderr, "%s\n", routed.c_str());  // --skill/--blend auto: on the text's first 128 tokens
  const std::optional<uint32_t> bos = lm.add_bos ? lm.bos_id : std::nullopt;
  const size_t n_bos = bos && !ids.empty() && ids.front() == *bos ? 1 : 0;
  const size_t n_text = ids.size() - n_bos;  // the file's own tokens
  if (n_text == 0) fail(ErrorKind::InvalidArgument, "'{}' is empty: it has no tokens to score", a.file);
  runtime::PplResult r;
  std::optional<Progress> bar;
  runtime::PplOptions po;
  po.batch = a.batch;
  po.parallel = a.parallel;
  po.progress = [&](size_t n) { bar->advance(n); };  // on the engine's thread while this one waits
  if (a.mode == "chunked") {
    if (a.ctx > lm.model->arch().max_position_embeddings)
      fail(ErrorKind::InvalidArgument, "--ctx {} exceeds max_position_embeddings {}", a.ctx,
           lm.model->arch().max_position_embeddings);
    if (a.ctx >= 4 && ids.size() < a.ctx)
      fail(ErrorKind::InvalidArgument, "'{}' is too short: it has {}{}, fewer than one chunk of --ctx {}",
           a.file, tokens_str(n_text), n_bos ? " (plus BOS)" : "", a.ctx);
    const size_t text_tokens = ids.size();
    if (a.chunks > 0) ids.resize(std::min(ids.size(), static_cast<size_t>(a.chunks) * a.ctx));
    // said before the run, as llama-perplexity does
    std::printf("chunks: %zu x %zu tokens (text: %zu tokens), scored the second half of each\n",
                ids.size() / a.ctx, a.ctx, text_tokens);
    std::fflush(stdout);
    bar.emplace("perplexity", ids.size() / a.ctx * a.ctx, "tok");
    r = runtime::perplexity_chunked(lm, ids, a.ctx, bos, po);
    bar->finish();
  } else if (a.mode == "prefix") {
    if (a.tokens < 2)
      fail(ErrorKind::InvalidArgument, "--tokens must be ≥ 2 (the first token is not scored)");
    const uint64_t maxpos = lm.model->arch().max_position_embeddings;
    size_t limit = a.tokens;
    if (maxpos && limit > maxpos) {
      if (a.tokens_given)
        std::fprintf(
            stderr,
            "note: --tokens %zu exceeds this model's max_position_embeddings (%llu): using the first "
            "%llu tokens (%llu scored)\n",
            a.tokens, static_cast<unsigned long long>(maxpos), static_cast<unsigned long long>(maxpos),
            static_cast<unsigned long long>(maxpos - 1));
      limit = static_cast<size_t>(maxpos);
    }
    if (ids.size() > limit) ids.resize(limit);
    if (ids.size() < 2)
      fail(ErrorKind::InvalidArgument, "'{}' is too short: it has {}{}; prefix mode needs at least 2", a.file,
           tokens_str(n_text), n_bos ? " (plus BOS)" : "");
    bar.emplace("perplexity", ids.size(), "tok");
    r = runtime::perplexity_prefix(lm, ids, po);
    bar->finish();
  } else {
    fail(ErrorKind::InvalidArgument, "--mode must be 'chunked' or 'prefix' (got '{}')", a.mode);
  }
  std::printf("PPL = %.4f +/- %.5f over %zu tokens\n", r.ppl, r.ppl_stderr, r.tokens_scored);
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_stderr);  // llama-perplexity's line
}

void setup(CLI::App& root) {
  auto a = std::make_shared<PplArgs>();
  a->load.threads = 0;
  auto* c = root.add_subcommand("ppl", "Perplexity of a model on a text file");
  c->add_option("model", a->model, "model .cmf file (or .gguf: converted once, cached)")->required();
  c->add_option("-f,--file", a->file, "UTF-8 text file")->required();
  c->add_option("-c,--ctx", a->ctx, "chunk length in tokens (chunked mode, 512; at least 4)")
      ->check(at_least(4))
      ->each([a](const std::string&) { a->ctx_given = true; });
  c->add_option("--chunks", a->chunks, "score at most the first N chunks (chunked mode; -1 = all)")
      ->check(positive_or_minus_one("all chunks"));
  c->add_option("--batch", a->batch, "positions per forward call (0 = whole chunk)");
  c->add_option("--parallel", a->parallel,
                "chunks scored together, each in its own engine slot, as one batched step (1; chunked "
                "mode; the result does not depend on it)")
      ->check(at_least(1));
  c->add_option("--mode", a->mode, "chunked (llama.cpp llama-perplexity) | prefix (reference procedure)");
  c->add_option("--tokens", a->tokens,
                "prefix mode: tokens read from the start of the text, the first one unscored (1024, at most "
                "the model's context)")
      ->each([a](const std::string&) { a->tokens_given = true; });
  add_load_flags(c, a->load);
  add_gguf_flag(c, a->load);
  c->add_option("-t,--task", a->load.task, "task mask name, or 'off' (threads: --threads)");
  c->callback([a] { ppl_cmd(*a); });
}

}  // namespace

CORTIQ_COMMAND(21, setup);

}  // namespace cortiq::cli
