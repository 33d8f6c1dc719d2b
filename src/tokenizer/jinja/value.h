// Value model of the Jinja2 engine used for chat templates.
//
// A `Value` mirrors the Python objects a Hugging Face chat template sees when transformers renders
// it with Jinja2: Jinja's default `Undefined`, None, bool, int, float, str, list/tuple, dict (insertion
// ordered), callables (macros, globals, bound methods) and `namespace()` objects. Lists, dicts and
// namespaces are reference types (shared), as in Python. Strings are UTF-8; every index, slice and
// length on a string counts Unicode code points, as Python does.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/error.h"

namespace cortiq::jinja {

/// Category of a template failure, mirroring the Jinja2/Python exception that transformers would
/// surface for the same template and context.
enum class TplErrorKind {
  Syntax,       ///< TemplateSyntaxError / TemplateAssertionError (bad template text, unknown filter)
  Unsupported,  ///< a valid Jinja2 construct this engine does not implement
  Raised,       ///< the template called raise_exception(msg) (transformers' TemplateError)
  Undefined,    ///< jinja2.UndefinedError (using an undefined value in an operation)
  Type,         ///< Python TypeError / ValueError / ZeroDivisionError / IndexError inside the render
  Security,     ///< jinja2.sandbox.SecurityError (e.g. list.append in the immutable sandbox)
  Runtime,      ///< TemplateRuntimeError (e.g. assigning an attribute of a non-namespace), or a
                ///< render budget exceeded (jinja.h Options; detail starts "render budget:")
  Cancelled,    ///< the render was stopped by Options::cancelled (no Jinja2 counterpart)
};

/// Name of a TplErrorKind ("Syntax", "Raised", ...).
std::string_view tpl_error_kind_name(TplErrorKind k) noexcept;

/// A template error. `kind()` (the cortiq ErrorKind) is Parse for Syntax, Unsupported for
/// Unsupported and InvalidArgument for render-time failures (Cancelled included). `detail()` is the bare
/// message as Jinja2 words it (for Raised: exactly the string passed to raise_exception); `what()` adds the
/// template line and column when known.
class TemplateError : public Error {
 public:
  TemplateError(TplErrorKind tk, std::string detail, int line, int col);
  TplErrorKind tpl_kind() const noexcept { return tpl_kind_; }
  const std::string& detail() const noexcept { return detail_; }
  int line() const noexcept { return line_; }  ///< 1-based, 0 when unknown
  int col() const noexcept { return col_; }    ///< 1-based, 0 when unknown

 private:
  TplErrorKind tpl_kind_;
  std::string detail_;
  int line_, col_;
};

/// Throws a TemplateError at an unknown position (the interpreter adds the position on the way out).
[[noreturn]] void throw_tpl(TplErrorKind k, std::string detail);

/// Deepest nesting of arrays / objects: a context value (from_json), a list or dict a template builds
/// (`{% set ns.x = [ns.x] %}` in a loop), and the walks over values (repr, comparisons, tojson) —
/// deeper, or a container that holds itself, is TemplateError(Type), not a stack overflow.
inline constexpr int kMaxValueDepth = 128;

/// Counts one level of a recursive walk over a value on this thread; past kMaxValueDepth levels
/// (a container that holds itself, built with allow_mutation) throws TemplateError(Type).
class WalkDepth {
 public:
  WalkDepth();
  ~WalkDepth();
  WalkDepth(const WalkDepth&) = delete;
  WalkDepth& operator=(const WalkDepth&) = delete;
};

struct Value;
struct Array;
struct Object;
struct Callable;
using ValuePtr = std::shared_ptr<Value>;

enum class VType : uint8_t { Undefined, None, Bool, Int, Float, String, Array, Object, Callable, Namespace };

/// One Jinja/Python value. Cheap to copy for scalars; containers are shared by reference.
struct Value {
  VType type = VType::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  /// String payload; for Undefined the message an operation on it raises ("'x' is undefined").
  std::string s;
  std::shared_ptr<Array> arr;
  std::shared_ptr<Object> obj;  // Object and Namespace
  std::shared_ptr<Callable> fn;
  bool unsafe = false;  ///< Undefined produced by the sandbox: raises SecurityError, not UndefinedError

  static Value undefined(std::string hint = "") {
    Value v;
    v.s = std::move(hint);
    return v;
  }
  static Value none() {
    Value v;
    v.type = VType::None;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.type = VType::Bool;
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v;
    v.type = VType::Int;
    v.i = x;
    return v;
  }
  static Value number(double x) {
    Value v;
    v.type = VType::Float;
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v;
    v.type = VType::String;
    v.s = std::move(x);
    return v;
  }
  static Value array(std::vector<Value> items = {}, bool tuple = false);
  static Value object();
  static Value ns();
  static Value callable(std::string name, std::function<Value(struct CallArgs&)> f);

  bool is_undefined() const { return type == VType::Undefined; }
  bool is_none() const { return type == VType::None; }
  bool is_string() const { return type == VType::String; }
  bool is_int() const { return type == VType::Int; }  ///< int (not bool)
  bool is_number() const { return type == VType::Int || type == VType::Float || type == VType::Bool; }
  bool is_array() const { return type == VType::Array; }
  bool is_object() const { return type == VType::Object; }
};

struct Array {
  std::vector<Value> items;
  bool tuple = false;  ///< Python tuple (repr with parentheses)
  int depth = 1;       ///< nesting as built by Value::array (1 + the deepest item container)
};

/// Nesting of `v`: 0 for a scalar, the container's recorded depth otherwise.
int value_depth(const Value& v) noexcept;
/// Checks that `v` may go into the container `into` (an Array or Object): TemplateError(Type) when
/// `v` is or holds `into` (a cycle, which no walk could end and no reference count could free) or
/// the container would nest deeper than kMaxValueDepth. Updates the container's recorded depth.
void check_insert(Array& into, const Value& v);

/// Insertion-ordered mapping with string keys (Python dict as produced by JSON).
struct Object {
  std::vector<std::pair<std::string, Value>> items;
  int depth = 1;  ///< nesting as built through set (1 + the deepest value container)
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value v);
};

/// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  /// Argument `name` at position `idx` (positional first, then keyword), or nullptr.
  const Value* get(size_t idx, std::string_view name) const;
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;
};

// ---- Python semantics helpers -------------------------------------------------------------

/// Python truthiness (Undefined is false).
bool truthy(const Value& v);
/// Python `str(v)` (Undefined → "", None → "None", True → "True", float → repr).
std::string to_str(const Value& v);
/// Python `repr(v)` (strings quoted like Python, lists `[...]`, dicts `{...}`, tuples `(...)`).
std::string repr(const Value& v);
/// Python float repr (shortest round-trip, "1e-05", "1.0", "inf").
std::string float_repr(double d);
/// Python `==` (1 == 1.0 == True; Undefined equals only Undefined).
bool equals(const Value& a, const Value& b);
/// Python `<` ordering; throws TemplateError(Type) for unorderable operands.
bool less(const Value& a, const Value& b);
/// Python type name used in error messages ("dict", "str", "NoneType", ...).
std::string type_name(const Value& v);
/// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as Python writes it. `indent` < 0 means
/// None; `indent_str` (when non-empty) overrides `indent` (a string indent). `item_sep`/`key_sep`
/// empty means Python's defaults for the indent mode. Throws TemplateError(Type) on Undefined or a
/// callable (not JSON serializable).
std::string to_json(const Value& v, bool ensure_ascii, int indent, const std::string& indent_str,
                    const std::string& item_sep, const std::string& key_sep, bool sort_keys);

// ---- UTF-8 helpers ---------------------------------------------------------------------

/// Decodes UTF-8 into code points (invalid bytes map to U+FFFD, one per byte).
std::u32string utf8_decode(std::string_view s);
/// Encodes code points as UTF-8.
std::string utf8_encode(std::u32string_view s);
/// Appends one code point as UTF-8.
void utf8_append(std::string& out, char32_t c);
/// Number of code points in a UTF-8 string.
size_t utf8_length(std::string_view s);
/// Python str.isspace() for one code point.
bool py_isspace(char32_t c);

}  // namespace cortiq::jinja
