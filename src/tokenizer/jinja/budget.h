// Render budget of the Jinja engine (issue 27 §3: "a chat template cannot hang the process").
//
// One Budget per Template::render holds the limits of jinja::Options and what the render has used:
//   * steps — every statement executed, expression evaluated and macro call counts one, a loop
//     iteration kLoopIterationSteps; work proportional to a value's size counts its size (a string's bytes /
//     64, a list's or dict's items) where a value is copied, built, iterated or searched, so `ns.s ~ x` in a
//     loop and a filter over a big list in a loop are charged what they cost;
//   * sizes — the rendered output and any single string built stay within max_bytes, any single
//     list within max_items; operations that would build a bigger value (`'x' * 10**9`, a padding
//     width, an indent) are refused before they allocate;
//   * macro nesting — at most max_macro_depth calls deep;
//   * cancellation — Options::cancelled is polled every kCancelPollSteps steps.
// Exceeding a limit throws TemplateError(Runtime) whose detail starts "render budget:" and names
// the construct (the innermost for loop or macro call, or the operation) and the limit; a cancel
// throws TemplateError(Cancelled).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/jinja.h"

namespace cortiq::jinja {

struct Stmt;

/// Steps one for-loop iteration counts (its scope and `loop` object cost a few statements' time).
inline constexpr uint64_t kLoopIterationSteps = 4;
/// Steps between two polls of Options::cancelled.
inline constexpr uint64_t kCancelPollSteps = 4096;

/// The limits and use of one render (see the file comment). Not thread-safe: one render, one thread.
class Budget {
 public:
  explicit Budget(const Options& opt);

  /// Counts `n` steps; throws past max_steps (naming the innermost construct) or when the cancel
  /// check, polled every kCancelPollSteps steps, says so.
  void step(uint64_t n = 1) {
    used_ += n;
    if (used_ >= next_check_) slow_step();
  }
  /// Throws when a string of `bytes` bytes exceeds max_bytes; `what` names it ("string '*'").
  void check_bytes(uint64_t bytes, std::string_view what) const;
  /// Throws when a list of `items` items exceeds max_items; `what` names it ("list '*'").
  void check_items(uint64_t items, std::string_view what) const;
  /// Throws when the rendered output (`bytes` so far) exceeds max_bytes.
  void check_output(uint64_t bytes) const;

  /// Marks the start / end of a construct the step error names: a for loop, or a call of the macro
  /// `name` defined by `s`. Entering a macro call checks max_macro_depth.
  void enter_loop(const Stmt& s) { frames_.push_back({&s, nullptr}); }
  void enter_macro(const Stmt& s, const std::string& name);
  void leave() {
    if (frames_.back().macro) --macro_depth_;
    frames_.pop_back();
  }

  /// Steps counted so far.
  uint64_t steps_used() const noexcept { return used_; }
  /// The options whose limits apply.
  const Options& options() const noexcept { return opt_; }

 private:
  struct Frame {
    const Stmt* s;
    const std::string* macro;  ///< the macro's name for a call; nullptr for a loop
  };
  void slow_step();
  std::string where() const;  ///< "for loop at line 3", "macro 'f' (line 1)" or "the template"
  const Options& opt_;
  uint64_t used_ = 0;
  uint64_t next_check_ = 0;
  int macro_depth_ = 0;
  std::vector<Frame> frames_;
};

/// Leaves the budget's innermost frame when it goes out of scope (pairs with enter_loop/enter_macro).
struct FrameExit {
  Budget& b;
  ~FrameExit() { b.leave(); }
};

/// The budget of the render running on this thread; nullptr outside a render.
Budget* current_budget() noexcept;

/// Installs `b` as this thread's current budget for its lifetime (restores the previous one).
class BudgetScope {
 public:
  explicit BudgetScope(Budget& b) noexcept;
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  Budget* prev_;
};

/// check_bytes / check_items / step on the current budget; outside a render the sizes are checked
/// against the default limits (Options{}) and steps are not counted.
void budget_bytes(uint64_t bytes, std::string_view what);
void budget_items(uint64_t items, std::string_view what);
void budget_step(uint64_t n);

/// The work a value stands for in steps: a string's bytes / 64, a list's or dict's items (not
/// nested), 0 for scalars.
uint64_t value_cost(const Value& v) noexcept;

}  // namespace cortiq::jinja
