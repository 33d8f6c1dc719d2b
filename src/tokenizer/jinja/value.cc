// Python-compatible semantics of jinja::Value: str/repr, equality, ordering, json.dumps.
#include "tokenizer/jinja/value.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/budget.h"

namespace cortiq::jinja {

std::string_view tpl_error_kind_name(TplErrorKind k) noexcept {
  switch (k) {
    case TplErrorKind::Syntax:
      return "Syntax";
    case TplErrorKind::Unsupported:
      return "Unsupported";
    case TplErrorKind::Raised:
      return "Raised";
    case TplErrorKind::Undefined:
      return "Undefined";
    case TplErrorKind::Type:
      return "Type";
    case TplErrorKind::Security:
      return "Security";
    case TplErrorKind::Runtime:
      return "Runtime";
    case TplErrorKind::Cancelled:
      return "Cancelled";
  }
  return "?";
}

static ErrorKind cortiq_kind(TplErrorKind k) {
  switch (k) {
    case TplErrorKind::Syntax:
      return ErrorKind::Parse;
    case TplErrorKind::Unsupported:
      return ErrorKind::Unsupported;
    default:
      return ErrorKind::InvalidArgument;
  }
}

static std::string tpl_message(TplErrorKind k, const std::string& d, int line, int col) {
  std::string where =
      line > 0 ? fmt::format("chat template line {} column {}: ", line, col) : "chat template: ";
  if (k == TplErrorKind::Raised) return where + "raise_exception: " + d;
  if (k == TplErrorKind::Syntax || k == TplErrorKind::Unsupported) return where + d;
  if (k == TplErrorKind::Cancelled) return where + "render cancelled: " + d;
  return where + std::string(tpl_error_kind_name(k)) + "Error: " + d;
}

TemplateError::TemplateError(TplErrorKind tk, std::string detail, int line, int col)
    : Error(cortiq_kind(tk), tpl_message(tk, detail, line, col)),
      tpl_kind_(tk),
      detail_(std::move(detail)),
      line_(line),
      col_(col) {}

void throw_tpl(TplErrorKind k, std::string detail) {
  throw TemplateError(k, std::move(detail), 0, 0);
}

namespace {
thread_local int t_walk_depth = 0;
[[noreturn]] void too_deep() {
  throw_tpl(TplErrorKind::Type,
            fmt::format("a value is nested deeper than {} levels (or contains itself)", kMaxValueDepth));
}
}  // namespace

WalkDepth::WalkDepth() {
  if (++t_walk_depth > kMaxValueDepth) {
    --t_walk_depth;
    too_deep();
  }
}
WalkDepth::~WalkDepth() {
  --t_walk_depth;
}

int value_depth(const Value& v) noexcept {
  if (v.type == VType::Array && v.arr) return v.arr->depth;
  if ((v.type == VType::Object || v.type == VType::Namespace) && v.obj) return v.obj->depth;
  return 0;
}

namespace {
/// Whether `v` is, or holds at any depth, the container at `target`.
bool holds(const Value& v, const void* target) {
  if (v.type == VType::Array && v.arr) {
    if (v.arr.get() == target) return true;
    const WalkDepth level;
    for (const Value& x : v.arr->items)
      if (holds(x, target)) return true;
  } else if ((v.type == VType::Object || v.type == VType::Namespace) && v.obj) {
    if (v.obj.get() == target) return true;
    const WalkDepth level;
    for (const auto& kv : v.obj->items)
      if (holds(kv.second, target)) return true;
  }
  return false;
}
[[noreturn]] void cycle() {
  throw_tpl(TplErrorKind::Type, "a list or dict cannot contain itself");
}
}  // namespace

void check_insert(Array& into, const Value& v) {
  if (value_depth(v) == 0) return;
  if (holds(v, &into)) cycle();
  into.depth = std::max(into.depth, 1 + value_depth(v));
  if (into.depth > kMaxValueDepth) too_deep();
}

Value Value::array(std::vector<Value> items, bool tuple) {
  int depth = 1;
  for (const Value& x : items) depth = std::max(depth, 1 + value_depth(x));
  if (depth > kMaxValueDepth) too_deep();
  Value v;
  v.type = VType::Array;
  v.arr = std::make_shared<Array>();
  v.arr->items = std::move(items);
  v.arr->tuple = tuple;
  v.arr->depth = depth;
  return v;
}
Value Value::object() {
  Value v;
  v.type = VType::Object;
  v.obj = std::make_shared<Object>();
  return v;
}
Value Value::ns() {
  Value v;
  v.type = VType::Namespace;
  v.obj = std::make_shared<Object>();
  return v;
}
Value Value::callable(std::string name, std::function<Value(CallArgs&)> f) {
  Value v;
  v.type = VType::Callable;
  v.fn = std::make_shared<Callable>();
  v.fn->name = std::move(name);
  v.fn->fn = std::move(f);
  return v;
}

const Value* Object::find(std::string_view key) const {
  for (auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
Value* Object::find(std::string_view key) {
  for (auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}
void Object::set(const std::string& key, Value v) {
  if (value_depth(v) > 0 && holds(v, this)) cycle();
  depth = std::max(depth, 1 + value_depth(v));
  if (depth > kMaxValueDepth) too_deep();
  if (Value* p = find(key)) {
    *p = std::move(v);
  } else {
    items.emplace_back(key, std::move(v));
  }
}

const Value* CallArgs::get(size_t idx, std::string_view name) const {
  if (idx < pos.size()) return &pos[idx];
  for (auto& kv : kw)
    if (kv.first == name) return &kv.second;
  return nullptr;
}

// ---- UTF-8 ---------------------------------------------------------------------------------

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp = 0;
    auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                              static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) {
      out.push_back(0xFFFD);
      ++i;
    } else {
      out.push_back(static_cast<char32_t>(cp));
      i += static_cast<size_t>(n);
    }
  }
  return out;
}

void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

bool py_isspace(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// ---- str / repr -----------------------------------------------------------------------------

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (size_t k = 0; k < epos; ++k)
    if (sci[k] != '.') digits.push_back(sci[k]);
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min<size_t>(digits.size(), static_cast<size_t>(exp) + 1));
      while (ip.size() < static_cast<size_t>(exp) + 1) ip.push_back('0');
      std::string fp = digits.size() > static_cast<size_t>(exp) + 1 ? digits.substr(exp + 1) : "0";
      out += ip;
      out.push_back('.');
      out += fp;
    } else {
      out += "0.";
      out.append(static_cast<size_t>(-exp - 1), '0');
      out += digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return out;
}

static bool py_isprintable(char32_t c) {
  if (c == ' ') return true;
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  switch (cat) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

static std::string str_repr(const std::string& s) {
  bool has_sq = s.find('\'') != std::string::npos, has_dq = s.find('"') != std::string::npos;
  char q = (has_sq && !has_dq) ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(q) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!py_isprintable(c)) {
      char b[16];
      if (c < 0x100)
        std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000)
        std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
      else
        std::snprintf(b, sizeof b, "\\U%08x", static_cast<unsigned>(c));
      out += b;
    } else {
      utf8_append(out, c);
    }
  }
  out.push_back(q);
  return out;
}

std::string repr(const Value& v) {
  const WalkDepth level;
  switch (v.type) {
    case VType::String:
      return str_repr(v.s);
    case VType::Undefined:
      return "Undefined";
    case VType::Array: {
      std::string out = v.arr->tuple ? "(" : "[";
      for (size_t k = 0; k < v.arr->items.size(); ++k) {
        if (k) out += ", ";
        out += repr(v.arr->items[k]);
      }
      if (v.arr->tuple && v.arr->items.size() == 1) out += ",";
      out += v.arr->tuple ? ")" : "]";
      return out;
    }
    case VType::Object: {
      std::string out = "{";
      bool first = true;
      for (auto& kv : v.obj->items) {
        if (!first) out += ", ";
        first = false;
        out += str_repr(kv.first) + ": " + repr(kv.second);
      }
      return out + "}";
    }
    case VType::Namespace: {
      Value o = v;
      o.type = VType::Object;
      return "<Namespace " + repr(o) + ">";
    }
    default:
      return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.type) {
    case VType::Undefined:
      return "";
    case VType::None:
      return "None";
    case VType::Bool:
      return v.b ? "True" : "False";
    case VType::Int:
      return std::to_string(v.i);
    case VType::Float:
      return float_repr(v.f);
    case VType::String:
      return v.s;
    case VType::Callable:
      return "<function " + v.fn->name + ">";
    default:
      return repr(v);
  }
}

bool truthy(const Value& v) {
  switch (v.type) {
    case VType::Undefined:
    case VType::None:
      return false;
    case VType::Bool:
      return v.b;
    case VType::Int:
      return v.i != 0;
    case VType::Float:
      return v.f != 0;
    case VType::String:
      return !v.s.empty();
    case VType::Array:
      return !v.arr->items.empty();
    case VType::Object:
      return !v.obj->items.empty();
    default:
      return true;
  }
}

std::string type_name(const Value& v) {
  switch (v.type) {
    case VType::Undefined:
      return "Undefined";
    case VType::None:
      return "NoneType";
    case VType::Bool:
      return "bool";
    case VType::Int:
      return "int";
    case VType::Float:
      return "float";
    case VType::String:
      return "str";
    case VType::Array:
      return v.arr->tuple ? "tuple" : "list";
    case VType::Object:
      return "dict";
    case VType::Callable:
      return "function";
    case VType::Namespace:
      return "Namespace";
  }
  return "?";
}

static double num(const Value& v) {
  return v.type == VType::Float ? v.f : v.type == VType::Bool ? (v.b ? 1.0 : 0.0) : static_cast<double>(v.i);
}
static bool is_intlike(const Value& v) {
  return v.type == VType::Int || v.type == VType::Bool;
}
static int64_t ival(const Value& v) {
  return v.type == VType::Bool ? (v.b ? 1 : 0) : v.i;
}

bool equals(const Value& a, const Value& b) {
  const WalkDepth level;
  if (a.is_number() && b.is_number()) {
    if (is_intlike(a) && is_intlike(b)) return ival(a) == ival(b);
    return num(a) == num(b);
  }
  if (a.type != b.type) return false;
  switch (a.type) {
    case VType::Undefined:
    case VType::None:
      return true;
    case VType::String:
      return a.s == b.s;
    case VType::Array: {
      if (a.arr == b.arr) return true;
      if (a.arr->tuple != b.arr->tuple || a.arr->items.size() != b.arr->items.size()) return false;
      for (size_t k = 0; k < a.arr->items.size(); ++k)
        if (!equals(a.arr->items[k], b.arr->items[k])) return false;
      return true;
    }
    case VType::Object: {
      if (a.obj == b.obj) return true;
      if (a.obj->items.size() != b.obj->items.size()) return false;
      for (auto& kv : a.obj->items) {
        const Value* o = b.obj->find(kv.first);
        if (!o || !equals(kv.second, *o)) return false;
      }
      return true;
    }
    case VType::Namespace:
      return a.obj == b.obj;
    case VType::Callable:
      return a.fn == b.fn;
    default:
      return false;
  }
}

bool less(const Value& a, const Value& b) {
  const WalkDepth level;
  if (a.is_number() && b.is_number()) {
    if (is_intlike(a) && is_intlike(b)) return ival(a) < ival(b);
    return num(a) < num(b);
  }
  if (a.type == VType::String && b.type == VType::String) return a.s < b.s;  // UTF-8 order = code point order
  if (a.type == VType::Array && b.type == VType::Array) {
    auto& x = a.arr->items;
    auto& y = b.arr->items;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (equals(x[k], y[k])) continue;
      return less(x[k], y[k]);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined() || b.is_undefined()) throw_tpl(TplErrorKind::Undefined, a.is_undefined() ? a.s : b.s);
  throw_tpl(TplErrorKind::Type,
            fmt::format("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b)));
}

// ---- json.dumps ----------------------------------------------------------------------------

static void json_str(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default: {
        char b[16];
        if (c < 0x20 || (ensure_ascii && c >= 0x7f)) {
          if (c >= 0x10000) {
            char32_t x = c - 0x10000;
            std::snprintf(b, sizeof b, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (x >> 10)),
                          static_cast<unsigned>(0xDC00 + (x & 0x3FF)));
          } else {
            std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
          }
          out += b;
        } else {
          utf8_append(out, c);
        }
      }
    }
  }
  out.push_back('"');
}

namespace {
struct JsonWriter {
  bool ensure_ascii;
  bool indented;
  std::string indent;
  std::string item_sep, key_sep;
  bool sort_keys;
  std::string out;

  void newline(int depth) {
    out.push_back('\n');
    // an indent of 10**6 on a nested value must not grow past the render's size budget
    budget_bytes(out.size() + static_cast<uint64_t>(depth) * indent.size(), "string from filter 'tojson'");
    for (int k = 0; k < depth; ++k) out += indent;
  }
  void write(const Value& v, int depth) {
    const WalkDepth level;
    switch (v.type) {
      case VType::None:
        out += "null";
        return;
      case VType::Bool:
        out += v.b ? "true" : "false";
        return;
      case VType::Int:
        out += std::to_string(v.i);
        return;
      case VType::Float:
        if (std::isnan(v.f))
          out += "NaN";
        else if (std::isinf(v.f))
          out += v.f < 0 ? "-Infinity" : "Infinity";
        else
          out += float_repr(v.f);
        return;
      case VType::String:
        json_str(out, v.s, ensure_ascii);
        return;
      case VType::Array: {
        auto& items = v.arr->items;
        if (items.empty()) {
          out += "[]";
          return;
        }
        out.push_back('[');
        for (size_t k = 0; k < items.size(); ++k) {
          if (k) out += item_sep;
          if (indented) newline(depth + 1);
          write(items[k], depth + 1);
        }
        if (indented) newline(depth);
        out.push_back(']');
        return;
      }
      case VType::Object: {
        auto items = v.obj->items;
        if (items.empty()) {
          out += "{}";
          return;
        }
        if (sort_keys)
          std::stable_sort(items.begin(), items.end(), [](auto& a, auto& b) { return a.first < b.first; });
        out.push_back('{');
        for (size_t k = 0; k < items.size(); ++k) {
          if (k) out += item_sep;
          if (indented) newline(depth + 1);
          json_str(out, items[k].first, ensure_ascii);
          out += key_sep;
          write(items[k].second, depth + 1);
        }
        if (indented) newline(depth);
        out.push_back('}');
        return;
      }
      default:
        throw_tpl(TplErrorKind::Type,
                  fmt::format("Object of type {} is not JSON serializable", type_name(v)));
    }
  }
};
}  // namespace

std::string to_json(const Value& v, bool ensure_ascii, int indent, const std::string& indent_str,
                    const std::string& item_sep, const std::string& key_sep, bool sort_keys) {
  JsonWriter w;
  w.ensure_ascii = ensure_ascii;
  w.indented = indent >= 0 || !indent_str.empty();
  if (indent > 0) budget_bytes(static_cast<uint64_t>(indent), "tojson indent");
  w.indent =
      !indent_str.empty() ? indent_str : std::string(indent > 0 ? static_cast<size_t>(indent) : 0, ' ');
  w.item_sep = !item_sep.empty() ? item_sep : (w.indented ? "," : ", ");
  w.key_sep = !key_sep.empty() ? key_sep : ": ";
  w.sort_keys = sort_keys;
  w.write(v, 0);
  return std::move(w.out);
}

}  // namespace cortiq::jinja
