#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "util/error.h"

namespace cortiq::runtime {

double token_nll(std::span<const float> logits, uint32_t target) {
  double mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, static_cast<double>(l));
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
  const double nll = -(static_cast<double>(logits[target]) - mx - std::log(sum));
  if (!std::isfinite(nll))  // a NaN / ±Inf logit (std::max skips NaN, so look for it)
    for (size_t i = 0; i < logits.size(); ++i)
      if (!std::isfinite(logits[i]))
        fail(ErrorKind::NonFinite,
             "logit {} is {}: a weight of this file is corrupt or out of range (`cortiq verify` checks every "
             "tensor's hash)",
             i, logits[i]);
  return nll;
}

namespace {

struct Acc {
  double nll = 0.0, nll2 = 0.0;
  size_t n = 0;
  void add(double x) {
    nll += x;
    nll2 += x * x;
    ++n;
  }
  PplResult result(size_t chunks) const {
    PplResult r;
    r.tokens_scored = n;
    r.chunks = chunks;
    if (n == 0) return r;
    const double mean = nll / static_cast<double>(n), mean2 = nll2 / static_cast<double>(n);
    r.mean_nll = mean;
    r.ppl = std::exp(mean);
    const double var = mean2 - mean * mean;
    r.ppl_stderr = (n > 1 && var > 0) ? r.ppl * std::sqrt(var / static_cast<double>(n - 1)) : 0.0;
    return r;
  }
};

// Runs `ids` from an empty cache, calling score(j, logits_j) for positions j >= first and
// progress(positions) after each forward call (when set).
template <typename F>
void run_sequence(model::Model& m, const model::Variant* var, std::span<const uint32_t> ids, size_t first,
                  size_t batch, bool kv_f16, const std::function<void(size_t)>& progress, F&& score) {
  const size_t n = ids.size(), V = m.vocab_size();
  model::KvCache kv(m.arch(), n, kv_f16);
  if (batch == 0) batch = n;
  std::vector<float> logits;
  for (size_t b = 0; b < n; b += batch) {
    const size_t cnt = std::min(batch, n - b);
    if (b + cnt <= first) {
      m.forward(ids.subspan(b, cnt), kv, {}, model::LogitsMode::None, var);
      if (progress) progress(cnt);
      continue;
    }
    logits.resize(cnt * V);
    m.forward(ids.subspan(b, cnt), kv, logits, model::LogitsMode::All, var);
    for (size_t i = 0; i < cnt; ++i)
      if (b + i >= first) score(b + i, std::span<const float>(logits.data() + i * V, V));
    if (progress) progress(cnt);
  }
}

}  // namespace

PplResult perplexity_chunked(model::Model& m, std::span<const uint32_t> ids, size_t n_ctx,
                             std::optional<uint32_t> bos, size_t batch, bool kv_f16,
                             const std::function<void(size_t)>& progress, const model::Variant* variant) {
  if (n_ctx < 4) fail(ErrorKind::InvalidArgument, "--ctx must be >= 4 (got {})", n_ctx);
  const size_t n_chunks = ids.size() / n_ctx;
  if (n_chunks == 0)
    fail(ErrorKind::InvalidArgument, "the text has {} token{}, fewer than one chunk of --ctx {}", ids.size(),
         ids.size() == 1 ? "" : "s", n_ctx);
  Acc acc;
  std::vector<uint32_t> chunk(n_ctx);
  const size_t first = n_ctx / 2;
  for (size_t c = 0; c < n_chunks; ++c) {
    std::copy(ids.begin() + c * n_ctx, ids.begin() + (c + 1) * n_ctx, chunk.begin());
    if (bos) chunk[0] = *bos;
    run_sequence(m, variant, chunk, first, batch, kv_f16, progress, [&](size_t j, std::span<const float> lg) {
      if (j + 1 < n_ctx) acc.add(token_nll(lg, chunk[j + 1]));
    });
  }
  return acc.result(n_chunks);
}

PplResult perplexity_prefix(model::Model& m, std::span<const uint32_t> ids, size_t batch, bool kv_f16,
                            const std::function<void(size_t)>& progress, const model::Variant* variant) {
  if (ids.size() < 2)
    fail(ErrorKind::InvalidArgument, "perplexity needs at least 2 tokens (got {})", ids.size());
  Acc acc;
  run_sequence(m, variant, ids, 0, batch, kv_f16, progress, [&](size_t j, std::span<const float> lg) {
    if (j + 1 < ids.size()) acc.add(token_nll(lg, ids[j + 1]));
  });
  return acc.result(1);
}

}  // namespace cortiq::runtime
