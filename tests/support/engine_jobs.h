// Test support (header-only; for the end-to-end tests that drive runtime::Engine directly): a
// greedy job whose callbacks collect what the engine streams, and the wait for its end.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/session.h"

namespace cortiq::test {

/// What one job's on_text / on_done calls delivered.
struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  std::string text, finish, error;  ///< the streamed text; on_done's finish and error
  std::vector<std::string> pieces;  ///< the text of each on_text call
  std::vector<uint32_t> ids;        ///< the ids of the logprob entries (top_logprobs >= 0)
  size_t tokens = 0;                ///< on_done's completion_tokens
  bool done = false;
};

/// A greedy job of `n` tokens on `prompt` (encoded raw, no template) whose callbacks fill `c`;
/// `top_logprobs` as runtime::Job's (-1: no logprob entries, so no `ids`).
inline std::shared_ptr<runtime::Job> make_job(const runtime::LoadedModel& lm, const std::string& prompt,
                                              size_t n, const std::shared_ptr<Collected>& c,
                                              int top_logprobs = -1) {
  auto j = std::make_shared<runtime::Job>();
  j->prompt = lm.encode_raw(prompt);
  j->sampler = runtime::SamplerParams::greedy();
  j->max_tokens = n;
  j->top_logprobs = top_logprobs;
  j->on_text = [c](std::string_view t, std::vector<runtime::TokenLogprob>&& lps) {
    std::lock_guard<std::mutex> g(c->mu);
    c->text += t;
    c->pieces.emplace_back(t);
    for (const auto& lp : lps) c->ids.push_back(lp.id);
  };
  j->on_done = [c](const std::string& f, size_t k, const std::string& e) {
    std::lock_guard<std::mutex> g(c->mu);
    c->finish = f;
    c->tokens = k;
    c->error = e;
    c->done = true;
    c->cv.notify_all();
  };
  return j;
}

/// Waits (at most 60 s, a failed assertion then) for `c`'s on_done.
inline void wait_done(Collected& c) {
  std::unique_lock<std::mutex> lk(c.mu);
  ASSERT_TRUE(c.cv.wait_for(lk, std::chrono::seconds(60), [&] { return c.done; }));
}

}  // namespace cortiq::test
