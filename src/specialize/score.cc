// score_chunks, paired_delta (score.h).
#include "specialize/score.h"

#include <cmath>
#include <memory>

#include "runtime/perplexity.h"
#include "util/error.h"

namespace cortiq::specialize {

double Score::mean() const noexcept {
  double s = 0.0;
  for (double x : chunk_nll) s += x;
  return tokens ? s / static_cast<double>(tokens) : 0.0;
}

double Score::ppl() const noexcept {
  return std::exp(mean());
}

Score score_chunks(model::Model& m, std::span<const Chunk> chunks, const model::Variant* variant,
                   size_t batch, const std::function<void(size_t)>& progress) {
  const auto& a = m.arch();
  const size_t V = m.vocab_size();
  if (batch == 0) batch = 1;
  Score s;
  s.chunk_nll.assign(chunks.size(), 0.0);
  for (size_t b = 0; b < chunks.size(); b += batch) {
    const size_t n = std::min(batch, chunks.size() - b);
    std::vector<std::unique_ptr<model::KvCache>> kv;
    std::vector<std::vector<float>> logits(n);
    std::vector<model::SeqStep> steps;
    for (size_t i = 0; i < n; ++i) {
      const Chunk& c = chunks[b + i];
      if (c.size() < 2 || (a.max_position_embeddings && c.size() > a.max_position_embeddings))
        fail(ErrorKind::InvalidArgument, "compile: chunk of {} tokens (needs 2 to {})", c.size(),
             a.max_position_embeddings);
      kv.push_back(std::make_unique<model::KvCache>(a, c.size()));
      logits[i].resize(c.size() * V);
      steps.push_back(model::SeqStep{c, kv.back().get(), logits[i], true, variant});
    }
    m.forward_batch(steps);
    for (size_t i = 0; i < n; ++i) {
      const Chunk& c = chunks[b + i];
      double sum = 0.0;
      for (size_t t = 0; t + 1 < c.size(); ++t)
        sum += runtime::token_nll(std::span<const float>(logits[i]).subspan(t * V, V), c[t + 1]);
      s.chunk_nll[b + i] = sum;
      s.tokens += c.size() - 1;
    }
    if (progress) progress(n);
  }
  return s;
}

Paired paired_delta(const Score& a, const Score& b, size_t chunk_tokens) {
  Paired p;
  const size_t n = std::min(a.chunk_nll.size(), b.chunk_nll.size());
  if (n == 0 || chunk_tokens < 2) return p;
  const double per = static_cast<double>(chunk_tokens - 1);
  std::vector<double> d(n);
  for (size_t i = 0; i < n; ++i) d[i] = (b.chunk_nll[i] - a.chunk_nll[i]) / per;
  for (double x : d) p.mean_delta += x;
  p.mean_delta /= static_cast<double>(n);
  if (n > 1) {
    double ss = 0.0;
    for (double x : d) ss += (x - p.mean_delta) * (x - p.mean_delta);
    p.stderr_delta = std::sqrt(ss / static_cast<double>(n - 1) / static_cast<double>(n));
  }
  return p;
}

}  // namespace cortiq::specialize
