#include "runtime/engine.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <unordered_map>

#include "tokenizer/output_protocol.h"
#include "util/error.h"
#include "util/utf8.h"

namespace cortiq::runtime {

void SerialBackend::run(std::span<StepItem> items) {
  for (auto& it : items) {
    if (it.weights) {  // a skill's weights: forward_batch of one step, as forward() is
      const model::SeqStep st{it.tokens, it.kv, it.logits, it.all_logits, it.variant, it.weights};
      m_.forward_batch(std::span<const model::SeqStep>(&st, 1));
      continue;
    }
    m_.forward(it.tokens, *it.kv, it.logits,
               it.logits.empty() ? model::LogitsMode::None
               : it.all_logits   ? model::LogitsMode::All
                                 : model::LogitsMode::Last,
               it.variant);
  }
}

void BatchedBackend::run(std::span<StepItem> items) {
  std::vector<model::SeqStep> steps;
  steps.reserve(items.size());
  for (auto& it : items)
    steps.push_back({it.tokens, it.kv, it.logits, it.all_logits, it.variant, it.weights});
  m_.forward_batch(steps);
}

struct Engine::Slot {
  explicit Slot(const cmf::ModelArch& arch, size_t ctx, bool f16, size_t vocab)
      : kv(arch, ctx, f16), logits(vocab) {}
  model::KvCache kv;
  std::vector<float> logits;
  std::shared_ptr<Job> job;
  std::optional<Sampler> sampler;
  std::optional<GrammarState> grammar;  // the job's grammar after the tokens generated so far
  std::vector<uint8_t> allow;           // [vocab] this step's grammar mask
  std::optional<IncrementalDecoder> dec;
  std::shared_ptr<const model::Variant> variant;  // the job's task mask, compiled
  std::vector<uint32_t> seen;                     // prompt + generated
  std::unordered_map<uint32_t, int> counts;
  size_t generated = 0;
  std::string full;
  size_t emitted = 0;
  bool prefilled = false;
  uint32_t last = 0;
  /// Logprobs of generated tokens not yet sent, with where each token's text ends in `full`
  /// (begin: where it starts): one goes out with the on_text call whose text reaches its end.
  struct PendingLp {
    TokenLogprob lp;
    size_t begin, end;
  };
  std::vector<PendingLp> pending_lp;
  // Prompt scoring (Job::prompt_logprobs): prompt tokens run so far, and the chunk's logits.
  size_t scored = 0;
  std::vector<float> chunk_logits;
  // Prompt cache: the tokens whose keys/values sit in kv (cached.size() == kv.size() between steps)
  // and the task mask they were computed under. A later job whose prompt starts with them reuses
  // that prefix instead of prefilling it again (chat clients resend the whole conversation).
  std::vector<uint32_t> cached;
  const cmf::TaskMask* cached_mask = nullptr;
  std::shared_ptr<const SkillBinding> cached_skill;  // the skill the cached KV was computed under
  bool cached_mixed = false;                  // a dynamic switch ran the cached KV under more than one skill
  std::shared_ptr<const SkillBinding> skill;  // the skill the job runs now (Job::reroute may switch it)
  size_t reuse = 0;                           // prompt tokens of the current job taken from the cache
};

namespace {
/// Length of the common prefix of a and b.
size_t common_prefix(std::span<const uint32_t> a, std::span<const uint32_t> b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}
}  // namespace

Engine::Engine(LoadedModel& lm, const EngineOptions& opt, std::unique_ptr<StepBackend> backend)
    : lm_(lm), opt_(opt) {
  if (opt_.parallel == 0) fail(ErrorKind::InvalidArgument, "--parallel must be >= 1");
  // The task load_model looked up and compiled: the engine takes both (one lookup, one compile).
  default_mask_ = lm.mask;
  if (lm.mask && lm.variant)
    variants_.emplace(std::pair{lm.mask, static_cast<const SkillBinding*>(nullptr)}, lm.variant);
  backend_ = backend ? std::move(backend) : std::make_unique<BatchedBackend>(*lm.model);
  const size_t ctx = opt_.ctx ? opt_.ctx : lm.ctx;
  for (size_t i = 0; i < opt_.parallel; ++i)
    slots_.push_back(std::make_unique<Slot>(lm.model->arch(), ctx, lm.kv_f16, lm.model->vocab_size()));
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Engine::drop_cancelled_waiting(std::vector<std::shared_ptr<Job>>& out) {
  for (auto it = waiting_.begin(); it != waiting_.end();)
    if ((*it)->cancel.load()) {
      out.push_back(std::move(*it));
      it = waiting_.erase(it);
      ++completed_;
      ++cancelled_;
    } else {
      ++it;
    }
}

void Engine::notify_dropped(const std::vector<std::shared_ptr<Job>>& jobs) {
  for (const auto& j : jobs) try {
      if (j->on_done) j->on_done("cancelled", 0, "");
    } catch (...) {
    }
}

bool Engine::submit(std::shared_ptr<Job> job) {
  return submit(std::span<const std::shared_ptr<Job>>(&job, 1));
}

bool Engine::submit(std::span<const std::shared_ptr<Job>> jobs) {
  std::vector<std::shared_ptr<Job>> dropped;
  bool queued = false;
  {
    std::lock_guard<std::mutex> g(mu_);
    drop_cancelled_waiting(dropped);
    // A job may wait only when every slot is busy and the queue has room.
    if (active_ + waiting_.size() + jobs.size() <= opt_.parallel + opt_.queue) {
      waiting_.insert(waiting_.end(), jobs.begin(), jobs.end());
      queued = true;
    }
  }
  notify_dropped(dropped);
  if (queued) cv_.notify_all();
  return queued;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  return {active_, waiting_.size(), completed_, cancelled_, prompt_tokens_, reused_tokens_};
}

void Engine::finish(Slot& s, const std::string& reason, const std::string& error) {
  auto job = std::move(s.job);
  s.job.reset();
  s.sampler.reset();
  s.dec.reset();
  {
    // Counted before on_done: a client that has its answer sees the slot free in /health.
    std::lock_guard<std::mutex> g(mu_);
    --active_;
    ++completed_;
    if (reason == "cancelled") ++cancelled_;
  }
  try {
    if (job && job->on_done) job->on_done(reason, s.generated, error);
  } catch (...) {
  }
}

namespace {

TokenLogprob logprob_of(std::span<const float> logits, uint32_t id, int top) {
  float mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, v);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  TokenLogprob t;
  t.id = id;
  t.logprob = logits[id] - lse;
  if (top > 0) {
    std::vector<uint32_t> idx(logits.size());
    for (uint32_t i = 0; i < idx.size(); ++i) idx[i] = i;
    const size_t k = std::min<size_t>(static_cast<size_t>(top), idx.size());
    std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                      [&](uint32_t a, uint32_t b) {
                        // Best first; under an exact tie the chosen token first, then lower ids.
                        if (logits[a] != logits[b]) return logits[a] > logits[b];
                        if ((a == id) != (b == id)) return a == id;
                        return a < b;
                      });
    for (size_t i = 0; i < k; ++i) t.top.emplace_back(idx[i], logits[idx[i]] - lse);
  }
  return t;
}

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

void Engine::fail_slot(Slot& s, const std::string& error, std::exception_ptr cause) {
  s.kv.truncate(0);  // what a failed step left in the cache is unknown
  s.cached.clear();
  if (s.job) s.job->failure = cause;
  finish(s, "error", error);
}

void Engine::run_step(std::span<Slot* const> active, std::span<StepItem> items) {
  std::vector<size_t> before(active.size());
  for (size_t i = 0; i < active.size(); ++i) before[i] = active[i]->kv.size();
  std::vector<std::string> errors(active.size());
  std::vector<std::exception_ptr> causes(active.size());
  try {
    backend_->run(items);
  } catch (...) {
    // Find the culprit: every sequence goes back to its cache before the step and runs alone
    // (bit-identical to the batched step, Model::forward_batch contract); only those that fail
    // again end, with their error.
    const std::string batch_error = what_of(std::current_exception());
    for (size_t i = 0; i < active.size(); ++i) {
      active[i]->kv.truncate(before[i]);
      try {
        backend_->run(items.subspan(i, 1));
      } catch (...) {
        causes[i] = std::current_exception();
        errors[i] = what_of(causes[i]);
        if (errors[i].empty()) errors[i] = batch_error;
      }
    }
  }
  for (size_t i = 0; i < active.size(); ++i) {
    Slot& s = *active[i];
    if (!errors[i].empty()) {
      fail_slot(s, "generation failed: " + errors[i], causes[i]);
      continue;
    }
    // Anything that goes wrong after the forward (sampling, detokenization, a callback) ends this
    // sequence alone; the others of the step go on.
    try {
      advance(s, items[i]);
    } catch (...) {
      if (s.job)
        fail_slot(s, "generation failed: " + what_of(std::current_exception()), std::current_exception());
    }
  }
}

void Engine::mask_by_grammar(Slot& s, std::span<float> logits) {
  const Job& job = *s.job;
  size_t n = masker_->allowed(*s.grammar, s.allow);
  s.allow.resize(logits.size(), 0);
  for (uint32_t id : job.keep_special)
    if (id < s.allow.size() && !s.allow[id]) {
      GrammarState t = *s.grammar;
      if (t.accept(lm_.tokenizer->id_to_token(id))) s.allow[id] = 1, ++n;
    }
  if (!job.ignore_eos && s.grammar->can_end())
    for (uint32_t id : lm_.eos_ids)
      if (id < s.allow.size() && !s.allow[id]) s.allow[id] = 1, ++n;
  if (n == 0)
    fail(ErrorKind::InvalidArgument, "grammar: no token of the vocabulary continues the output here");
  for (size_t i = 0; i < logits.size(); ++i)
    if (!s.allow[i]) logits[i] = -std::numeric_limits<float>::infinity();
}

void Engine::advance(Slot& slot, const StepItem& item) {
  Slot* s = &slot;
  Job& job = *s->job;
  if (s->prefilled) {
    s->cached.push_back(s->last);
  } else if (job.scores_prompt()) {
    // Row j of the chunk's logits predicts the prompt token after position scored + j (a step
    // wholly below score_from ran without logits).
    const std::span<const uint32_t> toks = item.tokens;
    const size_t V = s->logits.size(), n = job.prompt.size();
    for (size_t j = 0; j < toks.size() && !item.logits.empty(); ++j) {
      const size_t pos = s->scored + j;
      const auto row = std::span<const float>(s->chunk_logits).subspan(j * V, V);
      if (job.on_prompt_logits) {
        if (pos >= job.score_from) job.on_prompt_logits(pos, row);
      } else if (pos + 1 < n) {
        job.prompt_lps.push_back(logprob_of(row, job.prompt[pos + 1], std::max(job.top_logprobs, 0)));
      }
    }
    s->cached.insert(s->cached.end(), toks.begin(), toks.end());
    s->scored += toks.size();
    if (job.on_prompt_progress) job.on_prompt_progress(toks.size());
    if (s->scored < n) return;  // more of the prompt next step
    std::copy_n(s->chunk_logits.end() - static_cast<std::ptrdiff_t>(V), V, s->logits.begin());
    std::vector<float>().swap(s->chunk_logits);
  } else {
    s->cached.insert(s->cached.end(), job.prompt.begin() + static_cast<std::ptrdiff_t>(s->reuse),
                     job.prompt.end());
  }
  s->prefilled = true;
  if (job.max_tokens == 0) {  // the prompt scored, nothing to generate
    finish(*s, "length");
    return;
  }
  // Job's adjustments (see Job::repeat_penalty): the logprobs below are of this distribution,
  // the one greedy decoding takes its maximum of, before temperature and truncation.
  std::span<float> logits(s->logits);
  if (job.repeat_penalty != 1.0f) apply_penalties(logits, s->seen, job.repeat_penalty, 0.0f);
  if (job.frequency_penalty != 0.0f || job.presence_penalty != 0.0f)
    for (const auto& [id, n] : s->counts)
      logits[id] -= job.frequency_penalty * static_cast<float>(n) + job.presence_penalty;
  for (const auto& [id, bias] : job.logit_bias) logits[id] += bias;
  if (s->grammar) mask_by_grammar(*s, logits);
  std::optional<TokenLogprob> lp;
  const uint32_t next = [&] {
    if (job.top_logprobs < 0) return s->sampler->sample(logits, s->seen);
    std::vector<float> raw(logits.begin(), logits.end());
    const uint32_t id = s->sampler->sample(logits, s->seen);
    lp = logprob_of(raw, id, job.top_logprobs);
    return id;
  }();
  ++s->generated;
  if (job.on_token) job.on_token(next);
  ++s->counts[next];
  s->seen.push_back(next);
  s->last = next;
  const bool is_eos =
      !job.ignore_eos && std::find(lm_.eos_ids.begin(), lm_.eos_ids.end(), next) != lm_.eos_ids.end();
  bool grammar_done = false;
  if (s->grammar && !is_eos) {
    const bool kept =
        std::find(job.keep_special.begin(), job.keep_special.end(), next) != job.keep_special.end();
    if (!s->grammar->accept(kept ? lm_.tokenizer->id_to_token(next) : masker_->bytes(next)))
      fail(ErrorKind::InvalidArgument, "grammar: sampled token {} is outside the grammar", next);
    grammar_done = s->grammar->done();
  }
  // The sequence ends here unless a stop string ends it first; an ending sequence flushes what the
  // decoder holds back (a byte run the end-of-turn token closes, an incomplete character).
  const bool ending =
      is_eos || grammar_done || s->generated >= job.max_tokens || s->kv.size() >= s->kv.capacity();
  size_t text_begin = s->full.size();
  if (s->dec && !is_eos) {
    if (std::find(job.keep_special.begin(), job.keep_special.end(), next) != job.keep_special.end()) {
      s->full += s->dec->flush();
      text_begin = s->full.size();
      s->full += lm_.tokenizer->id_to_token(next);
    } else {
      const std::string out = s->dec->push(next);
      if (lp) text_begin += s->dec->own_text_start(out, next);  // where its logprob's text begins
      s->full += out;
    }
  }
  if (s->dec && ending) s->full += s->dec->flush();
  // The end-of-turn token is not part of the text, so not of its logprobs either (OpenAI's
  // logprobs tokens joined give the content). The logprob is recorded between the decode and
  // the stop-string cut below, which drops it again when its token wrote only stop text.
  if (lp && !is_eos) s->pending_lp.push_back({std::move(*lp), text_begin, s->full.size()});
  std::string reason = is_eos || grammar_done ? "stop" : ending ? "length" : "";
  if (s->dec) {
    size_t cut = std::string::npos;
    for (const auto& st : job.stop) cut = std::min(cut, s->full.find(st));
    if (cut != std::string::npos) {
      s->full.resize(cut);
      reason = "stop";
      // the tokens that wrote only stop-string text go with it
      std::erase_if(s->pending_lp, [cut](const Slot::PendingLp& p) { return p.begin >= cut; });
    }
  }
  size_t upto;
  if (!reason.empty()) {
    upto = s->full.size();
  } else {
    // hold back only what may still become a stop string (llama.cpp's server does the same)
    size_t hold = 0;
    for (const auto& st : job.stop) hold = std::max(hold, partial_tag_suffix(s->full, st));
    upto = utf8_char_start(s->full, s->full.size() - hold);
  }
  // the logprobs of the tokens whose text is out with this call (all of them at the end)
  size_t nlp = 0;
  while (nlp < s->pending_lp.size() && (!reason.empty() || s->pending_lp[nlp].end <= upto)) ++nlp;
  if ((upto > s->emitted || nlp > 0) && job.on_text) {
    std::vector<TokenLogprob> lps;
    lps.reserve(nlp);
    for (size_t k = 0; k < nlp; ++k) lps.push_back(std::move(s->pending_lp[k].lp));
    s->pending_lp.erase(s->pending_lp.begin(), s->pending_lp.begin() + static_cast<std::ptrdiff_t>(nlp));
    try {
      job.on_text(std::string_view(s->full).substr(s->emitted, upto > s->emitted ? upto - s->emitted : 0),
                  std::move(lps));
    } catch (...) {
      job.cancel = true;
    }
  }
  s->emitted = std::max(s->emitted, upto);
  if (!reason.empty()) {
    finish(*s, reason);
    return;
  }
  if (job.reroute && !job.cancel.load()) {
    std::shared_ptr<const SkillBinding> next_skill = job.reroute(s->seen);
    if (next_skill != s->skill) {
      s->variant = variant_for(job.mask, next_skill);
      s->skill = std::move(next_skill);
      s->cached_mixed = true;
    }
  }
}

void Engine::loop() {
  std::vector<Slot*> active;
  std::vector<std::shared_ptr<Job>> dropped;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !waiting_.empty() || active_ > 0; });
      if (stop_) break;
      drop_cancelled_waiting(dropped);  // checked every step: a queued client that left frees its place
      // Admit waiting jobs into free slots (joins happen between steps): each goes to the free
      // slot whose cache holds the longest prefix of its prompt under the same mask (ties: the
      // slot with the least cached, so longer caches survive for later jobs).
      while (!waiting_.empty()) {
        const Job& job = *waiting_.front();
        Slot* best = nullptr;
        size_t best_len = 0;
        for (auto& s : slots_) {
          if (s->job) continue;
          const size_t len = s->cached_mask == job.mask && s->cached_skill == job.skill && !s->cached_mixed
                                 ? common_prefix(s->cached, job.prompt)
                                 : 0;
          if (!best || len > best_len || (len == best_len && s->cached.size() < best->cached.size())) {
            best = s.get();
            best_len = len;
          }
        }
        if (!best) break;
        Slot& x = *best;
        x.job = std::move(waiting_.front());
        waiting_.pop_front();
        ++active_;
        // At least the last prompt token is run again: its logits start the generation. A job that
        // scores its prompt runs all of it.
        x.reuse =
            x.job->scores_prompt() || !x.job->use_cache ? 0 : std::min(best_len, x.job->prompt.size() - 1);
        x.scored = 0;
        x.kv.truncate(x.reuse);
        x.cached.resize(x.reuse);
        x.cached_mask = x.job->mask;
        x.cached_skill = x.job->skill;
        x.cached_mixed = false;
        x.skill = x.job->skill;
        prompt_tokens_ += x.job->prompt.size();
        reused_tokens_ += x.reuse;
        x.job->cached_tokens = x.reuse;
        x.sampler.reset();  // made by start_slot, outside the lock
        x.seen = x.job->prompt;
        x.counts.clear();
        x.generated = 0;
        x.full.clear();
        x.emitted = 0;
        x.prefilled = false;
        x.pending_lp.clear();
      }
    }
    notify_dropped(dropped);
    dropped.clear();
    active.clear();
    for (auto& s : slots_)
      if (s->job) {
        if (s->job->cancel.load()) {
          finish(*s, "cancelled");
          continue;
        }
        if (!s->sampler) try {
            start_slot(*s);
          } catch (...) {
            fail_slot(*s, "cannot start the generation: " + what_of(std::current_exception()),
                      std::current_exception());
            continue;
          }
        active.push_back(s.get());
      }
    if (active.empty()) continue;
    try {
      step(active);
    } catch (...) {  // run_step catches per sequence; this is the last line (e.g. out of memory)
      const std::string why = what_of(std::current_exception());
      for (Slot* s : active)
        if (s->job) fail_slot(*s, "generation failed: " + why);
    }
  }
  // Shutdown: fail whatever is left.
  for (auto& s : slots_)
    if (s->job) finish(*s, "error", "server shutting down");
  std::vector<std::shared_ptr<Job>> left;
  {
    std::lock_guard<std::mutex> g(mu_);
    left.assign(waiting_.begin(), waiting_.end());
    waiting_.clear();
  }
  for (auto& j : left) try {
      if (j->on_done) j->on_done("error", 0, "server shutting down");
    } catch (...) {
    }
}

std::shared_ptr<const model::Variant> Engine::variant_for(const cmf::TaskMask* mask,
                                                          const std::shared_ptr<const SkillBinding>& skill) {
  const SkillBinding* sk = skill.get();
  auto v = variants_.find({mask, sk});
  if (v == variants_.end()) {
    const model::Model& m = sk ? *sk->model : *lm_.model;  // gathered rows are copies of these weights
    v = variants_.emplace(std::pair{mask, sk}, m.compile_variant(mask)).first;
    if (sk) variant_skills_.push_back(skill);
  }
  return v->second;
}

void Engine::start_slot(Slot& x) {
  x.variant = variant_for(x.job->mask, x.skill);
  x.sampler.emplace(x.job->sampler);
  x.grammar.reset();
  if (x.job->grammar) {
    if (!lm_.tokenizer)
      fail(ErrorKind::Unsupported, "a grammar needs the model's tokenizer (this file has none)");
    if (!masker_) {
      const Tokenizer& t = *lm_.tokenizer;
      std::vector<std::string> bytes(t.vocab_size());
      std::vector<bool> usable(bytes.size());
      for (uint32_t id = 0; id < bytes.size(); ++id) {
        usable[id] = !t.is_special(id);
        if (usable[id]) bytes[id] = t.token_bytes(id);
      }
      masker_ = std::make_unique<TokenMasker>(bytes, usable);
    }
    x.grammar.emplace(x.job->grammar);
  }
  // No text wanted (no on_text, no stop strings: bench, perplexity): no detokenization either.
  if (lm_.tokenizer && (x.job->on_text || !x.job->stop.empty())) {
    x.dec.emplace(*lm_.tokenizer, true);
    x.dec->prime(x.job->prompt);  // the output continues the prompt (SentencePiece's leading space)
  }
}

void Engine::step(std::span<Slot* const> active) {
  // One step: the forward of every active sequence (prefill for new ones, one token otherwise).
  std::vector<StepItem> items;
  items.reserve(active.size());
  for (Slot* s : active) {
    const std::span<const uint32_t> prompt(s->job->prompt);
    const model::Weights* w = s->skill ? s->skill->weights.get() : nullptr;
    if (s->prefilled) {
      items.push_back(
          {&s->kv, std::span<const uint32_t>(&s->last, 1), s->logits, s->variant.get(), false, w});
    } else if (s->job->scores_prompt()) {
      const Job& job = *s->job;
      const size_t t =
          std::min(job.score_chunk ? job.score_chunk : kPromptScoreChunk, prompt.size() - s->scored);
      // logits unless every position is below score_from (the prompt's last one always has them)
      const bool logits =
          !job.on_prompt_logits || s->scored + t > job.score_from || s->scored + t == prompt.size();
      s->chunk_logits.resize(logits ? t * s->logits.size() : 0);
      items.push_back({&s->kv, prompt.subspan(s->scored, t), s->chunk_logits, s->variant.get(), true, w});
    } else {
      items.push_back({&s->kv, prompt.subspan(s->reuse), s->logits, s->variant.get(), false, w});
    }
  }
  run_step(active, items);
}

}  // namespace cortiq::runtime
