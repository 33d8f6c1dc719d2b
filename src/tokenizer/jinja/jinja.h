// Jinja2 template engine for Hugging Face chat templates (public API).
//
// Renders the way transformers' apply_chat_template does (transformers
// utils/chat_template_utils.py `_compile_jinja_template`): ImmutableSandboxedEnvironment with
// trim_blocks=True, lstrip_blocks=True, the loopcontrols extension (break/continue), the
// `{% generation %}` block (renders its body), `tojson` = json.dumps(x, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False), globals raise_exception(msg) and
// strftime_now(fmt). Values follow Jinja2's default Undefined semantics (PITFALLS TPL-2).
//
// Errors: a syntax error is TemplateError(Syntax) → cortiq ErrorKind::Parse; a Jinja2 construct this
// engine lacks is TemplateError(Unsupported) → ErrorKind::Unsupported (both at parse time, with the
// template line and column); failures while rendering (raise_exception, undefined operations,
// TypeErrors, sandbox violations, an exceeded render budget) are
// TemplateError(Raised|Undefined|Type|Security|Runtime) → ErrorKind::InvalidArgument, with the line
// and column of the failing expression; a render stopped by Options::cancelled is
// TemplateError(Cancelled) → ErrorKind::InvalidArgument.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "tokenizer/jinja/value.h"

namespace cortiq::jinja {

/// Default render budget (Options): far above what a real chat template needs (every golden case
/// renders within 1% of the steps), and small enough that a render at the limit ends within about
/// a second (100–250 ns per step on one core).
inline constexpr uint64_t kDefaultMaxSteps = 5'000'000;
inline constexpr size_t kDefaultMaxBytes = size_t{64} << 20;  ///< 64 MiB
inline constexpr size_t kDefaultMaxItems = size_t{1} << 20;   ///< 1,048,576 list items
/// Deepest nesting of macro calls in a render (the most Options::max_macro_depth allows): deeper →
/// TemplateError(Runtime) (Jinja2's RecursionError). Each call takes a few interpreter stack frames.
inline constexpr int kMaxMacroDepth = 100;

/// Render options. The budget fields (max_steps … cancelled) bound what a template may cost
/// (tokenizer/jinja/budget.h): past one, rendering ends with TemplateError(Runtime) whose detail
/// starts "render budget:" and names the construct and the limit.
struct Options {
  /// Time used by strftime_now() (local time); nullopt = the current time.
  std::optional<std::time_t> now;
  /// Allow list/dict mutators (append, pop, update, ...). transformers' immutable sandbox forbids
  /// them (SecurityError), so the default is false.
  bool allow_mutation = false;
  /// Step budget: statements, expressions and macro calls count one each, a loop iteration a few,
  /// and work on a value counts its size (budget.h). 0 = unlimited.
  uint64_t max_steps = kDefaultMaxSteps;
  /// Largest rendered output and largest single string built, in bytes.
  size_t max_bytes = kDefaultMaxBytes;
  /// Largest single list built, in items.
  size_t max_items = kDefaultMaxItems;
  /// Deepest nesting of macro calls (values above kMaxMacroDepth act as kMaxMacroDepth).
  int max_macro_depth = kMaxMacroDepth;
  /// Cancel check, polled every kCancelPollSteps (budget.h) steps from the rendering thread; when it
  /// returns true the render ends with TemplateError(Cancelled). Empty = never cancelled.
  std::function<bool()> cancelled;
  /// When set, receives the steps the render counted (also when it fails): for tests and tuning.
  uint64_t* steps_used = nullptr;
};

struct Stmt;

/// A parsed template: parse once, render many times (thread-safe: render is const).
class Template {
 public:
  /// Parses `source`. Throws TemplateError(Syntax|Unsupported) naming line and column.
  explicit Template(std::string_view source);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  /// Renders with the variables of `context` (a JSON object; key order preserved).
  std::string render(const nlohmann::ordered_json& context, const Options& opt = {}) const;
  /// Renders with the variables of `context` (an Object value).
  std::string render(const Value& context, const Options& opt = {}) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Deepest nesting of expressions and blocks in a template's source: deeper → TemplateError(Syntax).
inline constexpr int kMaxSyntaxDepth = 200;

/// JSON → Value (objects keep key order; integers beyond int64 become floats). Throws
/// TemplateError(Type) for a value nested deeper than kMaxValueDepth.
Value from_json(const nlohmann::ordered_json& j);
/// Value → JSON (Undefined → null; callables throw TemplateError(Type)).
nlohmann::ordered_json to_json_value(const Value& v);

}  // namespace cortiq::jinja
