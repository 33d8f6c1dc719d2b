// load_corpus (corpus.h).
#include "specialize/corpus.h"

#include <algorithm>
#include <filesystem>

#include "cmf/signature.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace cortiq::specialize {

namespace {

/// At most `cap` of `pool`, evenly spaced (index i·n/cap), in order; all when cap == 0 or n ≤ cap.
std::vector<Chunk> spread(std::vector<Chunk>& pool, size_t cap) {
  if (cap == 0 || pool.size() <= cap) return std::move(pool);
  std::vector<Chunk> out;
  out.reserve(cap);
  for (size_t i = 0; i < cap; ++i) out.push_back(std::move(pool[i * pool.size() / cap]));
  return out;
}

}  // namespace

TaskCorpus load_corpus(const Tokenizer& tok, const std::vector<std::string>& paths, const SplitOptions& opt) {
  if (paths.empty()) fail(ErrorKind::InvalidArgument, "compile: no corpus file (--corpus FILE…)");
  if (opt.chunk < 4) fail(ErrorKind::InvalidArgument, "compile: chunk length {} < 4", opt.chunk);
  TaskCorpus c;
  c.chunk = opt.chunk;
  std::vector<Chunk> pools[3];  // select, report, train
  for (const auto& p : paths) {
    const std::string text = read_file(p);
    CorpusFile f;
    f.path = p;
    f.basename = std::filesystem::path(p).filename().string();
    const auto h = cmf::sha256_file(p);
    f.sha256 = cmf::to_hex(h);
    const std::vector<uint32_t> ids = tok.encode(text, false);
    f.tokens = ids.size();
    c.tokens += ids.size();
    for (size_t s = 0; s + opt.chunk <= ids.size(); s += opt.chunk, ++c.total_chunks) {
      const size_t k = c.total_chunks % 10;
      pools[k == 0   ? 0
            : k == 1 ? 1
                     : 2]
          .emplace_back(ids.begin() + static_cast<ptrdiff_t>(s),
                        ids.begin() + static_cast<ptrdiff_t>(s + opt.chunk));
    }
    c.files.push_back(std::move(f));
  }
  const size_t need = std::max<size_t>(opt.min_chunks, 3);  // one chunk per split at least
  if (c.total_chunks < need)
    fail(ErrorKind::InvalidArgument,
         "compile: the corpus is too short: {} tokens make {} chunk(s) of {}; the select, report and train "
         "splits need at least {} chunks = {} tokens",
         c.tokens, c.total_chunks, opt.chunk, need, need * opt.chunk);
  c.select = spread(pools[0], opt.select_chunks);
  c.report = spread(pools[1], opt.report_chunks);
  c.train = spread(pools[2], opt.train_chunks);
  return c;
}

}  // namespace cortiq::specialize
