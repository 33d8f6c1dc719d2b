// The C API's handle objects and the checks every entry point runs (include/cortiq.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "cmf/reader.h"
#include "cortiq.h"
#include "runtime/engine.h"
#include "runtime/session.h"

namespace cortiq::capi {

/// A loaded model and its one engine (slots shared by every context of the model). The engine is
/// declared after the model so it stops before the model goes away.
struct ModelState {
  runtime::LoadedModel lm;
  std::unique_ptr<runtime::Engine> engine;
  /// Skill bindings made for contexts, by id: bound once per model, shared by contexts.
  std::mutex skills_mu;
  std::map<std::string, std::shared_ptr<const runtime::SkillBinding>> skills;
};

/// What a running job reports back from the engine thread.
struct JobOutcome {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> pieces;  ///< text not yet handed to the caller
  size_t tokens = 0;               ///< ids sampled so far
  bool done = false;
  std::string finish, error;
};

/// Registers a live handle / forgets a closed one / asks whether `p` is live (thread-safe). Lets
/// every entry point refuse a NULL or closed handle with CORTIQ_ERR_HANDLE instead of crashing.
void register_handle(const void* p);
bool unregister_handle(const void* p);
bool is_live(const void* p);

/// Sets this thread's last error message.
void set_error(std::string msg);

/// Runs `f` (returning cortiq_status), turning every exception into a status and a message.
template <class F>
cortiq_status guarded(F&& f) noexcept;

/// Maps the exception in flight to a status (sets the message). Call only inside a catch block.
cortiq_status status_of_current_exception() noexcept;

template <class F>
cortiq_status guarded(F&& f) noexcept {
  try {
    return f();
  } catch (...) {
    return status_of_current_exception();
  }
}

/// A malloc'ed NUL-terminated copy of `s` (freed by cortiq_string_free).
char* dup_string(std::string_view s);

/// Throws Error(InvalidArgument) "<what> is NULL" when p is null.
void need(const void* p, const char* what);

}  // namespace cortiq::capi

/// Returns CORTIQ_ERR_HANDLE (with the message set) from the calling entry point when `h` is NULL or
/// closed.
#define CORTIQ_CHECK_HANDLE(h, name)                               \
  do {                                                             \
    if (!::cortiq::capi::is_live(h)) {                             \
      ::cortiq::capi::set_error(name " handle is NULL or closed"); \
      return CORTIQ_ERR_HANDLE;                                    \
    }                                                              \
  } while (0)

struct cortiq_file {
  cortiq::cmf::Reader reader;
};

struct cortiq_model {
  std::shared_ptr<cortiq::capi::ModelState> st;
};

struct cortiq_context {
  std::shared_ptr<cortiq::capi::ModelState> st;
  const cortiq::cmf::TaskMask* mask = nullptr;
  bool task_set = false;  ///< set_task chose the mask (a skill's input mask does not override it)
  std::shared_ptr<const cortiq::runtime::SkillBinding> skill;
  std::unique_ptr<cortiq::model::Model> embed_model;  ///< for cortiq_embed, over the skill's weights
  cortiq_stream* active = nullptr;                    ///< the generation in progress
};

struct cortiq_stream {
  cortiq_context* ctx = nullptr;
  std::shared_ptr<cortiq::runtime::Job> job;
  std::shared_ptr<cortiq::capi::JobOutcome> out;
  size_t max_tokens = 0;
  std::string piece;  ///< the piece cortiq_stream_next returned last
};
