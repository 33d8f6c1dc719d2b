// cortiq_context_*: per-context task mask and skill, generation (callback and pull streaming),
// prompt logits, embeddings and perplexity (include/cortiq.h). Every run is a job of the model's one
// engine (runtime/engine.h), so contexts of one model run concurrently in its slots.
#include <algorithm>
#include <cmath>
#include <limits>

#include "capi/handles.h"
#include "model/kv_cache.h"
#include "runtime/embeddings.h"
#include "runtime/perplexity.h"
#include "util/error.h"

using namespace cortiq;
using namespace cortiq::capi;

namespace {

/// The prompt as engine ids: non-empty, shorter than the context, every id < n_vocab.
std::vector<uint32_t> prompt_ids(const cortiq_context* c, const int32_t* prompt, size_t n) {
  if (n == 0) fail(ErrorKind::InvalidArgument, "the prompt is empty");
  need(prompt, "prompt");
  const runtime::LoadedModel& lm = c->st->lm;
  if (n >= lm.ctx)
    fail(ErrorKind::InvalidArgument,
         "the prompt is {} tokens but the context is {} (a prompt must be shorter)", n, lm.ctx);
  const uint32_t vocab = lm.model->vocab_size();
  std::vector<uint32_t> ids(n);
  for (size_t i = 0; i < n; ++i) {
    if (prompt[i] < 0 || static_cast<uint32_t>(prompt[i]) >= vocab)
      fail(ErrorKind::InvalidArgument, "prompt[{}] = {} is not a token id (vocabulary {})", i, prompt[i],
           vocab);
    ids[i] = static_cast<uint32_t>(prompt[i]);
  }
  return ids;
}

/// A job for context `c`: its task mask and skill.
std::shared_ptr<runtime::Job> make_job(const cortiq_context* c, std::vector<uint32_t> ids) {
  auto job = std::make_shared<runtime::Job>();
  job->prompt = std::move(ids);
  job->mask = c->mask;
  job->skill = c->skill;
  return job;
}

/// Wires the job's callbacks to `out` and queues it. Throws when the engine's queue is full.
void submit(const cortiq_context* c, const std::shared_ptr<runtime::Job>& job,
            const std::shared_ptr<JobOutcome>& out) {
  job->on_token = [out](uint32_t) {
    std::lock_guard<std::mutex> g(out->mu);
    ++out->tokens;
  };
  job->on_text = [out](std::string_view t, std::vector<runtime::TokenLogprob>&&) {
    if (t.empty()) return;
    std::lock_guard<std::mutex> g(out->mu);
    out->pieces.emplace_back(t);
    out->cv.notify_all();
  };
  job->on_done = [out](const std::string& finish, size_t, const std::string& error) {
    std::lock_guard<std::mutex> g(out->mu);
    out->finish = finish;
    out->error = error;
    out->done = true;
    out->cv.notify_all();
  };
  if (!c->st->engine->submit(job))
    fail(ErrorKind::InvalidArgument, "too many generations are waiting for this model's engine (64)");
}

/// Rethrows what ended a failed job.
[[noreturn]] void throw_failure(const runtime::Job& job, const JobOutcome& out) {
  if (job.failure) std::rethrow_exception(job.failure);
  fail(ErrorKind::InvalidArgument, "{}", out.error);
}

/// Runs a job to its end on the calling thread; throws what failed it.
void run_blocking(const cortiq_context* c, const std::shared_ptr<runtime::Job>& job) {
  auto out = std::make_shared<JobOutcome>();
  submit(c, job, out);
  std::unique_lock<std::mutex> lk(out->mu);
  out->cv.wait(lk, [&] { return out->done; });
  if (out->finish == "error") throw_failure(*job, *out);
}

cortiq_finish finish_of(const std::string& f, size_t tokens, size_t max_tokens) {
  if (f == "stop") return CORTIQ_FINISH_STOP;
  if (f == "cancelled") return CORTIQ_FINISH_CANCELLED;
  if (f == "length") return tokens >= max_tokens ? CORTIQ_FINISH_MAX_TOKENS : CORTIQ_FINISH_LENGTH;
  return CORTIQ_FINISH_NONE;
}

runtime::SamplerParams sampler_of(const cortiq_sampler_params& p) {
  runtime::SamplerParams s;
  s.temperature = p.temperature;
  s.top_p = p.top_p;
  s.top_k = p.top_k;
  s.min_p = p.min_p;
  s.repeat_penalty = p.repeat_penalty;
  s.presence_penalty = p.presence_penalty;
  if (p.seed >= 0) s.seed = static_cast<uint64_t>(p.seed);
  return s;
}

}  // namespace

extern "C" {

cortiq_status cortiq_context_new(cortiq_model* m, cortiq_context** out) {
  CORTIQ_CHECK_HANDLE(m, "cortiq_model");
  return guarded([&] {
    need(out, "out");
    auto* c = new cortiq_context{};
    c->st = m->st;
    c->mask = m->st->lm.mask;
    register_handle(c);
    *out = c;
    return CORTIQ_OK;
  });
}

void cortiq_context_free(cortiq_context* c) {
  if (!is_live(c)) return;
  if (c->active) cortiq_stream_free(c->active, nullptr);
  if (unregister_handle(c)) delete c;
}

cortiq_status cortiq_context_set_task(cortiq_context* c, const char* task) {
  CORTIQ_CHECK_HANDLE(c, "cortiq_context");
  return guarded([&] {
    need(task, "task");
    const runtime::LoadedModel& lm = c->st->lm;
    const std::string name = task;
    if (name.empty()) {
      c->task_set = false;
      c->mask = c->skill && c->skill->mask ? c->skill->mask : lm.mask;
    } else if (name == "off") {
      c->task_set = true;
      c->mask = nullptr;
    } else {
      std::string available;
      const cmf::TaskMask* mk = runtime::find_task(*lm.reader, name, &available);
      if (!mk)
        fail(ErrorKind::InvalidArgument, "unknown task '{}' (available: {})", name,
             available.empty() ? "none, the file has no task masks" : available);
      c->task_set = true;
      c->mask = mk;
    }
    return CORTIQ_OK;
  });
}

cortiq_status cortiq_context_set_skill(cortiq_context* c, const char* skill) {
  CORTIQ_CHECK_HANDLE(c, "cortiq_context");
  return guarded([&] {
    need(skill, "skill");
    const std::string id = skill;
    ModelState& st = *c->st;
    std::shared_ptr<const runtime::SkillBinding> b;
    if (!(id.empty() || id == "none" || id == "backbone")) {
      std::lock_guard<std::mutex> g(st.skills_mu);
      auto& slot = st.skills[id];
      if (!slot) {
        try {
          slot = runtime::make_skill_binding(st.lm, id);
        } catch (...) {
          st.skills.erase(id);
          throw;
        }
      }
      b = slot;
    }
    c->skill = b;
    c->embed_model.reset();
    if (!c->task_set) c->mask = b && b->mask ? b->mask : st.lm.mask;
    return CORTIQ_OK;
  });
}

cortiq_sampler_params cortiq_sampler_params_default(void) {
  const runtime::SamplerParams d;
  cortiq_sampler_params p{};
  p.struct_size = sizeof(p);
  p.temperature = d.temperature;
  p.top_p = d.top_p;
  p.top_k = d.top_k;
  p.min_p = d.min_p;
  p.repeat_penalty = d.repeat_penalty;
  p.presence_penalty = d.presence_penalty;
  p.seed = -1;
  p.max_tokens = 256;
  return p;
}

cortiq_sampler_params cortiq_sampler_params_greedy(void) {
  cortiq_sampler_params p = cortiq_sampler_params_default();
  const runtime::SamplerParams g = runtime::SamplerParams::greedy();
  p.temperature = g.temperature;
  p.repeat_penalty = g.repeat_penalty;
  return p;
}

cortiq_status cortiq_stream_begin(cortiq_context* c, const int32_t* prompt, size_t n,
                                  const cortiq_sampler_params* params, cortiq_stream** out) {
  CORTIQ_CHECK_HANDLE(c, "cortiq_context");
  return guarded([&] {
    need(out, "out");
    *out = nullptr;
    if (c->active)
      fail(ErrorKind::InvalidArgument, "this context is already generating (free its stream first)");
    const cortiq_sampler_params p = params ? *params : cortiq_sampler_params_default();
    if (params && params->struct_size != sizeof(cortiq_sampler_params))
      fail(ErrorKind::InvalidArgument, "cortiq_sampler_params.struct_size is {}, expected {}",
           params->struct_size, sizeof(cortiq_sampler_params));
    if (p.n_stop) need(p.stop, "params->stop");
    auto job = make_job(c, prompt_ids(c, prompt, n));
    job->sampler = sampler_of(p);  // its own penalties; the engine's stay neutral (as Session)
    job->max_tokens = p.max_tokens;
    for (size_t i = 0; i < p.n_stop; ++i) {
      need(p.stop[i], "params->stop[i]");
      if (*p.stop[i]) job->stop.emplace_back(p.stop[i]);
    }
    auto* s = new cortiq_stream{};
    s->ctx = c;
    s->job = job;
    s->out = std::make_shared<JobOutcome>();
    s->max_tokens = p.max_tokens;
    try {
      submit(c, job, s->out);
    } catch (...) {
      delete s;
      throw;
    }
    register_handle(s);
    c->active = s;
    *out = s;
    return CORTIQ_OK;
  });
}

int cortiq_stream_next(cortiq_stream* s, const char** piece, size_t* len) {
  CORTIQ_CHECK_HANDLE(s, "cortiq_stream");
  return guarded([&]() -> cortiq_status {
    need(piece, "piece");
    need(len, "len");
    std::unique_lock<std::mutex> lk(s->out->mu);
    s->out->cv.wait(lk, [&] { return s->out->done || !s->out->pieces.empty() || s->cancelled; });
    if (!s->out->pieces.empty() && !s->cancelled) {
      s->piece = std::move(s->out->pieces.front());
      s->out->pieces.pop_front();
      *piece = s->piece.c_str();
      *len = s->piece.size();
      return static_cast<cortiq_status>(1);
    }
    *piece = "";
    *len = 0;
    if (s->out->done && s->out->finish == "error") throw_failure(*s->job, *s->out);
    return CORTIQ_OK;
  });
}

void cortiq_stream_cancel(cortiq_stream* s) {
  if (!is_live(s)) return;
  s->job->cancel = true;
  std::lock_guard<std::mutex> g(s->out->mu);
  s->cancelled = true;
  s->out->cv.notify_all();
}

cortiq_status cortiq_stream_free(cortiq_stream* s, cortiq_generate_result* result) {
  CORTIQ_CHECK_HANDLE(s, "cortiq_stream");
  unregister_handle(s);
  cortiq_status rc = CORTIQ_OK;
  {
    std::unique_lock<std::mutex> lk(s->out->mu);
    // The reader leaves before the end it has not seen: still running, or finished by an engine that
    // ran ahead with pieces left undelivered. Either way the finish is "cancelled".
    if (!s->out->done || !s->out->pieces.empty()) {
      s->job->cancel = true;
      s->cancelled = true;
    }
    s->out->cv.wait(lk, [&] { return s->out->done; });
    if (result) {
      *result = cortiq_generate_result{};
      result->finish =
          s->cancelled ? CORTIQ_FINISH_CANCELLED : finish_of(s->out->finish, s->out->tokens, s->max_tokens);
      result->prompt_tokens = s->job->prompt.size();
      result->reused_tokens = s->job->cached_tokens;
      result->generated_tokens = s->out->tokens;
    }
    if (s->out->finish == "error") rc = guarded([&]() -> cortiq_status { throw_failure(*s->job, *s->out); });
  }
  if (is_live(s->ctx) && s->ctx->active == s) s->ctx->active = nullptr;
  delete s;
  return rc;
}

cortiq_status cortiq_generate(cortiq_context* c, const int32_t* prompt, size_t n,
                              const cortiq_sampler_params* params, cortiq_text_callback on_text, void* user,
                              cortiq_generate_result* result) {
  cortiq_stream* s = nullptr;
  if (const cortiq_status rc = cortiq_stream_begin(c, prompt, n, params, &s); rc != CORTIQ_OK) return rc;
  bool cancelled = false;
  int rc = 0;
  const char* piece = nullptr;
  size_t len = 0;
  while ((rc = cortiq_stream_next(s, &piece, &len)) == 1) {
    if (cancelled || !on_text) continue;
    if (on_text(piece, len, user) != 0) {
      cancelled = true;
      cortiq_stream_cancel(s);
    }
  }
  const cortiq_status end = cortiq_stream_free(s, result);
  return rc < 0 ? static_cast<cortiq_status>(rc) : end;
}

cortiq_status cortiq_logits(cortiq_context* c, const int32_t* prompt, size_t n, int all, float* out,
                            size_t cap) {
  CORTIQ_CHECK_HANDLE(c, "cortiq_context");
  return guarded([&] {
    need(out, "out");
    if (c->active) fail(ErrorKind::InvalidArgument, "this context is generating (free its stream first)");
    auto job = make_job(c, prompt_ids(c, prompt, n));
    const size_t vocab = c->st->lm.model->vocab_size();
    const size_t need_floats = (all ? n : 1) * vocab;
    if (cap < need_floats) {
      set_error(fmt::format("the logits buffer holds {} floats, {} needed", cap, need_floats));
      return CORTIQ_ERR_BUFFER;
    }
    job->max_tokens = 0;
    job->score_from = all ? 0 : n - 1;
    job->on_prompt_logits = [out, all, vocab, n](size_t pos, std::span<const float> logits) {
      if (logits.size() != vocab)
        fail(ErrorKind::InvalidArgument, "logits of {} floats, vocabulary {}", logits.size(), vocab);
      if (all)
        std::copy(logits.begin(), logits.end(), out + pos * vocab);
      else if (pos == n - 1)
        std::copy(logits.begin(), logits.end(), out);
    };
    run_blocking(c, job);
    return CORTIQ_OK;
  });
}

cortiq_status cortiq_embed_ex(cortiq_context* c, const int32_t* prompt, size_t n, cortiq_pooling pool,
                              int normalize, float* out, size_t cap) {
  CORTIQ_CHECK_HANDLE(c, "cortiq_context");
  return guarded([&] {
    need(out, "out");
    if (pool != CORTIQ_POOL_MEAN && pool != CORTIQ_POOL_LAST)
      fail(ErrorKind::InvalidArgument, "unknown pooling {}", static_cast<int>(pool));
    const std::vector<uint32_t> ids = prompt_ids(c, prompt, n);
    const runtime::LoadedModel& lm = c->st->lm;
    const size_t hidden = lm.model->arch().hidden_size;
    if (cap < hidden) {
      set_error(fmt::format("the embedding buffer holds {} floats, {} needed", cap, hidden));
      return CORTIQ_ERR_BUFFER;
    }
    // A model of the context's own over the shared weights (its scratch and thread pool): the
    // engine's model runs on the engine thread, so this one never races with it.
    if (!c->embed_model)
      c->embed_model = model::Model::create(c->skill ? c->skill->weights : lm.backbone, lm.model_options);
    const std::vector<float> v = runtime::embed_sequence(
        *c->embed_model, ids, pool == CORTIQ_POOL_LAST ? runtime::Pooling::Last : runtime::Pooling::Mean,
        normalize != 0);
    std::copy(v.begin(), v.end(), out);
    return CORTIQ_OK;
  });
}

cortiq_status cortiq_embed(cortiq_context* c, const int32_t* prompt, size_t n, cortiq_pooling pool,
                           float* out, size_t cap) {
  return cortiq_embed_ex(c, prompt, n, pool, 1, out, cap);
}

cortiq_status cortiq_perplexity(cortiq_context* c, const char* text, size_t len, double* ppl,
                                size_t* scored) {
  CORTIQ_CHECK_HANDLE(c, "cortiq_context");
  return guarded([&] {
    if (len) need(text, "text");
    need(ppl, "ppl");
    if (c->active) fail(ErrorKind::InvalidArgument, "this context is generating (free its stream first)");
    const runtime::LoadedModel& lm = c->st->lm;
    std::vector<uint32_t> ids = lm.encode_raw(std::string_view(text ? text : "", len));
    if (ids.size() >= lm.ctx) ids.resize(lm.ctx - 1);
    if (ids.size() < 2)
      fail(ErrorKind::InvalidArgument, "the text has {} tokens: perplexity needs at least 2", ids.size());
    std::vector<int32_t> p(ids.begin(), ids.end());
    auto job = make_job(c, prompt_ids(c, p.data(), p.size()));
    job->max_tokens = 0;
    job->score_from = 0;
    double sum = 0.0;
    size_t count = 0;
    job->on_prompt_logits = [&](size_t pos, std::span<const float> logits) {
      if (pos + 1 >= ids.size()) return;
      sum += runtime::token_nll(logits, ids[pos + 1]);
      ++count;
    };
    run_blocking(c, job);
    *ppl = std::exp(sum / static_cast<double>(count));
    if (scored) *scored = count;
    return CORTIQ_OK;
  });
}

}  // extern "C"
