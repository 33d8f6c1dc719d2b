#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/engine.h"
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

/// Scores every sequence of `seqs` from an empty cache on an engine of `parallel` slots: the NLL
/// of seq[j+1] at each position j >= first, per sequence in position order. Rethrows the failure
/// of the first sequence (in order) that failed. `seq_done(i)` (optional) is called on the engine's
/// thread, under the completion lock, with i and its NLLs when sequence i was scored without failure.
using SeqDone = std::function<void(size_t, const std::vector<double>&)>;
std::vector<std::vector<double>> score_sequences(LoadedModel& lm,
                                                 const std::vector<std::vector<uint32_t>>& seqs, size_t first,
                                                 const PplOptions& opt, const SeqDone& seq_done = {}) {
  if (opt.parallel == 0) fail(ErrorKind::InvalidArgument, "--parallel must be >= 1");
  size_t longest = 0;
  for (const auto& s : seqs) longest = std::max(longest, s.size());
  std::vector<std::vector<double>> nll(seqs.size());
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  std::vector<std::shared_ptr<Job>> jobs;
  for (size_t i = 0; i < seqs.size(); ++i) {
    auto job = std::make_shared<Job>();
    job->prompt = seqs[i];
    job->max_tokens = 0;  // score the prompt, generate nothing
    job->use_cache = false;
    job->mask = lm.mask;  // the engine's default_mask()
    job->score_from = first;
    job->score_chunk = opt.batch ? opt.batch : seqs[i].size();
    const std::vector<uint32_t>* seq = &seqs[i];
    std::vector<double>* out = &nll[i];
    const auto* on_logits = opt.on_logits ? &opt.on_logits : nullptr;
    job->on_prompt_logits = [seq, out, on_logits, i](size_t j, std::span<const float> logits) {
      if (j + 1 >= seq->size()) return;
      out->push_back(token_nll(logits, (*seq)[j + 1]));
      if (on_logits) (*on_logits)(i, j, logits);
    };
    if (opt.progress) job->on_prompt_progress = opt.progress;
    Job* self = job.get();
    job->on_done = [&, self, i](const std::string&, size_t, const std::string&) {
      std::lock_guard<std::mutex> g(mu);
      if (seq_done && !self->failure) seq_done(i, nll[i]);
      ++done;
      cv.notify_all();
    };
    jobs.push_back(std::move(job));
  }
  // Declared last: its thread, which calls the jobs' callbacks, ends before what they touch.
  Engine engine(
      lm,
      EngineOptions{.parallel = std::min(opt.parallel, seqs.size()), .queue = seqs.size(), .ctx = longest});
  if (!engine.submit(std::span<const std::shared_ptr<Job>>(jobs)))
    fail(ErrorKind::InvalidArgument, "perplexity: the engine refused {} sequences", jobs.size());
  {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done == jobs.size(); });
  }
  for (const auto& j : jobs)
    if (j->failure) std::rethrow_exception(j->failure);
  return nll;
}

}  // namespace

PplResult perplexity_chunked(LoadedModel& lm, std::span<const uint32_t> ids, size_t n_ctx,
                             std::optional<uint32_t> bos, const PplOptions& opt) {
  if (n_ctx < 4) fail(ErrorKind::InvalidArgument, "--ctx must be >= 4 (got {})", n_ctx);
  const size_t n_chunks = ids.size() / n_ctx;
  if (n_chunks == 0)
    fail(ErrorKind::InvalidArgument, "the text has {} token{}, fewer than one chunk of --ctx {}", ids.size(),
         ids.size() == 1 ? "" : "s", n_ctx);
  std::vector<std::vector<uint32_t>> chunks(n_chunks);
  for (size_t c = 0; c < n_chunks; ++c) {
    chunks[c].assign(ids.begin() + c * n_ctx, ids.begin() + (c + 1) * n_ctx);
    if (bos) chunks[c][0] = *bos;
  }
  // running estimates in chunk order, as chunks finish (parallel slots may finish out of order)
  std::vector<const std::vector<double>*> finished(n_chunks, nullptr);
  size_t next = 0;
  Acc running;
  SeqDone seq_done;
  if (opt.on_chunk)
    seq_done = [&](size_t i, const std::vector<double>& nll) {
      finished[i] = &nll;
      for (; next < n_chunks && finished[next]; ++next) {
        for (double x : *finished[next]) running.add(x);
        opt.on_chunk(next + 1, running.result(next + 1));
      }
    };
  Acc acc;
  for (const auto& chunk : score_sequences(lm, chunks, n_ctx / 2, opt, seq_done))
    for (double x : chunk) acc.add(x);
  return acc.result(n_chunks);
}

PplResult perplexity_prefix(LoadedModel& lm, std::span<const uint32_t> ids, const PplOptions& opt) {
  if (ids.size() < 2)
    fail(ErrorKind::InvalidArgument, "perplexity needs at least 2 tokens (got {})", ids.size());
  Acc acc;
  const auto nll = score_sequences(lm, {std::vector<uint32_t>(ids.begin(), ids.end())}, 0, opt);
  for (double x : nll[0]) acc.add(x);
  return acc.result(1);
}

}  // namespace cortiq::runtime
