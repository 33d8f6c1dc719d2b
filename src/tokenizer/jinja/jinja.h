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
// TypeErrors, sandbox violations) are TemplateError(Raised|Undefined|Type|Security|Runtime) →
// ErrorKind::InvalidArgument, with the line and column of the failing expression.
#pragma once

#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "tokenizer/jinja/value.h"

namespace cortiq::jinja {

/// Render options.
struct Options {
  /// Time used by strftime_now() (local time); nullopt = the current time.
  std::optional<std::time_t> now;
  /// Allow list/dict mutators (append, pop, update, ...). transformers' immutable sandbox forbids
  /// them (SecurityError), so the default is false.
  bool allow_mutation = false;
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

/// Deepest nesting of arrays / objects in a render context: deeper → TemplateError(Type).
inline constexpr int kMaxValueDepth = 128;
/// Deepest nesting of macro calls in a render: deeper → TemplateError(Runtime) (Jinja2's
/// RecursionError).
inline constexpr int kMaxMacroDepth = 100;
/// Deepest nesting of expressions and blocks in a template's source: deeper → TemplateError(Syntax).
inline constexpr int kMaxSyntaxDepth = 200;

/// JSON → Value (objects keep key order; integers beyond int64 become floats). Throws
/// TemplateError(Type) for a value nested deeper than kMaxValueDepth.
Value from_json(const nlohmann::ordered_json& j);
/// Value → JSON (Undefined → null; callables throw TemplateError(Type)).
nlohmann::ordered_json to_json_value(const Value& v);

}  // namespace cortiq::jinja
