// `cortiq ppl <model.cmf> -f FILE` — perplexity: llama.cpp's chunked procedure (default) or the
// reference's prefix procedure (--mode prefix). Result on stdout; a progress bar on stderr when it
// is a terminal.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include "cli/command.h"
#include "cli/gguf_input.h"
#include "cli/ppl_kld.h"
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
  int64_t chunks = -1;          ///< --chunks: score at most the first N chunks (-1 = all)
  bool ctx_given = false;       ///< --ctx on the command line (chunked mode only)
  bool tokens_given = false;    ///< --tokens on the command line (prefix mode only)
  bool parallel_given = false;  ///< --parallel on the command line (chunked mode only)
  std::string kld_base;         ///< --kl-divergence-base F: write the logits there (or, with
                                ///< --kl-divergence, read them from there and compare)
  bool kld = false;             ///< --kl-divergence
  runtime::LoadOptions load;  ///< -t/--threads (default 0 = all cores), --exact, --no-mmap, --kv-f16, --task
  std::string gguf_quant;     ///< --quant for a .gguf model (cli/gguf_input.h)
};

/// "1 token", "2 tokens".
std::string tokens_str(size_t n) {
  return std::to_string(n) + (n == 1 ? " token" : " tokens");
}

void ppl_cmd(const PplArgs& a) {
  if (a.kld && a.kld_base.empty())
    fail(ErrorKind::InvalidArgument,
         "--kl-divergence compares against --kl-divergence-base F (written by an "
         "earlier `ppl --kl-divergence-base F` run of the base model)");
  if (!a.kld_base.empty() && a.mode != "chunked")
    fail(ErrorKind::InvalidArgument, "--kl-divergence-base applies to chunked mode");
  if (a.file.empty() && !a.kld)
    fail(ErrorKind::InvalidArgument,
         "-f/--file is required (only --kl-divergence reads the text from the base)");
  std::optional<KldBaseReader> base;
  if (a.kld) {
    base.emplace(a.kld_base);
    if (a.ctx_given && a.ctx != base->header().n_ctx)
      fail(ErrorKind::InvalidArgument, "--ctx {} differs from the base's chunk length {} ('{}')", a.ctx,
           base->header().n_ctx, a.kld_base);
  }
  const std::string text = a.file.empty() ? std::string() : read_file(a.file);
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
  const size_t ctx = base ? base->header().n_ctx : a.ctx;
  lo.ctx = a.mode == "prefix" ? 0 : ctx;  // prefix: the model's context, --tokens checked below
  runtime::LoadedModel lm = runtime::load_model(resolve_model_path(a.model, a.gguf_quant), lo);
  std::vector<uint32_t> ids = lm.encode_raw(text);
  if (base) {  // the base's tokens; a text given too must be the one the base scored
    const std::vector<uint32_t>& b = base->ids();
    if (!a.file.empty()) {
      const auto d = std::mismatch(b.begin(), b.end(), ids.begin(), ids.end());
      if (d.first != b.end())
        fail(ErrorKind::InvalidArgument,
             "'{}' does not give the base's tokens (they differ at token {}): leave -f out to score the "
             "base's text",
             a.file, d.first - b.begin());
    }
    ids = b;
  }
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
    if (ctx > lm.model->arch().max_position_embeddings)
      fail(ErrorKind::InvalidArgument, "--ctx {} exceeds max_position_embeddings {}", ctx,
           lm.model->arch().max_position_embeddings);
    if (ctx >= 4 && ids.size() < ctx)
      fail(ErrorKind::InvalidArgument, "'{}' is too short: it has {}{}, fewer than one chunk of --ctx {}",
           a.file, tokens_str(n_text), n_bos ? " (plus BOS)" : "", ctx);
    const size_t text_tokens = ids.size();
    if (a.chunks > 0) ids.resize(std::min(ids.size(), static_cast<size_t>(a.chunks) * ctx));
    ids.resize(ids.size() / ctx * ctx);
    const size_t n_chunks = ids.size() / ctx;
    // said before the run, as llama-perplexity does
    std::printf("chunks: %zu x %zu tokens (text: %zu tokens), scored the second half of each\n", n_chunks,
                ctx, text_tokens);
    std::fflush(stdout);
    const KldHeader kh{static_cast<uint32_t>(lm.model->vocab_size()), static_cast<uint32_t>(ctx),
                       static_cast<uint32_t>(n_chunks), static_cast<uint32_t>(ctx / 2)};
    std::optional<KldBaseWriter> writer;
    std::optional<KldStats> stats;
    std::vector<float> row;
    if (!a.kld_base.empty() && !a.kld) {
      writer.emplace(a.kld_base, kh, ids);
      po.on_logits = [&](size_t c, size_t j, std::span<const float> l) { writer->put(c, j, l); };
    } else if (base) {
      stats.emplace(n_chunks * kh.per_chunk());
      po.on_logits = [&](size_t c, size_t j, std::span<const float> l) {
        base->row(c, j, row);
        stats->add(c * kh.per_chunk() + (j - kh.first), row, l, ids[c * ctx + j + 1]);
      };
    }
    // llama-perplexity's running estimates "[1]6.81,[2]6.93,…" where no progress bar is drawn
    const bool running = !Progress::enabled();
    if (running)
      po.on_chunk = [](size_t k, const runtime::PplResult& r) {
        std::printf("[%zu]%.4f,", k, r.ppl);
        std::fflush(stdout);
      };
    bar.emplace("perplexity", ids.size(), "tok");
    r = runtime::perplexity_chunked(lm, ids, ctx, bos, po);
    bar->finish();
    if (running) std::printf("\n");
    if (writer) {
      writer->commit();
      std::printf("kl-divergence base: %s (%zu positions x %u logits)\n", a.kld_base.c_str(),
                  n_chunks * kh.per_chunk(), kh.n_vocab);
    }
    if (stats) std::printf("%s\n", stats->report().c_str());
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
    if (a.parallel_given && a.parallel > 1)  // one sequence: nothing to spread over slots
      std::fprintf(
          stderr,
          "note: --parallel %zu has no effect in prefix mode: it scores one sequence (the prefix) in one "
          "engine slot; --parallel applies to chunked mode\n",
          a.parallel);
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
  add_examples(c, {"cortiq ppl build/stories260K.cmf -f "
                   "../shared/data/tinystories-sample/tinystories_sample.txt --ctx 256",
                   "cortiq ppl f32.cmf -f text.txt --kl-divergence-base f32.kld && cortiq ppl q8.cmf "
                   "--kl-divergence-base f32.kld --kl-divergence"});
  c->add_option("model", a->model, "model .cmf file (or .gguf: converted once, cached)")->required();
  c->add_option("-f,--file", a->file, "UTF-8 text file (with --kl-divergence: optional, the base's text)");
  c->add_option("-c,--ctx", a->ctx, "chunk length in tokens (chunked mode, 512; at least 4)")
      ->check(at_least(4))
      ->each([a](const std::string&) { a->ctx_given = true; });
  c->add_option("--chunks", a->chunks, "score at most the first N chunks (chunked mode; -1 = all)")
      ->check(positive_or_minus_one("all chunks"));
  c->add_option("--batch", a->batch, "positions per forward call (0 = whole chunk)");
  c->add_option("--parallel", a->parallel,
                "chunks scored together, each in its own engine slot, as one batched step (1; chunked "
                "mode; the result does not depend on it)")
      ->check(at_least(1))
      ->each([a](const std::string&) { a->parallel_given = true; });
  c->add_option("--mode", a->mode, "chunked (llama.cpp llama-perplexity) | prefix (reference procedure)");
  c->add_option("--tokens", a->tokens,
                "prefix mode: tokens read from the start of the text, the first one unscored (1024, at most "
                "the model's context)")
      ->each([a](const std::string&) { a->tokens_given = true; });
  c->add_option("--kl-divergence-base", a->kld_base,
                "FILE: save this model's log-probabilities at every scored position there (chunked mode; "
                "format in src/cli/ppl_kld.h), or with --kl-divergence read them and compare")
      ->type_name("FILE");
  c->add_flag("--kl-divergence", a->kld,
              "compare this model against --kl-divergence-base: KL divergence per token (mean, max, "
              "percentiles) and top-1 agreement, as llama-perplexity prints them");
  add_load_flags(c, a->load);
  add_gguf_flag(c, a->gguf_quant);
  c->add_option("--task", a->load.task, "task mask name, or 'off' (-t is --threads, as in llama.cpp)");
  c->callback([a] { ppl_cmd(*a); });
}

}  // namespace

CORTIQ_COMMAND(21, setup);

}  // namespace cortiq::cli
