// cortiq_model_*: loading a model, tokenizing, chat templates (include/cortiq.h).
#include <algorithm>

#include "capi/handles.h"
#include "util/error.h"

using namespace cortiq;
using namespace cortiq::capi;

namespace {
const Tokenizer& tokenizer_of(const cortiq_model* m) {
  if (!m->st->lm.tokenizer) m->st->lm.encode_raw("");  // throws Unsupported naming what is missing
  return *m->st->lm.tokenizer;
}
}  // namespace

extern "C" {

cortiq_model_params cortiq_model_params_default(void) {
  cortiq_model_params p{};
  p.struct_size = sizeof(p);
  p.n_parallel = 1;
  return p;
}

cortiq_status cortiq_model_open(const char* path, const cortiq_model_params* params, cortiq_model** out) {
  return guarded([&] {
    need(path, "path");
    need(out, "out");
    *out = nullptr;
    const cortiq_model_params p = params ? *params : cortiq_model_params_default();
    if (params && params->struct_size != sizeof(cortiq_model_params))
      fail(ErrorKind::InvalidArgument, "cortiq_model_params.struct_size is {}, expected {}",
           params->struct_size, sizeof(cortiq_model_params));
    if (p.n_parallel == 0) fail(ErrorKind::InvalidArgument, "n_parallel must be at least 1");
    runtime::LoadOptions lo;
    lo.threads = p.threads;
    lo.ctx = p.ctx;
    lo.kv_f16 = p.kv_f16 != 0;
    lo.exact = p.exact != 0;
    lo.check_tensors = p.check_tensors != 0;
    auto st = std::make_shared<ModelState>();
    st->lm = runtime::load_model(path, lo);
    // Contexts beyond the slots wait in the queue (up to 64 generations at once).
    st->engine = std::make_unique<runtime::Engine>(st->lm, runtime::EngineOptions{p.n_parallel, 64});
    auto* m = new cortiq_model{std::move(st)};
    register_handle(m);
    *out = m;
    return CORTIQ_OK;
  });
}

void cortiq_model_close(cortiq_model* m) {
  if (unregister_handle(m)) delete m;
}

size_t cortiq_model_n_vocab(const cortiq_model* m) {
  return is_live(m) ? m->st->lm.model->vocab_size() : 0;
}

size_t cortiq_model_n_embd(const cortiq_model* m) {
  return is_live(m) ? m->st->lm.model->arch().hidden_size : 0;
}

size_t cortiq_model_n_ctx(const cortiq_model* m) {
  return is_live(m) ? m->st->lm.ctx : 0;
}

size_t cortiq_model_eos_ids(const cortiq_model* m, int32_t* ids, size_t cap) {
  if (!is_live(m)) return 0;
  const auto& eos = m->st->lm.eos_ids;
  for (size_t i = 0; ids && i < std::min(cap, eos.size()); ++i) ids[i] = static_cast<int32_t>(eos[i]);
  return eos.size();
}

cortiq_status cortiq_tokenize(const cortiq_model* m, const char* text, size_t len, cortiq_tokenize_mode mode,
                              int32_t* ids, size_t cap, size_t* n_ids) {
  CORTIQ_CHECK_HANDLE(m, "cortiq_model");
  return guarded([&] {
    if (len) need(text, "text");
    need(n_ids, "n_ids");
    const std::string_view s(text ? text : "", len);
    const Tokenizer& tok = tokenizer_of(m);
    std::vector<uint32_t> v;
    switch (mode) {
      case CORTIQ_TOKENIZE_PLAIN:
        v = tok.encode(s, false);
        break;
      case CORTIQ_TOKENIZE_SPECIAL:
        v = tok.encode(s, true);
        break;
      case CORTIQ_TOKENIZE_PROMPT:
        v = m->st->lm.encode_raw(s);
        break;
      default:
        fail(ErrorKind::InvalidArgument, "unknown tokenize mode {}", static_cast<int>(mode));
    }
    *n_ids = v.size();
    if (cap < v.size() || (!ids && !v.empty())) {
      set_error(fmt::format("the ids buffer holds {} ids, {} needed", cap, v.size()));
      return CORTIQ_ERR_BUFFER;
    }
    for (size_t i = 0; i < v.size(); ++i) ids[i] = static_cast<int32_t>(v[i]);
    return CORTIQ_OK;
  });
}

cortiq_status cortiq_detokenize(const cortiq_model* m, const int32_t* ids, size_t n, int skip_special,
                                char** text, size_t* len) {
  CORTIQ_CHECK_HANDLE(m, "cortiq_model");
  return guarded([&] {
    if (n) need(ids, "ids");
    need(text, "text");
    *text = nullptr;
    std::vector<uint32_t> v(n);
    for (size_t i = 0; i < n; ++i) {
      if (ids[i] < 0) fail(ErrorKind::InvalidArgument, "ids[{}] is negative ({})", i, ids[i]);
      v[i] = static_cast<uint32_t>(ids[i]);
    }
    const std::string s = tokenizer_of(m).decode(v, skip_special != 0);
    *text = dup_string(s);
    if (len) *len = s.size();
    return CORTIQ_OK;
  });
}

cortiq_status cortiq_chat_render(const cortiq_model* m, const cortiq_chat_message* messages, size_t n,
                                 int no_think, char** text) {
  CORTIQ_CHECK_HANDLE(m, "cortiq_model");
  return guarded([&] {
    if (n) need(messages, "messages");
    need(text, "text");
    *text = nullptr;
    std::vector<runtime::ChatMessage> msgs;
    for (size_t i = 0; i < n; ++i) {
      if (!messages[i].role || !messages[i].content)
        fail(ErrorKind::InvalidArgument, "messages[{}] has a NULL role or content", i);
      msgs.push_back({messages[i].role, messages[i].content});
    }
    *text = dup_string(runtime::render_chat(m->st->lm, msgs, no_think != 0));
    return CORTIQ_OK;
  });
}

}  // extern "C"
