// The C API's model, context and stream handles (include/cortiq.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "capi/errors.h"
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

}  // namespace cortiq::capi

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
  /// cortiq_stream_cancel was called: pieces not yet delivered are dropped and the finish is
  /// "cancelled" even when the engine reached the end first (it runs ahead of the reader).
  std::atomic<bool> cancelled{false};
  std::string piece;  ///< the piece cortiq_stream_next returned last
};
