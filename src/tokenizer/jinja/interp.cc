// Tree-walking evaluator of the Jinja2 engine: scopes, statements, operators, attribute lookup.
// Semantics follow jinja2 3.1 runtime/sandbox as used by transformers (see jinja.h).
#include "tokenizer/jinja/interp.h"

#include <cmath>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/jinja.h"

namespace cortiq::jinja {

// ---- scopes -----------------------------------------------------------------------------------

const Value* Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

// ---- helpers ----------------------------------------------------------------------------------

[[noreturn]] void raise_undefined(const Value& u) {
  throw_tpl(u.unsafe ? TplErrorKind::Security : TplErrorKind::Undefined, u.s);
}

static std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

Value undefined_attr(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), name));
}

std::vector<Value> iterate(const Value& v) {
  switch (v.type) {
    case VType::Undefined:
      return {};
    case VType::Array:
      return v.arr->items;
    case VType::Object: {
      std::vector<Value> keys;
      keys.reserve(v.obj->items.size());
      for (auto& kv : v.obj->items) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case VType::String: {
      std::vector<Value> out;
      for (char32_t c : utf8_decode(v.s)) {
        std::string s;
        utf8_append(s, c);
        out.push_back(Value::string(std::move(s)));
      }
      return out;
    }
    default:
      throw_tpl(TplErrorKind::Type, fmt::format("'{}' object is not iterable", type_name(v)));
  }
}

int64_t py_len(const Value& v) {
  switch (v.type) {
    case VType::Undefined:
      return 0;
    case VType::String:
      return static_cast<int64_t>(utf8_length(v.s));
    case VType::Array:
      return static_cast<int64_t>(v.arr->items.size());
    case VType::Object:
    case VType::Namespace:
      return static_cast<int64_t>(v.obj->items.size());
    default:
      throw_tpl(TplErrorKind::Type, fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

static bool is_mutator(VType t, const std::string& name) {
  if (t == VType::Array)
    return name == "append" || name == "reverse" || name == "insert" || name == "sort" || name == "extend" ||
           name == "remove" || name == "pop" || name == "clear";
  if (t == VType::Object)
    return name == "clear" || name == "pop" || name == "popitem" || name == "setdefault" || name == "update";
  return false;
}

Value Interp::getattr(const Value& obj, const std::string& name) {
  switch (obj.type) {
    case VType::Undefined:
      raise_undefined(obj);
    case VType::String:
    case VType::Array:
    case VType::Object:
      if (has_method(obj, name)) {
        if (!opt.allow_mutation && is_mutator(obj.type, name)) {
          Value u = Value::undefined(
              fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)));
          u.unsafe = true;
          return u;
        }
        Value self = obj;
        Interp* in = this;
        return Value::callable(name,
                               [in, self, name](CallArgs& a) { return in->call_method(self, name, a); });
      }
      if (obj.type == VType::Object) {
        if (const Value* v = obj.obj->find(name)) return *v;
      }
      return undefined_attr(obj, name);
    case VType::Namespace:
      if (const Value* v = obj.obj->find(name)) return *v;
      return undefined_attr(obj, name);
    default:
      return undefined_attr(obj, name);
  }
}

static bool py_index(int64_t idx, size_t n, size_t* out) {
  if (idx < 0) idx += static_cast<int64_t>(n);
  if (idx < 0 || idx >= static_cast<int64_t>(n)) return false;
  *out = static_cast<size_t>(idx);
  return true;
}

Value Interp::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) {
    if (key.is_string()) raise_undefined(obj);
    return Value::undefined(fmt::format("Undefined has no element {}", repr(key)));
  }
  bool intkey = key.type == VType::Int || key.type == VType::Bool;
  int64_t k = key.type == VType::Bool ? (key.b ? 1 : 0) : key.i;
  size_t at = 0;
  if (obj.type == VType::Array && intkey && py_index(k, obj.arr->items.size(), &at))
    return obj.arr->items[at];
  if (obj.type == VType::String && intkey) {
    std::u32string u = utf8_decode(obj.s);
    if (py_index(k, u.size(), &at)) {
      std::string s;
      utf8_append(s, u[at]);
      return Value::string(std::move(s));
    }
  }
  if (obj.type == VType::Object && key.is_string()) {
    if (const Value* v = obj.obj->find(key.s)) return *v;
  }
  if (key.is_string()) return getattr(obj, key.s);
  return Value::undefined(fmt::format("{} has no element {}", object_type_repr(obj), repr(key)));
}

static int64_t slice_norm(int64_t v, int64_t n, int64_t step, bool is_start) {
  if (v < 0) {
    v += n;
    if (v < 0) v = step < 0 ? -1 : 0;
  } else if (v >= n) {
    v = step < 0 ? n - 1 : n;
  }
  (void)is_start;
  return v;
}

Value py_slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  auto geti = [](const Value* v, const char* what) -> std::optional<int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    if (v->type == VType::Int) return v->i;
    if (v->type == VType::Bool) return v->b ? 1 : 0;
    if (v->is_undefined()) raise_undefined(*v);
    throw_tpl(TplErrorKind::Type, fmt::format("slice {} must be an integer or None", what));
  };
  if (obj.is_undefined()) raise_undefined(obj);
  if (obj.type != VType::Array && obj.type != VType::String)
    throw_tpl(TplErrorKind::Type, fmt::format("'{}' object is not subscriptable", type_name(obj)));
  int64_t st = geti(step, "indices").value_or(1);
  if (st == 0) throw_tpl(TplErrorKind::Type, "slice step cannot be zero");
  std::u32string u;
  int64_t n;
  if (obj.type == VType::String) {
    u = utf8_decode(obj.s);
    n = static_cast<int64_t>(u.size());
  } else {
    n = static_cast<int64_t>(obj.arr->items.size());
  }
  auto a = geti(start, "indices");
  auto b = geti(stop, "indices");
  int64_t lo = a ? slice_norm(*a, n, st, true) : (st > 0 ? 0 : n - 1);
  int64_t hi = b ? slice_norm(*b, n, st, false) : (st > 0 ? n : -1);
  std::vector<size_t> idx;
  if (st > 0)
    for (int64_t x = lo; x < hi; x += st) idx.push_back(static_cast<size_t>(x));
  else
    for (int64_t x = lo; x > hi; x += st) idx.push_back(static_cast<size_t>(x));
  if (obj.type == VType::String) {
    std::u32string r;
    for (size_t x : idx) r.push_back(u[x]);
    return Value::string(utf8_encode(r));
  }
  std::vector<Value> r;
  for (size_t x : idx) r.push_back(obj.arr->items[x]);
  return Value::array(std::move(r), obj.arr->tuple);
}

// ---- arithmetic -------------------------------------------------------------------------------

static bool intlike(const Value& v) {
  return v.type == VType::Int || v.type == VType::Bool;
}
static int64_t ival(const Value& v) {
  return v.type == VType::Bool ? (v.b ? 1 : 0) : v.i;
}
static double fval(const Value& v) {
  return v.type == VType::Float ? v.f : static_cast<double>(ival(v));
}

[[noreturn]] static void bad_operands(const std::string& op, const Value& a, const Value& b) {
  throw_tpl(TplErrorKind::Type,
            fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b)));
}

static Value checked(bool overflow, const int64_t& r) {
  if (overflow)
    throw_tpl(TplErrorKind::Unsupported, "integer overflow (Python big integers are not supported)");
  return Value::integer(r);
}

static double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(to_str(a) + to_str(b));
  if (a.is_undefined()) raise_undefined(a);
  if (b.is_undefined()) raise_undefined(b);
  bool nums = a.is_number() && b.is_number();
  bool ints = intlike(a) && intlike(b);
  int64_t r = 0;
  if (op == "+") {
    if (ints) return checked(__builtin_add_overflow(ival(a), ival(b), &r), r);
    if (nums) return Value::number(fval(a) + fval(b));
    if (a.is_string() && b.is_string()) return Value::string(a.s + b.s);
    if (a.is_array() && b.is_array() && a.arr->tuple == b.arr->tuple) {
      std::vector<Value> items = a.arr->items;
      items.insert(items.end(), b.arr->items.begin(), b.arr->items.end());
      return Value::array(std::move(items), a.arr->tuple);
    }
    if (a.is_string() || b.is_string())
      throw_tpl(TplErrorKind::Type,
                a.is_string()
                    ? fmt::format("can only concatenate str (not \"{}\") to str", type_name(b))
                    : fmt::format("unsupported operand type(s) for +: '{}' and 'str'", type_name(a)));
    bad_operands("+", a, b);
  }
  if (op == "-") {
    if (ints) return checked(__builtin_sub_overflow(ival(a), ival(b), &r), r);
    if (nums) return Value::number(fval(a) - fval(b));
    bad_operands("-", a, b);
  }
  if (op == "*") {
    if (ints) return checked(__builtin_mul_overflow(ival(a), ival(b), &r), r);
    if (nums) return Value::number(fval(a) * fval(b));
    const Value* seq = a.is_string() || a.is_array() ? &a : (b.is_string() || b.is_array() ? &b : nullptr);
    const Value* cnt = seq == &a ? &b : &a;
    if (seq && intlike(*cnt)) {
      const uint64_t n = static_cast<uint64_t>(std::max<int64_t>(0, ival(*cnt)));
      // the size is checked before anything is built: 'x' * 10**9 must not allocate a gigabyte
      auto times = [n](size_t k) {
        return k && n > UINT64_MAX / k ? UINT64_MAX : static_cast<uint64_t>(k) * n;
      };
      if (seq->is_string()) {
        budget_bytes(times(seq->s.size()), "string '*'");
        budget_step(times(seq->s.size()) / 64);
        std::string s;
        s.reserve(static_cast<size_t>(times(seq->s.size())));
        for (uint64_t k = 0; k < n; ++k) s += seq->s;
        return Value::string(std::move(s));
      }
      uint64_t bytes = 0;  // the items' strings are copied with them
      for (const auto& x : seq->arr->items) bytes += x.is_string() ? x.s.size() : 0;
      budget_items(times(seq->arr->items.size()), "list '*'");
      budget_bytes(times(bytes), "list '*' (its strings)");
      budget_step(times(seq->arr->items.size()) + times(bytes) / 64);
      if (seq->arr->items.empty()) return Value::array({}, seq->arr->tuple);
      std::vector<Value> items;
      for (uint64_t k = 0; k < n; ++k)
        items.insert(items.end(), seq->arr->items.begin(), seq->arr->items.end());
      return Value::array(std::move(items), seq->arr->tuple);
    }
    bad_operands("*", a, b);
  }
  if (op == "/") {
    if (!nums) bad_operands("/", a, b);
    if (fval(b) == 0) throw_tpl(TplErrorKind::Type, "division by zero");
    return Value::number(fval(a) / fval(b));
  }
  if (op == "//") {
    if (!nums) bad_operands("//", a, b);
    if (ints) {
      int64_t x = ival(a), y = ival(b);
      if (y == 0) throw_tpl(TplErrorKind::Type, "integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) checked(true, 0);
      int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
      return Value::integer(q);
    }
    if (fval(b) == 0) throw_tpl(TplErrorKind::Type, "float floor division by zero");
    return Value::number(std::floor(fval(a) / fval(b)));
  }
  if (op == "%") {
    if (a.is_string()) return Value::string(printf_format(a.s, b));
    if (!nums) bad_operands("%", a, b);
    if (ints) {
      int64_t x = ival(a), y = ival(b);
      if (y == 0) throw_tpl(TplErrorKind::Type, "integer division or modulo by zero");
      if (y == -1) return Value::integer(0);
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::integer(m);
    }
    if (fval(b) == 0) throw_tpl(TplErrorKind::Type, "float modulo");
    return Value::number(py_fmod(fval(a), fval(b)));
  }
  if (op == "**") {
    if (!nums) bad_operands("** or pow()", a, b);
    if (ints && ival(b) >= 0) {
      int64_t base = ival(a), e = ival(b), acc = 1;
      // 0, 1 and -1 never overflow: their powers are known (1 ** 10**18 must not loop 10**18 times)
      if (base == 0 || base == 1) return Value::integer(e == 0 ? 1 : base);
      if (base == -1) return Value::integer(e % 2 ? -1 : 1);
      for (int64_t k = 0; k < e; ++k)  // |base| >= 2: overflows within 64 rounds
        if (__builtin_mul_overflow(acc, base, &acc)) checked(true, 0);
      return Value::integer(acc);
    }
    return Value::number(std::pow(fval(a), fval(b)));
  }
  throw_tpl(TplErrorKind::Unsupported, "operator " + op);
}

bool contains(const Value& container, const Value& item) {
  switch (container.type) {
    case VType::Undefined:
      return false;
    case VType::String:
      if (item.is_undefined()) raise_undefined(item);
      if (!item.is_string())
        throw_tpl(TplErrorKind::Type,
                  fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
      return container.s.find(item.s) != std::string::npos;
    case VType::Array:
      for (auto& x : container.arr->items)
        if (equals(x, item)) return true;
      return false;
    case VType::Object:
      return item.is_string() && container.obj->find(item.s) != nullptr;
    default:
      throw_tpl(TplErrorKind::Type,
                fmt::format("argument of type '{}' is not iterable", type_name(container)));
  }
}

// ---- evaluation -------------------------------------------------------------------------------

// What a value built by expression `e` is called in a budget error: "string '*'", "list from filter
// 'map'".
static std::string built_by(const Expr& e, const Value& v) {
  const char* type = v.is_string() ? "string" : "list";
  switch (e.kind) {
    case EK::Binary:
      return fmt::format("{} '{}'", type, e.name);
    case EK::Filter:
      return fmt::format("{} from filter '{}'", type, filter_name(e.builtin));
    case EK::Call:
      if (e.a->kind == EK::Name || e.a->kind == EK::GetAttr)
        return fmt::format("{} from call of '{}'", type, e.a->name);
      return fmt::format("{} from a call", type);
    default:
      return fmt::format("{} value", type);
  }
}

// Whether expression `e` may build a new list (not a lookup of an existing one, which is shared).
static bool builds_list(const Expr& e) {
  return e.kind != EK::Name && e.kind != EK::Const && e.kind != EK::GetAttr && e.kind != EK::GetItem &&
         e.kind != EK::Cond && e.kind != EK::And && e.kind != EK::Or;
}

Value Interp::eval(const Expr& e, Scope& sc) {
  try {
    budget.step();
    Value v = eval_inner(e, sc);
    if (v.is_string()) {
      // every copy of a string costs its length (a lookup copies it, `~` builds it)
      if (v.s.size() > opt.max_bytes) budget.check_bytes(v.s.size(), built_by(e, v));
      budget.step(v.s.size() / 64);
    } else if (v.is_array() && builds_list(e)) {
      if (v.arr->items.size() > opt.max_items) budget.check_items(v.arr->items.size(), built_by(e, v));
      budget.step(v.arr->items.size());
    }
    return v;
  } catch (const TemplateError& err) {
    if (err.line() == 0) throw TemplateError(err.tpl_kind(), err.detail(), e.line, e.col);
    throw;
  }
}

CallArgs Interp::eval_args(const Expr& e, Scope& sc) {
  CallArgs a;
  a.pos.reserve(e.items.size());
  for (auto& x : e.items) a.pos.push_back(eval(*x, sc));
  for (auto& [k, x] : e.kw) a.kw.emplace_back(k, eval(*x, sc));
  return a;
}

Value Interp::eval_inner(const Expr& e, Scope& sc) {
  switch (e.kind) {
    case EK::Const:
      return e.value;
    case EK::Name: {
      if (const Value* v = sc.lookup(e.name)) return *v;
      return Value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case EK::GetAttr:
      return getattr(eval(*e.a, sc), e.name);
    case EK::GetItem:
      return getitem(eval(*e.a, sc), eval(*e.b, sc));
    case EK::Slice: {
      Value obj = eval(*e.items[0], sc);
      Value p[3];
      for (int k = 0; k < 3; ++k)
        if (e.items[static_cast<size_t>(k) + 1]) p[k] = eval(*e.items[static_cast<size_t>(k) + 1], sc);
      return py_slice(obj, e.items[1] ? &p[0] : nullptr, e.items[2] ? &p[1] : nullptr,
                      e.items[3] ? &p[2] : nullptr);
    }
    case EK::Call: {
      if (e.a->kind == EK::GetAttr) {
        Value obj = eval(*e.a->a, sc);
        if ((obj.is_string() || obj.is_array() || obj.is_object()) && has_method(obj, e.a->name)) {
          if (!opt.allow_mutation && is_mutator(obj.type, e.a->name))
            throw_tpl(
                TplErrorKind::Security,
                fmt::format("access to attribute '{}' of '{}' object is unsafe.", e.a->name, type_name(obj)));
          CallArgs a = eval_args(e, sc);
          return call_method(obj, e.a->name, a);
        }
        Value fn = getattr(obj, e.a->name);
        CallArgs a = eval_args(e, sc);
        return call_value(fn, a);
      }
      Value fn = eval(*e.a, sc);
      CallArgs a = eval_args(e, sc);
      return call_value(fn, a);
    }
    case EK::Filter: {
      Value in = e.a ? eval(*e.a, sc) : Value::undefined();
      CallArgs a = eval_args(e, sc);
      return apply_filter(e.builtin, in, a);
    }
    case EK::Test: {
      Value in = eval(*e.a, sc);
      CallArgs a = eval_args(e, sc);
      bool r = apply_test(e.builtin, in, a);
      return Value::boolean(e.negated ? !r : r);
    }
    case EK::Neg:
    case EK::Pos: {
      Value v = eval(*e.a, sc);
      if (v.is_undefined()) raise_undefined(v);
      if (e.kind == EK::Pos) {
        if (!v.is_number())
          throw_tpl(TplErrorKind::Type, fmt::format("bad operand type for unary +: '{}'", type_name(v)));
        return v.type == VType::Bool ? Value::integer(v.b) : v;
      }
      if (intlike(v)) {
        if (ival(v) == INT64_MIN) checked(true, 0);
        return Value::integer(-ival(v));
      }
      if (v.type == VType::Float) return Value::number(-v.f);
      throw_tpl(TplErrorKind::Type, fmt::format("bad operand type for unary -: '{}'", type_name(v)));
    }
    case EK::Not:
      return Value::boolean(!truthy(eval(*e.a, sc)));
    case EK::And: {
      Value l = eval(*e.a, sc);
      if (!truthy(l)) return l;
      return eval(*e.b, sc);
    }
    case EK::Or: {
      Value l = eval(*e.a, sc);
      if (truthy(l)) return l;
      return eval(*e.b, sc);
    }
    case EK::Binary:
      return binary_op(e.name, eval(*e.a, sc), eval(*e.b, sc));
    case EK::Compare: {
      Value l = eval(*e.a, sc);
      for (size_t k = 0; k < e.cmp_ops.size(); ++k) {
        Value r = eval(*e.items[k], sc);
        const std::string& op = e.cmp_ops[k];
        budget.step(value_cost(l) + value_cost(r));  // `in` searches, `==` compares element-wise
        bool ok;
        if (op == "==")
          ok = equals(l, r);
        else if (op == "!=")
          ok = !equals(l, r);
        else if (op == "<")
          ok = less(l, r);
        else if (op == ">")
          ok = less(r, l);
        else if (op == "<=")
          ok = less(l, r) || equals(l, r);
        else if (op == ">=")
          ok = less(r, l) || equals(l, r);
        else if (op == "in")
          ok = contains(r, l);
        else
          ok = !contains(r, l);
        if (!ok) return Value::boolean(false);
        l = std::move(r);
      }
      return Value::boolean(true);
    }
    case EK::Cond: {
      if (truthy(eval(*e.a, sc))) return eval(*e.b, sc);
      if (e.c) return eval(*e.c, sc);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
    case EK::List:
    case EK::Tuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (auto& x : e.items) items.push_back(eval(*x, sc));
      return Value::array(std::move(items), e.kind == EK::Tuple);
    }
    case EK::Dict: {
      Value d = Value::object();
      for (size_t k = 0; k < e.items.size(); ++k) {
        Value key = eval(*e.items[k], sc);
        if (!key.is_string())
          throw_tpl(TplErrorKind::Unsupported, "dict literal keys other than strings are not supported");
        d.obj->set(key.s, eval(*e.items2[k], sc));
      }
      return d;
    }
  }
  throw_tpl(TplErrorKind::Unsupported, "expression");
}

Value Interp::call_value(const Value& fn, CallArgs& a) {
  if (fn.type == VType::Callable) return fn.fn->fn(a);
  if (fn.is_undefined()) raise_undefined(fn);
  throw_tpl(TplErrorKind::Type, fmt::format("'{}' object is not callable", type_name(fn)));
}

// ---- statements -------------------------------------------------------------------------------

void Interp::assign(Scope& sc, const Target& t, const Value& v) {
  if (!t.attr.empty()) {
    const Value* ns = sc.lookup(t.names[0]);
    if (!ns || ns->type != VType::Namespace)
      throw_tpl(TplErrorKind::Runtime, "cannot assign attribute on non-namespace object");
    ns->obj->set(t.attr, v);
    return;
  }
  if (!t.tuple) {
    sc.vars[t.names[0]] = v;
    return;
  }
  std::vector<Value> items = iterate(v);
  if (items.size() != t.names.size())
    throw_tpl(TplErrorKind::Type, items.size() > t.names.size()
                                      ? fmt::format("too many values to unpack (expected {})", t.names.size())
                                      : fmt::format("not enough values to unpack (expected {}, got {})",
                                                    t.names.size(), items.size()));
  for (size_t k = 0; k < items.size(); ++k) sc.vars[t.names[k]] = items[k];
}

std::string Interp::render_body(const Body& body, const std::shared_ptr<Scope>& sc) {
  std::string out;
  exec(body, out, sc);
  return out;
}

Interp::~Interp() {
  for (auto& sc : macro_closures_) sc->vars.clear();
}

Value Interp::make_macro(const Stmt& s, const std::shared_ptr<Scope>& closure, const Body* body,
                         std::string name) {
  macro_closures_.push_back(closure);
  Interp* in = this;
  const Stmt* sp = &s;
  return Value::callable(name, [in, sp, closure, body, name](CallArgs& a) {
    // Jinja2 raises RecursionError for a macro that calls itself without end; each call here takes
    // a few stack frames of the interpreter, so the depth is bounded well below the stack's size
    // (Budget::enter_macro).
    in->budget.step();
    in->budget.enter_macro(*sp, name);
    FrameExit exit_frame{in->budget};
    auto sc = std::make_shared<Scope>();
    sc->parent = closure;
    if (a.pos.size() > sp->params.size())
      throw_tpl(TplErrorKind::Type,
                fmt::format("macro '{}' takes not more than {} argument(s)", name, sp->params.size()));
    for (size_t k = 0; k < a.pos.size(); ++k) sc->vars[sp->params[k]] = a.pos[k];
    for (auto& [key, v] : a.kw) {
      if (key == "caller") {
        sc->vars["caller"] = v;
        continue;
      }
      auto it = std::find(sp->params.begin(), sp->params.end(), key);
      if (it == sp->params.end())
        throw_tpl(TplErrorKind::Type, fmt::format("macro '{}' takes no keyword argument '{}'", name, key));
      sc->vars[key] = v;
    }
    for (size_t k = 0; k < sp->params.size(); ++k) {
      if (sc->vars.count(sp->params[k])) continue;
      if (sp->defaults[k])
        sc->vars[sp->params[k]] = in->eval(*sp->defaults[k], *sc);
      else
        sc->vars[sp->params[k]] =
            Value::undefined(fmt::format("parameter '{}' was not provided", sp->params[k]));
    }
    return Value::string(in->render_body(*body, sc));
  });
}

Value Interp::apply_filter_chain(const Expr& chain, const Value& input, Scope& sc) {
  // chain: Filter(Filter(nullptr, f1), f2) ...; the innermost has a == nullptr.
  Value in = chain.a ? apply_filter_chain(*chain.a, input, sc) : input;
  try {
    CallArgs a = eval_args(chain, sc);
    return apply_filter(chain.builtin, in, a);
  } catch (const TemplateError& err) {
    if (err.line() == 0) throw TemplateError(err.tpl_kind(), err.detail(), chain.line, chain.col);
    throw;
  }
}

static Value make_loop(const std::vector<Value>& items, size_t i) {
  size_t n = items.size();
  Value l = Value::object();
  auto& o = *l.obj;
  o.items.reserve(12);
  o.items.emplace_back("index", Value::integer(static_cast<int64_t>(i) + 1));
  o.items.emplace_back("index0", Value::integer(static_cast<int64_t>(i)));
  o.items.emplace_back("revindex", Value::integer(static_cast<int64_t>(n - i)));
  o.items.emplace_back("revindex0", Value::integer(static_cast<int64_t>(n - i - 1)));
  o.items.emplace_back("first", Value::boolean(i == 0));
  o.items.emplace_back("last", Value::boolean(i + 1 == n));
  o.items.emplace_back("length", Value::integer(static_cast<int64_t>(n)));
  o.items.emplace_back("depth", Value::integer(1));
  o.items.emplace_back("depth0", Value::integer(0));
  o.items.emplace_back("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
  o.items.emplace_back("nextitem", i + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
  o.items.emplace_back("cycle", Value::callable("cycle", [i](CallArgs& a) {
                         if (a.pos.empty()) throw_tpl(TplErrorKind::Type, "no items for cycling given");
                         return a.pos[i % a.pos.size()];
                       }));
  return l;
}

Interp::Flow Interp::exec(const Body& body, std::string& out, const std::shared_ptr<Scope>& sc) {
  for (auto& st : body) {
    try {
      budget.step();
      Flow f = exec_one(*st, out, sc);
      budget.check_output(out.size());
      if (f != Flow::Normal) return f;
    } catch (const TemplateError& err) {
      if (err.line() == 0) throw TemplateError(err.tpl_kind(), err.detail(), st->line, st->col);
      throw;
    }
  }
  return Flow::Normal;
}

Interp::Flow Interp::exec_one(const Stmt& s, std::string& out, const std::shared_ptr<Scope>& sc) {
  switch (s.kind) {
    case SK::Text:
      out += s.text;
      return Flow::Normal;
    case SK::Output:
      out += to_str(eval(*s.expr, *sc));
      return Flow::Normal;
    case SK::If:
      for (size_t k = 0; k < s.conds.size(); ++k)
        if (truthy(eval(*s.conds[k], *sc))) return exec(s.bodies[k], out, sc);
      return exec(s.else_body, out, sc);
    case SK::For: {
      budget.enter_loop(s);
      FrameExit exit_frame{budget};
      std::vector<Value> items = iterate(eval(*s.expr, *sc));
      budget.step(items.size());  // the copy of the items
      if (s.cond) {
        std::vector<Value> kept;
        auto fs = std::make_shared<Scope>();
        fs->parent = sc;
        for (auto& it : items) {
          budget.step();
          assign(*fs, s.target, it);
          if (truthy(eval(*s.cond, *fs))) kept.push_back(it);
        }
        items = std::move(kept);
      }
      for (size_t i = 0; i < items.size(); ++i) {
        budget.step(kLoopIterationSteps);
        auto is = std::make_shared<Scope>();
        is->parent = sc;
        assign(*is, s.target, items[i]);
        is->vars["loop"] = make_loop(items, i);
        Flow f = exec(s.body, out, is);
        if (f == Flow::Break) break;
      }
      if (items.empty() && !s.else_body.empty()) {
        auto es = std::make_shared<Scope>();
        es->parent = sc;
        return exec(s.else_body, out, es);
      }
      return Flow::Normal;
    }
    case SK::Set:
      assign(*sc, s.target, eval(*s.expr, *sc));
      return Flow::Normal;
    case SK::SetBlock: {
      auto bs = std::make_shared<Scope>();
      bs->parent = sc;
      Value v = Value::string(render_body(s.body, bs));
      if (s.expr) v = apply_filter_chain(*s.expr, v, *sc);
      assign(*sc, s.target, v);
      return Flow::Normal;
    }
    case SK::Macro:
      sc->vars[s.text] = make_macro(s, sc, &s.body, s.text);
      return Flow::Normal;
    case SK::CallBlock: {
      const Expr& call = *s.expr;
      Value caller = make_macro(s, sc, &s.body, "caller");
      Value fn;
      if (call.a->kind == EK::GetAttr)
        fn = getattr(eval(*call.a->a, *sc), call.a->name);
      else
        fn = eval(*call.a, *sc);
      CallArgs a = eval_args(call, *sc);
      a.kw.emplace_back("caller", caller);
      out += to_str(call_value(fn, a));
      return Flow::Normal;
    }
    case SK::FilterBlock: {
      auto bs = std::make_shared<Scope>();
      bs->parent = sc;
      out += to_str(apply_filter_chain(*s.expr, Value::string(render_body(s.body, bs)), *sc));
      return Flow::Normal;
    }
    case SK::With: {
      auto ws = std::make_shared<Scope>();
      ws->parent = sc;
      for (auto& [t, x] : s.with_vars) assign(*ws, t, eval(*x, *sc));
      return exec(s.body, out, ws);
    }
    case SK::Generation: {
      auto gs = std::make_shared<Scope>();
      gs->parent = sc;
      out += render_body(s.body, gs);
      return Flow::Normal;
    }
    case SK::Break:
      return Flow::Break;
    case SK::Continue:
      return Flow::Continue;
  }
  return Flow::Normal;
}

// ---- Template ----------------------------------------------------------------------------------

struct Template::Impl {
  Body body;
};

Template::Template(std::string_view source) : impl_(std::make_unique<Impl>()) {
  impl_->body = parse_template(source);
}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Value& context, const Options& opt) const {
  if (!context.is_object()) fail(ErrorKind::InvalidArgument, "chat template context must be a JSON object");
  Interp in(opt);
  BudgetScope budget_scope(in.budget);  // for the size checks of value.cc and builtins.cc
  auto root = std::make_shared<Scope>();
  in.install_globals(*root);
  for (auto& [k, v] : context.obj->items) root->vars[k] = v;
  std::string out;
  struct Report {
    const Interp& in;
    ~Report() {
      if (in.opt.steps_used) *in.opt.steps_used = in.budget.steps_used();
    }
  } report{in};
  in.exec(impl_->body, out, root);
  return out;
}

std::string Template::render(const nlohmann::ordered_json& context, const Options& opt) const {
  return render(from_json(context), opt);
}

namespace {
Value from_json_at(const nlohmann::ordered_json& j, int depth);
}

Value from_json(const nlohmann::ordered_json& j) {
  return from_json_at(j, 0);
}

namespace {
Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  // The conversion and every later use of the value (render, tojson) recurse once per level: a
  // deeper value (e.g. tool-call arguments nested 20,000 deep in a request) would overflow the stack.
  if (depth > kMaxValueDepth)
    throw TemplateError(TplErrorKind::Type,
                        fmt::format("a context value is nested deeper than {} levels", kMaxValueDepth), 0, 0);
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (auto& x : j) items.push_back(from_json_at(x, depth + 1));
      return Value::array(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value o = Value::object();
      o.obj->items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        o.obj->items.emplace_back(it.key(), from_json_at(it.value(), depth + 1));
      return o;
    }
    default:
      fail(ErrorKind::InvalidArgument, "chat template context: unsupported JSON value (binary)");
  }
}
}  // namespace

nlohmann::ordered_json to_json_value(const Value& v) {
  const WalkDepth level;
  switch (v.type) {
    case VType::Undefined:
    case VType::None:
      return nullptr;
    case VType::Bool:
      return v.b;
    case VType::Int:
      return v.i;
    case VType::Float:
      return v.f;
    case VType::String:
      return v.s;
    case VType::Array: {
      auto a = nlohmann::ordered_json::array();
      for (auto& x : v.arr->items) a.push_back(to_json_value(x));
      return a;
    }
    case VType::Object:
    case VType::Namespace: {
      auto o = nlohmann::ordered_json::object();
      for (auto& [k, x] : v.obj->items) o[k] = to_json_value(x);
      return o;
    }
    default:
      throw_tpl(TplErrorKind::Type, "a callable is not JSON serializable");
  }
}

}  // namespace cortiq::jinja
