// The one generation engine — cortiq serve, run's Session, ppl (prompt-scoring jobs) and
// bench --parallel are its clients: N slots (each its own KV cache, sampler and RNG)
// over one LoadedModel (one shared mmap), a bounded wait queue, and a step scheduler — continuous batching:
// between steps finished sequences leave and waiting ones join; every step advances every active sequence by
// one token (the first step of a sequence is its prefill).
//
// Prompt cache: a slot keeps the KV of its last sequence after it ends. A new job goes to the free
// slot that already holds the longest prefix of its prompt (same task mask) and prefills only the
// rest — like llama.cpp's server slots with cache_prompt. Bit-identical to a full prefill: the
// forward pass computes each position with the same arithmetic whether it runs in a prefill or a
// decode step (Model::forward_batch contract).
//
// The forward pass of a step goes through a StepBackend. The default, BatchedBackend, runs the
// whole step as one Model::forward_batch, every sequence under its own compiled task mask
// (model::Variant): one pass over the weights serves every active sequence. SerialBackend (one
// Model::forward per sequence) is kept as the reference.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cmf/masks.h"
#include "model/model.h"
#include "runtime/grammar.h"
#include "runtime/sampler.h"
#include "runtime/session.h"

namespace cortiq::runtime {

/// One sequence's share of a step: run `tokens` at positions kv.size().. and write the last
/// position's logits [vocab] into `logits`, under the compiled task mask `variant` (nullptr = none).
struct StepItem {
  model::KvCache* kv;
  std::span<const uint32_t> tokens;
  std::span<float> logits;  ///< [vocab], or [T, vocab] with all_logits
  const model::Variant* variant;
  bool all_logits = false;                  ///< every position's logits (model::SeqStep::all_logits)
  const model::Weights* weights = nullptr;  ///< this sequence's skill weights (model::SeqStep::weights)
};

/// Runs the forward passes of one scheduler step. Called from the engine thread only.
class StepBackend {
 public:
  virtual ~StepBackend() = default;
  /// Runs every item; throws cortiq::Error for an item that cannot run (the engine then fails all
  /// items of the step individually by retrying them one by one).
  virtual void run(std::span<StepItem> items) = 0;
};

/// A backend over one Model.
class ModelBackend : public StepBackend {
 public:
  explicit ModelBackend(model::Model& m) : m_(m) {}

 protected:
  model::Model& m_;
};

/// One Model::forward per item, each under its own variant.
class SerialBackend : public ModelBackend {
 public:
  using ModelBackend::ModelBackend;
  void run(std::span<StepItem> items) override;
};

/// Continuous batching: runs the step's items as ONE Model::forward_batch — a single pass over the
/// weights for all sequences, whatever their task masks. Results are bit-identical to
/// SerialBackend (Model::forward_batch contract).
class BatchedBackend : public ModelBackend {
 public:
  using ModelBackend::ModelBackend;
  void run(std::span<StepItem> items) override;
};

/// Log-probability of a token and its top alternatives (natural log of the softmax of the model's
/// logits, before any sampler transform — OpenAI semantics).
struct TokenLogprob {
  uint32_t id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<uint32_t, float>> top;  ///< best first
};

/// A generation job. Callbacks run on the engine thread and must not block for long.
struct Job {
  std::vector<uint32_t> prompt;  ///< non-empty, < ctx tokens
  /// Temperature, top-k/p, min-p and seed. The penalties below are applied by the engine before
  /// the logprobs are taken, so the sampler's own repeat/presence penalties should be left neutral.
  SamplerParams sampler;
  /// Logit adjustments, in this order, before logprobs and sampling: repeat_penalty over the prompt
  /// and the tokens generated (HF / llama.cpp: divide a positive logit, multiply a negative one,
  /// once per distinct id), frequency_penalty × count and presence_penalty once for each id in the
  /// completion only (OpenAI's definitions), then logit_bias.
  float repeat_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  std::vector<std::pair<uint32_t, float>> logit_bias;  ///< added to the logits before sampling (ids < vocab)
  size_t max_tokens = 16;                              ///< already capped by the context
  std::vector<std::string> stop;                       ///< stop strings (cut from the text)
  int top_logprobs = -1;                               ///< -1: no logprobs; 0..20 alternatives otherwise
  /// Score the prompt as well (completions with echo and logprobs): the engine prefills it from
  /// the start (no prompt cache), kPromptScoreChunk tokens per step with every position's logits,
  /// and fills prompt_lps. max_tokens may then be 0 (nothing generated, finish "length").
  bool prompt_logprobs = false;
  /// Log-probabilities of prompt tokens 1 … n−1 given the tokens before them (token 0 has no
  /// context), each with top_logprobs alternatives (at least 0). Filled by the engine before the
  /// job's first on_text / on_done, so a reader after either sees it complete.
  std::vector<TokenLogprob> prompt_lps;
  /// Prompt scoring with the raw logits (perplexity): when set, the prompt is scored as with
  /// prompt_logprobs (from the start, no prompt cache) but, instead of filling prompt_lps, this is
  /// called on the engine thread with each position j >= score_from and its logits [vocab] (the
  /// distribution of prompt[j+1]; j = n−1 included), in position order. A throw ends the job
  /// with "error" and Job::failure set to it.
  std::function<void(size_t pos, std::span<const float> logits)> on_prompt_logits;
  /// With on_prompt_logits: prompt steps whose positions all lie below this run without logits.
  size_t score_from = 0;
  /// Prompt tokens per step while scoring (0 = kPromptScoreChunk): [score_chunk, vocab] floats of
  /// logits per slot.
  size_t score_chunk = 0;
  /// While scoring: called on the engine thread after each prompt step with the tokens it ran.
  std::function<void(size_t tokens)> on_prompt_progress;
  /// End-of-turn ids do not end the sequence (llama.cpp's ignore_eos): it runs to max_tokens, the
  /// context or a stop string; their text is decoded like any token's.
  bool ignore_eos = false;
  const cmf::TaskMask* mask = nullptr;  ///< task mask for this sequence
  /// The skill this sequence runs (runtime/skills.h; nullptr = the engine's model as loaded). Its
  /// weights go into the step as model::SeqStep::weights, so sequences of different skills decode
  /// in one batch; its task mask is compiled for its weights. A slot's prompt cache is reused only
  /// by a job of the same skill.
  std::shared_ptr<const SkillBinding> skill;
  /// Dynamic routing (`--route-dynamic`, ENGINE-NOTES §3.12; specialize/dynamic_route.h): when set,
  /// called on the engine thread after every sampled token of a sequence that goes on, with the
  /// sequence so far (prompt + generated ids). It returns the skill to run from the next step on:
  /// the current binding (same pointer) keeps it, another one switches. A switch keeps the KV cache
  /// as computed so far (the positions before it were run under the old skill — the reference's
  /// "rebuild the touched layers" does not recompute them either), compiles the job's task mask for
  /// the new weights, and leaves the slot's prompt cache unusable for later jobs. A throw ends the
  /// job with "error".
  std::function<std::shared_ptr<const SkillBinding>(std::span<const uint32_t> seen)> reroute;
  /// Special tokens whose text is kept in the output (tool-call markers such as [TOOL_CALLS]).
  std::vector<uint32_t> keep_special;
  /// Constrains the output to this grammar (runtime/grammar.h): before each draw every token whose
  /// bytes (Tokenizer::token_bytes; a keep_special token's vocabulary text) no live parse accepts
  /// gets −inf, and an end-of-turn id stays allowed only where the grammar can end; the sequence
  /// stops ("stop") once the grammar can take nothing more. No allowed token at all ends the job
  /// with "error". Needs a tokenizer.
  std::shared_ptr<const Grammar> grammar;

  /// Text that became final (never part of a stop string, UTF-8 complete), with the logprobs of the
  /// tokens whose text it completes: a token's logprob waits with its text while that text may
  /// still become a stop string, and the tokens that only wrote a matched stop string are dropped
  /// with it (llama.cpp's server drops them too). Called with empty text and logprobs when a token
  /// writes no text yet (part of a UTF-8 character).
  std::function<void(std::string_view text, std::vector<TokenLogprob>&& lps)> on_text;
  /// Called exactly once at the end. finish: "stop" | "length" | "cancelled" | "error".
  std::function<void(const std::string& finish, size_t completion_tokens, const std::string& error)> on_done;
  /// Called with every sampled id (an end-of-turn id included), before its text (optional).
  std::function<void(uint32_t id)> on_token;
  /// With finish "error": the exception that ended the job, when one did (set before on_done), so
  /// a caller can rethrow it with its kind.
  std::exception_ptr failure;
  /// false: prefill the whole prompt, ignoring what a slot's prompt cache holds (Session::reset).
  bool use_cache = true;

  std::atomic<bool> cancel{false};  ///< set by any thread; honoured at the next step
  /// Prompt tokens whose KV came from the slot's prompt cache; set by the engine when the job gets
  /// a slot (before any on_text / on_done, so a reader after on_done sees it).
  size_t cached_tokens = 0;
  /// Whether the engine scores the prompt (prompt_logprobs or on_prompt_logits).
  bool scores_prompt() const noexcept { return prompt_logprobs || static_cast<bool>(on_prompt_logits); }
};

/// Prompt tokens a prompt-scoring job (Job::prompt_logprobs) runs per step: every position's
/// logits are kept, [kPromptScoreChunk, vocab] floats (19 MiB at Qwen2.5's vocabulary) per slot.
inline constexpr size_t kPromptScoreChunk = 32;

/// Engine settings.
struct EngineOptions {
  size_t parallel = 1;  ///< slots (sequences decoding together)
  size_t queue = 16;    ///< jobs allowed to wait for a slot
  size_t ctx = 0;       ///< KV positions per slot (0 = LoadedModel::ctx)
};

/// Counters (for /health and logs): jobs in a slot, jobs in the wait queue, jobs ended since start
/// (any reason) and, of those, jobs ended because they were cancelled; prompt tokens admitted and,
/// of those, tokens whose KV came from a slot's prompt cache instead of a prefill.
struct EngineStats {
  size_t active = 0, waiting = 0, completed = 0, cancelled = 0;
  size_t prompt_tokens = 0, reused_tokens = 0;
};

class Engine {
 public:
  /// Allocates `opt.parallel` KV caches of lm.ctx positions and starts the engine thread.
  Engine(LoadedModel& lm, const EngineOptions& opt, std::unique_ptr<StepBackend> backend = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Queues a job; false when the wait queue is full (the caller answers 429).
  bool submit(std::shared_ptr<Job> job);
  /// Queues every job of `jobs` or none (false: not all fit). Jobs queued together are admitted
  /// together when enough slots are free, so their first steps run as one batch.
  bool submit(std::span<const std::shared_ptr<Job>> jobs);
  EngineStats stats() const;
  /// The mask load_model activated (LoadedModel::mask, nullptr = none); its compiled variant is
  /// the LoadedModel's, not a second copy.
  const cmf::TaskMask* default_mask() const noexcept { return default_mask_; }

 private:
  struct Slot;
  void loop();
  /// Runs one step's forward for `active` (items[i] is active[i]'s share) and advances each
  /// sequence. A failed batch is retried one sequence at a time from the caches as they were before
  /// the step, so only the sequences that fail alone end (with "error"); the same for an exception
  /// while sampling or detokenizing one sequence. Never throws.
  void run_step(std::span<Slot* const> active, std::span<StepItem> items);
  /// Builds the step's items (prefill, prompt-scoring chunk or one token per sequence), then run_step.
  void step(std::span<Slot* const> active);
  /// The job's task mask compiled for `skill`'s weights (cached per (mask, skill)).
  std::shared_ptr<const model::Variant> variant_for(const cmf::TaskMask* mask,
                                                    const std::shared_ptr<const SkillBinding>& skill);
  /// Makes a newly admitted job's sampler and streaming decoder (outside the engine lock).
  void start_slot(Slot& s);
  /// After a successful forward: samples, detokenizes, applies stop rules and calls the job's
  /// callbacks; may throw (run_step ends the sequence then).
  void advance(Slot& s, const StepItem& item);
  /// Sets the logits of the tokens s's grammar refuses to −inf (Job::grammar); throws when none is left.
  void mask_by_grammar(Slot& s, std::span<float> logits);
  /// Ends a sequence with "error": its cache is dropped (a failed step leaves it unknown);
  /// `cause` (optional) is kept in Job::failure.
  void fail_slot(Slot& s, const std::string& error, std::exception_ptr cause = nullptr);
  void finish(Slot& s, const std::string& reason, const std::string& error = {});
  /// Moves the waiting jobs whose client has gone (cancel set) out of the queue into `out`, counted
  /// as completed and cancelled; mu_ held. Their on_done is called after unlocking
  /// (notify_dropped), so a client that hangs up while queued frees its place at once.
  void drop_cancelled_waiting(std::vector<std::shared_ptr<Job>>& out);
  static void notify_dropped(const std::vector<std::shared_ptr<Job>>& jobs);

  LoadedModel& lm_;
  EngineOptions opt_;
  std::unique_ptr<StepBackend> backend_;
  const cmf::TaskMask* default_mask_ = nullptr;
  /// Task masks compiled for the model or a job's skill, by (mask, skill) (engine thread only): once
  /// per pair, not per job. Skills stay alive while their variants are cached (variant_skills_).
  std::map<std::pair<const cmf::TaskMask*, const SkillBinding*>, std::shared_ptr<const model::Variant>>
      variants_;
  std::vector<std::shared_ptr<const SkillBinding>> variant_skills_;
  std::vector<std::unique_ptr<Slot>> slots_;
  /// The vocabulary's byte trie for grammar jobs, built by the first one (engine thread only).
  std::unique_ptr<TokenMasker> masker_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> waiting_;
  size_t active_ = 0, completed_ = 0, cancelled_ = 0, prompt_tokens_ = 0, reused_tokens_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace cortiq::runtime
