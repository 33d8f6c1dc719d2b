// Syntax tree of a parsed Jinja2 template (internal to the engine).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace cortiq::jinja {

enum class EK : uint8_t {
  Const,    // value
  Name,     // name
  GetAttr,  // a.name
  GetItem,  // a[b]
  Slice,    // a[b:c:d] (null parts allowed)
  Call,     // a(args, kwargs)
  Filter,   // a|name(args) ; a == nullptr inside a {% filter %} block
  Test,     // a is [not] name(args)
  Neg,      // -a
  Pos,      // +a
  Not,      // not a
  Binary,   // a op b (+ - * / // % ** ~)
  And,      // a and b
  Or,       // a or b
  Compare,  // a op1 b op2 c ... (ops in cmp_ops)
  Cond,     // b if a else c  (a = cond, b = then, c = else or nullptr)
  List,     // [items]
  Tuple,    // (items)
  Dict,     // {k: v} (items = keys, items2 = values)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  EK kind;
  int line = 0, col = 0;
  Value value;                  // Const
  std::string name;             // Name / GetAttr attribute / Filter / Test / Binary operator
  bool negated = false;         // Test: `is not`
  ExprPtr a, b, c;              // operands
  std::vector<ExprPtr> items;   // List/Tuple/Dict keys, Call/Filter/Test positional args, Compare rhs
  std::vector<ExprPtr> items2;  // Dict values
  std::vector<std::pair<std::string, ExprPtr>> kw;  // keyword args
  std::vector<std::string> cmp_ops;                 // Compare operators
  int builtin = -1;                                 // resolved filter/test id
};

enum class SK : uint8_t {
  Text,         // text
  Output,       // {{ expr }}
  If,           // conds[i] -> bodies[i], else_body
  For,          // target in iter [if cond] body [else]
  Set,          // target = expr
  SetBlock,     // {% set target %}body{% endset %} (optional filter chain in expr)
  Macro,        // {% macro name(params) %}
  CallBlock,    // {% call(params) expr %}body{% endcall %}
  FilterBlock,  // {% filter f %}body{% endfilter %}
  With,         // {% with a = x %}body{% endwith %}
  Generation,   // {% generation %}body{% endgeneration %} (transformers' AssistantTracker)
  Break,
  Continue,
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

/// Assignment target: a name, `ns.attr`, or a tuple of names.
struct Target {
  std::vector<std::string> names;  // one name, or several for tuple unpacking
  bool tuple = false;
  std::string attr;  // non-empty: names[0].attr = ...
};

struct Stmt {
  SK kind;
  int line = 0, col = 0;
  std::string text;  // Text; Macro name
  ExprPtr expr;      // Output, Set value, For iter, CallBlock call, FilterBlock/SetBlock filter chain
  ExprPtr cond;      // For filter condition
  Target target;     // Set / For / SetBlock
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body, else_body;
  std::vector<std::string> params;  // Macro / CallBlock parameters
  std::vector<ExprPtr> defaults;    // aligned with params (nullptr: no default)
  std::vector<std::pair<Target, ExprPtr>> with_vars;
};

/// Parses template source into statements (after Jinja's newline normalisation, trim_blocks and
/// lstrip_blocks as transformers configures them). Throws TemplateError(Syntax|Unsupported) with the
/// 1-based line and column.
Body parse_template(std::string_view source);

/// Built-in filter/test lookup used by the parser (ids index the interpreter's tables); -1 if absent.
/// `known` reports whether Jinja2 itself has a filter/test of that name (then absence here is
/// Unsupported rather than a syntax error).
int find_filter(std::string_view name, bool* known);
int find_test(std::string_view name, bool* known);

}  // namespace cortiq::jinja
