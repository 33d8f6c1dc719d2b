// Internal interfaces of the Jinja2 evaluator (not part of the public API; see jinja.h).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/budget.h"
#include "tokenizer/jinja/jinja.h"

namespace cortiq::jinja {

/// A variable scope (root = globals + context; one per loop iteration, macro call, with block).
struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  const Value* lookup(const std::string& name) const;
};

[[noreturn]] void raise_undefined(const Value& u);
Value undefined_attr(const Value& obj, const std::string& name);
/// Python iteration: list items, dict keys, string characters; Undefined → empty.
std::vector<Value> iterate(const Value& v);
/// Python len() (Undefined → 0).
int64_t py_len(const Value& v);
/// obj[start:stop:step] on a list or string.
Value py_slice(const Value& obj, const Value* start, const Value* stop, const Value* step);
/// Binary arithmetic/concat operator (+ - * / // % ** ~).
Value binary_op(const std::string& op, const Value& a, const Value& b);
/// Python `item in container`.
bool contains(const Value& container, const Value& item);
/// Python index normalisation (negative from the end); false when out of range.
bool py_index_checked(int64_t idx, size_t n, size_t* out);
/// Name of builtin filter `id` ("join").
const char* filter_name(int id) noexcept;
/// Python printf-style `fmt % args`.
std::string printf_format(const std::string& fmt, const Value& args);

class Interp {
 public:
  enum class Flow { Normal, Break, Continue };
  explicit Interp(const Options& o) : opt(o), budget(o) {}
  /// Breaks the scope ↔ macro reference cycles (a macro holds its defining scope, which holds
  /// the macro) so a render frees everything it allocated.
  ~Interp();
  Interp(const Interp&) = delete;
  Interp& operator=(const Interp&) = delete;

  const Options& opt;
  Budget budget;  ///< this render's limits and use (budget.h)

  void install_globals(Scope& root);
  Flow exec(const Body& body, std::string& out, const std::shared_ptr<Scope>& sc);
  Value eval(const Expr& e, Scope& sc);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  Value call_value(const Value& fn, CallArgs& a);
  bool has_method(const Value& obj, const std::string& name) const;
  Value call_method(const Value& self, const std::string& name, CallArgs& a);
  Value apply_filter(int id, const Value& in, CallArgs& a);
  bool apply_test(int id, const Value& in, CallArgs& a);
  std::string render_body(const Body& body, const std::shared_ptr<Scope>& sc);

 private:
  std::vector<std::shared_ptr<Scope>> macro_closures_;  ///< scopes captured by macros (see ~Interp)
  Value eval_inner(const Expr& e, Scope& sc);
  CallArgs eval_args(const Expr& e, Scope& sc);
  Flow exec_one(const Stmt& s, std::string& out, const std::shared_ptr<Scope>& sc);
  void assign(Scope& sc, const Target& t, const Value& v);
  Value make_macro(const Stmt& s, const std::shared_ptr<Scope>& closure, const Body* body, std::string name);
  Value apply_filter_chain(const Expr& chain, const Value& input, Scope& sc);
};

}  // namespace cortiq::jinja
