// `cortiq ppl <model.cmf> -f FILE` — perplexity: llama.cpp's chunked procedure (default) or the
// reference's prefix procedure (--mode prefix). Result on stdout.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/command.h"
#include "runtime/perplexity.h"
#include "runtime/session.h"
#include "util/error.h"

namespace cortiq::cli {
namespace {

struct PplArgs {
  std::string model, file, mode = "chunked";
  size_t ctx = 512, batch = 0, tokens = 1024;
  bool ctx_given = false;     ///< --ctx on the command line (chunked mode only)
  runtime::LoadOptions load;  ///< --threads (default 0 = all cores), --exact, --no-mmap, --kv-f16, -t
};

void ppl_cmd(const PplArgs& a) {
  std::ifstream f(a.file, std::ios::binary);
  const bool folder = std::filesystem::is_directory(a.file);  // opens, but reads as empty
  if (!f || folder) fail(ErrorKind::Io, "cannot read '{}'{}", a.file, folder ? ": it is a folder" : "");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  if (a.mode == "prefix" && a.ctx_given)
    fail(ErrorKind::InvalidArgument,
         "--ctx sets the chunk length of chunked mode; prefix mode takes --tokens");
  runtime::LoadOptions lo = a.load;
  lo.ctx = a.mode == "prefix" ? 0 : a.ctx;  // prefix: the model's context, --tokens checked below
  runtime::LoadedModel lm = runtime::load_model(a.model, lo);
  std::vector<uint32_t> ids = lm.encode_raw(text);
  runtime::PplResult r;
  if (a.mode == "chunked") {
    if (a.ctx > lm.model->arch().max_position_embeddings)
      fail(ErrorKind::InvalidArgument, "--ctx {} exceeds max_position_embeddings {}", a.ctx,
           lm.model->arch().max_position_embeddings);
    r = runtime::perplexity_chunked(*lm.model, ids, a.ctx, lm.add_bos ? lm.bos_id : std::nullopt, a.batch,
                                    a.load.kv_f16);
    std::printf("chunks: %zu x %zu tokens (text: %zu tokens), scored the second half of each\n", r.chunks,
                a.ctx, ids.size());
  } else if (a.mode == "prefix") {
    const uint64_t maxpos = lm.model->arch().max_position_embeddings;
    size_t limit = a.tokens;
    if (maxpos && limit > maxpos) {
      std::fprintf(
          stderr, "note: --tokens %zu exceeds this model's max_position_embeddings (%llu): scoring %llu\n",
          a.tokens, static_cast<unsigned long long>(maxpos), static_cast<unsigned long long>(maxpos));
      limit = static_cast<size_t>(maxpos);
    }
    if (ids.size() > limit) ids.resize(limit);
    r = runtime::perplexity_prefix(*lm.model, ids, a.batch, a.load.kv_f16);
  } else {
    fail(ErrorKind::InvalidArgument, "--mode must be 'chunked' or 'prefix' (got '{}')", a.mode);
  }
  std::printf("PPL = %.4f +/- %.5f over %zu tokens\n", r.ppl, r.ppl_stderr, r.tokens_scored);
}

void setup(CLI::App& root) {
  auto a = std::make_shared<PplArgs>();
  a->load.threads = 0;
  auto* c = root.add_subcommand("ppl", "Perplexity of a model on a text file");
  c->add_option("model", a->model, "model .cmf file")->required();
  c->add_option("-f,--file", a->file, "UTF-8 text file")->required();
  c->add_option("--ctx", a->ctx, "chunk length in tokens (chunked mode, 512)")->each([a](const std::string&) {
    a->ctx_given = true;
  });
  c->add_option("--batch", a->batch, "positions per forward call (0 = whole chunk)");
  c->add_option("--mode", a->mode, "chunked (llama.cpp llama-perplexity) | prefix (reference procedure)");
  c->add_option("--tokens", a->tokens,
                "prefix mode: tokens scored from the start of the text (1024, at most the model's context)");
  add_load_flags(c, a->load);
  c->add_option("-t,--task", a->load.task, "task mask name, or 'off'");
  c->callback([a] { ppl_cmd(*a); });
}

}  // namespace

CORTIQ_COMMAND(21, setup);

}  // namespace cortiq::cli
