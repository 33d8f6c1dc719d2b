// Built-in filters, tests, globals and Python str/list/dict methods of the Jinja2 engine.
// Each mirrors jinja2 3.1 filters.py/tests.py/defaults.py or the CPython method of the same name;
// `tojson` is transformers' override (json.dumps with ensure_ascii=False, PITFALLS TPL-3).
#include <utf8proc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "tokenizer/jinja/interp.h"

namespace cortiq::jinja {

namespace {

// ---- argument helpers ----

const Value* arg(const CallArgs& a, size_t idx, std::string_view name) {
  return a.get(idx, name);
}

bool arg_bool(const CallArgs& a, size_t idx, std::string_view name, bool def) {
  const Value* v = arg(a, idx, name);
  return v ? truthy(*v) : def;
}

int64_t to_int(const Value& v, const char* what) {
  if (v.type == VType::Int) return v.i;
  if (v.type == VType::Bool) return v.b ? 1 : 0;
  if (v.type == VType::Float && std::isfinite(v.f)) return static_cast<int64_t>(v.f);
  if (v.is_undefined()) raise_undefined(v);
  throw_tpl(TplErrorKind::Type,
            fmt::format("'{}' object cannot be interpreted as an integer ({})", type_name(v), what));
}

int64_t arg_int(const CallArgs& a, size_t idx, std::string_view name, int64_t def) {
  const Value* v = arg(a, idx, name);
  if (!v || v->is_none()) return def;
  return to_int(*v, "argument");
}

std::string arg_str(const CallArgs& a, size_t idx, std::string_view name, const std::string& def) {
  const Value* v = arg(a, idx, name);
  return v ? to_str(*v) : def;
}

const std::string& need_str(const Value& v, const char* what) {
  if (v.is_string()) return v.s;
  if (v.is_undefined()) raise_undefined(v);
  throw_tpl(TplErrorKind::Type, fmt::format("{} must be str, not {}", what, type_name(v)));
}

// ---- string helpers ----

std::u32string map_case(std::u32string u, bool upper) {
  for (auto& c : u)
    c = static_cast<char32_t>(upper ? utf8proc_toupper(static_cast<utf8proc_int32_t>(c))
                                    : utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
  return u;
}
std::string upper(const std::string& s) {
  std::u32string u = utf8_decode(s), out;
  out.reserve(u.size());
  for (char32_t c : u) {
    if (c == 0xDF) {  // Python's full case mapping: ß -> SS
      out += U"SS";
    } else {
      out.push_back(static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))));
    }
  }
  return utf8_encode(out);
}
std::string lower(const std::string& s) {
  return utf8_encode(map_case(utf8_decode(s), false));
}

bool is_cased(char32_t c) {
  auto x = static_cast<utf8proc_int32_t>(c);
  return utf8proc_isupper(x) || utf8proc_islower(x) || utf8proc_category(x) == UTF8PROC_CATEGORY_LT;
}

std::string py_title(const std::string& s) {
  std::u32string u = utf8_decode(s);
  bool prev_cased = false;
  for (auto& c : u) {
    bool cased = is_cased(c);
    if (cased)
      c = static_cast<char32_t>(prev_cased ? utf8proc_tolower(static_cast<utf8proc_int32_t>(c))
                                           : utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
    prev_cased = cased;
  }
  return utf8_encode(u);
}

std::string py_capitalize(const std::string& s) {
  std::u32string u = map_case(utf8_decode(s), false);
  if (!u.empty()) u[0] = static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(u[0])));
  return utf8_encode(u);
}

// Jinja's `title` filter: split on runs of [-\s({\[<], capitalise each piece.
std::string jinja_title(const std::string& s) {
  std::u32string u = utf8_decode(s), out;
  auto is_sep = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c);
  };
  size_t i = 0;
  while (i < u.size()) {
    size_t j = i;
    bool sep = is_sep(u[i]);
    while (j < u.size() && is_sep(u[j]) == sep) ++j;
    std::u32string piece = u.substr(i, j - i);
    if (!sep) {
      piece = map_case(piece, false);
      piece[0] = static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(u[i])));
    }
    out += piece;
    i = j;
  }
  return utf8_encode(out);
}

std::string strip_impl(const std::string& s, const Value* chars, bool left, bool right) {
  std::u32string u = utf8_decode(s);
  std::u32string set;
  bool ws = !chars || chars->is_none();
  if (!ws) set = utf8_decode(need_str(*chars, "strip arg"));
  auto drop = [&](char32_t c) { return ws ? py_isspace(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && drop(u[b])) ++b;
  if (right)
    while (e > b && drop(u[e - 1])) --e;
  return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<Value> split_impl(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (!sep || sep->is_none()) {
    std::u32string u = utf8_decode(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < u.size()) {
      while (i < u.size() && py_isspace(u[i])) ++i;
      if (i >= u.size()) break;
      size_t j = i;
      while (j < u.size() && !py_isspace(u[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
      for (auto& [a, b] : words) parts.push_back(utf8_encode(std::u32string_view(u).substr(a, b - a)));
    } else if (!from_right) {
      for (size_t k = 0; k < static_cast<size_t>(maxsplit); ++k)
        parts.push_back(
            utf8_encode(std::u32string_view(u).substr(words[k].first, words[k].second - words[k].first)));
      size_t a = words[static_cast<size_t>(maxsplit)].first;
      parts.push_back(utf8_encode(std::u32string_view(u).substr(a)));
    } else {
      size_t first = words.size() - static_cast<size_t>(maxsplit);
      parts.push_back(utf8_encode(std::u32string_view(u).substr(0, words[first - 1].second)));
      for (size_t k = first; k < words.size(); ++k)
        parts.push_back(
            utf8_encode(std::u32string_view(u).substr(words[k].first, words[k].second - words[k].first)));
    }
  } else {
    const std::string& d = need_str(*sep, "separator");
    if (d.empty()) throw_tpl(TplErrorKind::Type, "empty separator");
    std::vector<size_t> hits;
    for (size_t p = s.find(d); p != std::string::npos; p = s.find(d, p + d.size())) hits.push_back(p);
    if (maxsplit >= 0 && hits.size() > static_cast<size_t>(maxsplit)) {
      if (from_right) {
        // rsplit: take the last maxsplit separators, searching from the right.
        std::vector<size_t> r;
        size_t end = s.size();
        for (int64_t k = 0; k < maxsplit; ++k) {
          if (end < d.size()) break;
          size_t p = s.rfind(d, end - d.size());
          if (p == std::string::npos) break;
          r.push_back(p);
          end = p;
        }
        std::reverse(r.begin(), r.end());
        hits = r;
      } else {
        hits.resize(static_cast<size_t>(maxsplit));
      }
    }
    size_t start = 0;
    for (size_t p : hits) {
      parts.push_back(s.substr(start, p - start));
      start = p + d.size();
    }
    parts.push_back(s.substr(start));
  }
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return out;
}

std::string replace_impl(const std::string& s, const std::string& old, const std::string& nw, int64_t count) {
  std::string out;
  if (old.empty()) {
    std::u32string u = utf8_decode(s);
    int64_t n = 0;
    for (size_t k = 0; k <= u.size(); ++k) {
      if (count < 0 || n < count) {
        out += nw;
        ++n;
        budget_bytes(out.size(), "string from replace()");
      }
      if (k < u.size()) utf8_append(out, u[k]);
    }
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  for (size_t p = s.find(old); p != std::string::npos && (count < 0 || n < count); p = s.find(old, start)) {
    out.append(s, start, p - start);
    out += nw;
    start = p + old.size();
    ++n;
    budget_bytes(out.size(), "string from replace()");
  }
  out.append(s, start, std::string::npos);
  return out;
}

std::vector<std::string> splitlines(const std::string& s, bool keepends) {
  std::u32string u = utf8_decode(s);
  std::vector<std::string> out;
  size_t i = 0, start = 0;
  while (i < u.size()) {
    char32_t c = u[i];
    bool br = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
              c == 0x2028 || c == 0x2029;
    if (!br) {
      ++i;
      continue;
    }
    size_t eol = i + ((c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ? 2 : 1);
    out.push_back(utf8_encode(std::u32string_view(u).substr(start, (keepends ? eol : i) - start)));
    start = i = eol;
  }
  if (start < u.size()) out.push_back(utf8_encode(std::u32string_view(u).substr(start)));
  return out;
}

int64_t cp_find(const std::string& s, const std::string& sub, const CallArgs& a, bool reverse) {
  std::u32string u = utf8_decode(s), w = utf8_decode(sub);
  int64_t n = static_cast<int64_t>(u.size());
  auto norm = [&](int64_t x) { return x < 0 ? std::max<int64_t>(0, x + n) : std::min(x, n); };
  int64_t b = norm(arg_int(a, 1, "start", 0)), e = norm(arg_int(a, 2, "end", n));
  if (e - b < static_cast<int64_t>(w.size())) return -1;
  std::u32string_view hay = std::u32string_view(u).substr(static_cast<size_t>(b), static_cast<size_t>(e - b));
  size_t p = reverse ? hay.rfind(w) : hay.find(w);
  return p == std::u32string_view::npos ? -1 : static_cast<int64_t>(p) + b;
}

std::string pad(const std::string& s, int64_t width, char32_t fill, char align) {
  int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return s;
  int64_t m = width - len;
  int64_t left = align == '<' ? 0 : align == '>' ? m : m / 2 + (m & width & 1);
  std::string f;
  utf8_append(f, fill);
  // checked before it is built: a width of 10**9 must not allocate a gigabyte
  budget_bytes(s.size() + static_cast<uint64_t>(m) * f.size(), "string padded to a width");
  std::string out;
  for (int64_t k = 0; k < left; ++k) out += f;
  out += s;
  for (int64_t k = 0; k < m - left; ++k) out += f;
  return out;
}

// ---- format specs (str.format / %-format) ----

std::string format_spec(const Value& v, const std::string& spec) {
  if (spec.empty()) return to_str(v);
  size_t i = 0;
  std::u32string u = utf8_decode(spec);
  char32_t fill = ' ';
  char align = 0;
  if (u.size() >= 2 && (u[1] == '<' || u[1] == '>' || u[1] == '^')) {
    fill = u[0];
    align = static_cast<char>(u[1]);
    i = 2;
  } else if (!u.empty() && (u[0] == '<' || u[0] == '>' || u[0] == '^')) {
    align = static_cast<char>(u[0]);
    i = 1;
  }
  char sign = 0;
  if (i < u.size() && (u[i] == '+' || u[i] == '-' || u[i] == ' ')) sign = static_cast<char>(u[i++]);
  bool zero = false;
  if (i < u.size() && u[i] == '0') {
    zero = true;
    ++i;
  }
  int64_t width = 0;
  constexpr int64_t kHuge = int64_t{1} << 50;  // digits past it cannot fit any budget: stop growing
  while (i < u.size() && u[i] >= '0' && u[i] <= '9') width = std::min(kHuge, width * 10 + (u[i++] - '0'));
  int64_t prec = -1;
  if (i < u.size() && u[i] == '.') {
    ++i;
    prec = 0;
    while (i < u.size() && u[i] >= '0' && u[i] <= '9') prec = std::min(kHuge, prec * 10 + (u[i++] - '0'));
  }
  char type = 0;
  if (i < u.size()) type = static_cast<char>(u[i++]);
  if (i != u.size()) throw_tpl(TplErrorKind::Unsupported, "format spec '" + spec + "'");
  std::string body;
  bool numeric = v.is_number();
  if (type == 'd' || (type == 0 && (v.type == VType::Int))) {
    if (!numeric || v.type == VType::Float) {
      if (type == 'd')
        throw_tpl(TplErrorKind::Type, "Unknown format code 'd' for object of type '" + type_name(v) + "'");
    }
    body = to_str(v.type == VType::Bool ? Value::integer(v.b) : v);
  } else if (type == 'f' || type == 'F' || type == 'e' || type == 'g' || type == '%' ||
             (type == 0 && v.type == VType::Float && prec >= 0)) {
    if (!numeric)
      throw_tpl(TplErrorKind::Type,
                fmt::format("Unknown format code '{}' for object of type '{}'", type, type_name(v)));
    double d = v.type == VType::Float ? v.f : static_cast<double>(v.type == VType::Bool ? v.b : v.i);
    char buf[512];
    if (type == '%') {
      std::snprintf(buf, sizeof buf, "%.*f%%", static_cast<int>(prec < 0 ? 6 : prec), d * 100);
    } else if (type == 0 || type == 'g') {
      std::snprintf(buf, sizeof buf, "%.*g", static_cast<int>(prec < 0 ? 6 : std::max<int64_t>(prec, 1)), d);
    } else {
      char f[8] = {'%', '.', '*', type, 0};
      std::snprintf(buf, sizeof buf, f, static_cast<int>(prec < 0 ? 6 : prec), d);
    }
    body = buf;
  } else if (type == 's' || type == 0) {
    if (type == 's' && !v.is_string())
      throw_tpl(TplErrorKind::Type, "Unknown format code 's' for object of type '" + type_name(v) + "'");
    body = to_str(v);
    if (prec >= 0) body = utf8_encode(utf8_decode(body).substr(0, static_cast<size_t>(prec)));
  } else {
    throw_tpl(TplErrorKind::Unsupported, "format spec '" + spec + "'");
  }
  if (numeric && sign == '+' && body[0] != '-') body = "+" + body;
  if (numeric && sign == ' ' && body[0] != '-') body = " " + body;
  if (zero && !align) {
    std::string pre;
    if (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) {
      pre = body.substr(0, 1);
      body = body.substr(1);
    }
    const int64_t len = static_cast<int64_t>(utf8_length(pre + body));
    if (len < width) {
      budget_bytes(static_cast<uint64_t>(width), "string padded to a width");
      body.insert(0, static_cast<size_t>(width - len), '0');
    }
    return pre + body;
  }
  if (!align) align = numeric ? '>' : '<';
  return pad(body, width, fill, align);
}

std::string str_format(Interp& in, const std::string& f, const CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    if (c == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out.push_back('}');
      ++i;
      continue;
    }
    if (c == '}') throw_tpl(TplErrorKind::Type, "Single '}' encountered in format string");
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    size_t e = f.find('}', i);
    if (e == std::string::npos) throw_tpl(TplErrorKind::Type, "Single '{' encountered in format string");
    std::string field = f.substr(i + 1, e - i - 1);
    i = e;
    std::string spec;
    size_t colon = field.find(':');
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (field.find('!') != std::string::npos)
      throw_tpl(TplErrorKind::Unsupported, "str.format conversions (!r/!s)");
    std::string head = field, rest;
    size_t dot = field.find_first_of(".[");
    if (dot != std::string::npos) {
      head = field.substr(0, dot);
      rest = field.substr(dot);
    }
    Value v;
    if (head.empty()) {
      if (auto_idx >= a.pos.size())
        throw_tpl(TplErrorKind::Type, "Replacement index out of range for positional args tuple");
      v = a.pos[auto_idx++];
    } else if (std::all_of(head.begin(), head.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      size_t k = std::stoul(head);
      if (k >= a.pos.size())
        throw_tpl(TplErrorKind::Type, "Replacement index out of range for positional args tuple");
      v = a.pos[k];
    } else {
      const Value* p = nullptr;
      for (auto& kv : a.kw)
        if (kv.first == head) p = &kv.second;
      if (!p) throw_tpl(TplErrorKind::Type, "KeyError: '" + head + "'");
      v = *p;
    }
    while (!rest.empty()) {
      if (rest[0] == '.') {
        size_t n = rest.find_first_of(".[", 1);
        v = in.getattr(v, rest.substr(1, n == std::string::npos ? std::string::npos : n - 1));
        rest = n == std::string::npos ? "" : rest.substr(n);
      } else {
        size_t n = rest.find(']');
        std::string key = rest.substr(1, n - 1);
        bool digits = !key.empty() &&
                      std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
        v = in.getitem(v, digits ? Value::integer(std::stoll(key)) : Value::string(key));
        rest = rest.substr(n + 1);
      }
    }
    out += format_spec(v, spec);
  }
  return out;
}

}  // namespace

std::string printf_format(const std::string& f, const Value& args) {
  std::vector<Value> pos;
  const Value* mapping = nullptr;
  if (args.is_array() && args.arr->tuple)
    pos = args.arr->items;
  else if (args.is_object())
    mapping = &args;
  else
    pos.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out.push_back(f[i]);
      continue;
    }
    ++i;
    if (i >= f.size()) throw_tpl(TplErrorKind::Type, "incomplete format");
    if (f[i] == '%') {
      out.push_back('%');
      continue;
    }
    Value v;
    if (f[i] == '(') {
      size_t e = f.find(')', i);
      if (!mapping || e == std::string::npos) throw_tpl(TplErrorKind::Type, "format requires a mapping");
      const Value* p = mapping->obj->find(f.substr(i + 1, e - i - 1));
      if (!p) throw_tpl(TplErrorKind::Type, "KeyError: '" + f.substr(i + 1, e - i - 1) + "'");
      v = *p;
      i = e + 1;
    } else {
      if (mapping) {
        v = args;
      } else {
        if (next >= pos.size()) throw_tpl(TplErrorKind::Type, "not enough arguments for format string");
        v = pos[next++];
      }
    }
    std::string spec;
    while (i < f.size() && std::strchr("-+ 0#", f[i])) spec.push_back(f[i++]);
    while (i < f.size() && ((f[i] >= '0' && f[i] <= '9') || f[i] == '.')) spec.push_back(f[i++]);
    if (i >= f.size()) throw_tpl(TplErrorKind::Type, "incomplete format");
    char conv = f[i];
    std::string body;
    if (conv == 's') {
      body = to_str(v);
    } else if (conv == 'r') {
      body = repr(v);
    } else if (conv == 'd' || conv == 'i' || conv == 'f' || conv == 'F' || conv == 'e' || conv == 'g' ||
               conv == 'x' || conv == 'X' || conv == 'o') {
      if (!v.is_number())
        throw_tpl(TplErrorKind::Type,
                  fmt::format("%{} format: a real number is required, not {}", conv, type_name(v)));
      char buf[512];
      std::string cf = "%" + spec;
      if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
        long long x =
            v.type == VType::Float ? static_cast<long long>(v.f) : (v.type == VType::Bool ? v.b : v.i);
        cf += std::string("ll") + (conv == 'i' ? 'd' : conv);
        std::snprintf(buf, sizeof buf, cf.c_str(), x);
      } else {
        double d = v.type == VType::Float ? v.f : static_cast<double>(v.type == VType::Bool ? v.b : v.i);
        cf.push_back(conv);
        std::snprintf(buf, sizeof buf, cf.c_str(), d);
      }
      out += buf;
      continue;
    } else {
      throw_tpl(TplErrorKind::Unsupported, fmt::format("%-format conversion '{}'", conv));
    }
    if (!spec.empty()) {
      // flags, then width and precision digits (capped: a width past 2**50 fits no budget anyway)
      auto number = [](std::string_view digits) {
        int64_t n = 0;
        for (char c : digits)
          if (c >= '0' && c <= '9') n = std::min(int64_t{1} << 50, n * 10 + (c - '0'));
        return n;
      };
      size_t k = 0;
      bool left = false;
      while (k < spec.size() && std::strchr("-+ 0#", spec[k])) left |= spec[k++] == '-';
      std::string w = spec.substr(k);
      size_t dot = w.find('.');
      if (dot != std::string::npos) {
        body = utf8_encode(utf8_decode(body).substr(0, static_cast<size_t>(number(w.substr(dot + 1)))));
        w = w.substr(0, dot);
      }
      body = pad(body, number(w), ' ', left ? '<' : '>');
    }
    out += body;
  }
  if (!mapping && next < pos.size())
    throw_tpl(TplErrorKind::Type, "not all arguments converted during string formatting");
  return out;
}

// ---- methods -----------------------------------------------------------------------------------

static const char* const kStrMethods[] = {
    "startswith",   "endswith",  "split",     "rsplit",  "splitlines", "strip",      "lstrip",
    "rstrip",       "replace",   "upper",     "lower",   "title",      "capitalize", "swapcase",
    "casefold",     "format",    "find",      "rfind",   "index",      "rindex",     "count",
    "join",         "isdigit",   "isalpha",   "isalnum", "isspace",    "isupper",    "islower",
    "isnumeric",    "isdecimal", "center",    "ljust",   "rjust",      "zfill",      "removeprefix",
    "removesuffix", "partition", "rpartition"};
static const char* const kListMethods[] = {"index", "count",  "copy",    "append", "extend", "insert",
                                           "pop",   "remove", "reverse", "sort",   "clear"};
static const char* const kDictMethods[] = {"items", "keys",    "values",     "get",    "copy",
                                           "pop",   "popitem", "setdefault", "update", "clear"};

template <size_t N>
static bool in_list(const char* const (&l)[N], const std::string& n) {
  for (const char* x : l)
    if (n == x) return true;
  return false;
}

bool Interp::has_method(const Value& obj, const std::string& name) const {
  if (obj.is_string()) return in_list(kStrMethods, name);
  if (obj.is_array())
    return in_list(kListMethods, name) && !(obj.arr->tuple && name != "index" && name != "count");
  if (obj.is_object()) return in_list(kDictMethods, name);
  return false;
}

static Value str_list(std::vector<std::string> v) {
  std::vector<Value> out;
  for (auto& s : v) out.push_back(Value::string(std::move(s)));
  return Value::array(std::move(out));
}

static bool affix_match(const std::string& s, const Value& p, bool start) {
  auto one = [&](const Value& x) {
    const std::string& a = need_str(x, start ? "startswith first arg" : "endswith first arg");
    if (a.size() > s.size()) return false;
    return start ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (p.is_array() && p.arr->tuple) {
    for (auto& x : p.arr->items)
      if (one(x)) return true;
    return false;
  }
  return one(p);
}

Value Interp::call_method(const Value& self, const std::string& name, CallArgs& a) {
  auto need = [&](size_t n) -> const Value& {
    if (a.pos.size() < n)
      throw_tpl(TplErrorKind::Type,
                fmt::format("{}() takes at least {} argument(s) ({} given)", name, n, a.pos.size()));
    return a.pos[n - 1];
  };
  budget.step(value_cost(self));  // a method walks its object (find, split, index, ...)
  if (self.is_string()) {
    const std::string& s = self.s;
    if (name == "startswith" || name == "endswith") {
      if (a.pos.size() > 1) throw_tpl(TplErrorKind::Unsupported, name + "() with start/end arguments");
      return Value::boolean(affix_match(s, need(1), name == "startswith"));
    }
    if (name == "split" || name == "rsplit")
      return Value::array(split_impl(s, arg(a, 0, "sep"), arg_int(a, 1, "maxsplit", -1), name == "rsplit"));
    if (name == "splitlines") return str_list(splitlines(s, arg_bool(a, 0, "keepends", false)));
    if (name == "strip") return Value::string(strip_impl(s, arg(a, 0, "chars"), true, true));
    if (name == "lstrip") return Value::string(strip_impl(s, arg(a, 0, "chars"), true, false));
    if (name == "rstrip") return Value::string(strip_impl(s, arg(a, 0, "chars"), false, true));
    if (name == "replace")
      return Value::string(replace_impl(s, need_str(need(1), "replace arg"), need_str(need(2), "replace arg"),
                                        arg_int(a, 2, "count", -1)));
    if (name == "upper") return Value::string(upper(s));
    if (name == "lower" || name == "casefold") return Value::string(lower(s));
    if (name == "title") return Value::string(py_title(s));
    if (name == "capitalize") return Value::string(py_capitalize(s));
    if (name == "swapcase") {
      std::u32string u = utf8_decode(s);
      for (auto& c : u) {
        auto x = static_cast<utf8proc_int32_t>(c);
        c = static_cast<char32_t>(utf8proc_isupper(x)   ? utf8proc_tolower(x)
                                  : utf8proc_islower(x) ? utf8proc_toupper(x)
                                                        : x);
      }
      return Value::string(utf8_encode(u));
    }
    if (name == "format") return Value::string(str_format(*this, s, a));
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
      int64_t r = cp_find(s, need_str(need(1), "substring"), a, name[0] == 'r');
      if (r < 0 && (name == "index" || name == "rindex"))
        throw_tpl(TplErrorKind::Type, "substring not found");
      return Value::integer(r);
    }
    if (name == "count") {
      const std::string& sub = need_str(need(1), "substring");
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    if (name == "join") {
      std::string out;
      bool first = true;
      for (auto& x : iterate(need(1))) {
        if (!first) out += s;
        first = false;
        out += need_str(x, "sequence item");
        budget_bytes(out.size(), "string from str.join()");
      }
      return Value::string(out);
    }
    if (name.rfind("is", 0) == 0) {
      std::u32string u = utf8_decode(s);
      if (u.empty()) return Value::boolean(false);
      bool any_cased = false, ok = true;
      for (char32_t c : u) {
        auto x = static_cast<utf8proc_int32_t>(c);
        auto cat = utf8proc_category(x);
        bool letter = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        bool digit = cat == UTF8PROC_CATEGORY_ND;
        bool numeric = digit || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
        if (name == "isdigit" || name == "isdecimal") ok &= digit;
        if (name == "isnumeric") ok &= numeric;
        if (name == "isalpha") ok &= letter;
        if (name == "isalnum") ok &= letter || numeric;
        if (name == "isspace") ok &= py_isspace(c);
        if (name == "isupper") {
          ok &= !utf8proc_islower(x);
          any_cased |= utf8proc_isupper(x);
        }
        if (name == "islower") {
          ok &= !utf8proc_isupper(x);
          any_cased |= utf8proc_islower(x) != 0;
        }
      }
      if (name == "isupper" || name == "islower") ok &= any_cased;
      return Value::boolean(ok);
    }
    if (name == "center" || name == "ljust" || name == "rjust") {
      std::string fill = arg_str(a, 1, "fillchar", " ");
      std::u32string fu = utf8_decode(fill);
      if (fu.size() != 1)
        throw_tpl(TplErrorKind::Type, "The fill character must be exactly one character long");
      return Value::string(pad(s, to_int(need(1), "width"), fu[0],
                               name == "center"  ? '^'
                               : name == "ljust" ? '<'
                                                 : '>'));
    }
    if (name == "zfill") {
      int64_t w = to_int(need(1), "width");
      std::string body = s, sign;
      if (!body.empty() && (body[0] == '-' || body[0] == '+')) {
        sign = body.substr(0, 1);
        body = body.substr(1);
      }
      const int64_t len = static_cast<int64_t>(utf8_length(sign + body));
      if (len < w) {
        budget_bytes(static_cast<uint64_t>(w), "string from zfill()");
        body.insert(0, static_cast<size_t>(w - len), '0');
      }
      return Value::string(sign + body);
    }
    if (name == "removeprefix" || name == "removesuffix") {
      const std::string& x = need_str(need(1), "affix");
      if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value::string(s.substr(x.size()));
      if (name == "removesuffix" && !x.empty() && s.size() >= x.size() &&
          s.compare(s.size() - x.size(), x.size(), x) == 0)
        return Value::string(s.substr(0, s.size() - x.size()));
      return self;
    }
    if (name == "partition" || name == "rpartition") {
      const std::string& x = need_str(need(1), "separator");
      size_t p = name == "partition" ? s.find(x) : s.rfind(x);
      if (p == std::string::npos)
        return name == "partition" ? Value::array({self, Value::string(""), Value::string("")}, true)
                                   : Value::array({Value::string(""), Value::string(""), self}, true);
      return Value::array(
          {Value::string(s.substr(0, p)), Value::string(x), Value::string(s.substr(p + x.size()))}, true);
    }
  } else if (self.is_array()) {
    auto& items = self.arr->items;
    if (name == "index") {
      const Value& x = need(1);
      for (size_t k = 0; k < items.size(); ++k)
        if (equals(items[k], x)) return Value::integer(static_cast<int64_t>(k));
      throw_tpl(TplErrorKind::Type, repr(x) + " is not in list");
    }
    if (name == "count") {
      int64_t n = 0;
      for (auto& x : items) n += equals(x, need(1));
      return Value::integer(n);
    }
    if (name == "copy") return Value::array(items, self.arr->tuple);
    if (name == "append") {
      check_insert(*self.arr, need(1));
      items.push_back(need(1));
      return Value::none();
    }
    if (name == "extend") {
      for (auto& x : iterate(need(1))) {
        check_insert(*self.arr, x);
        items.push_back(x);
      }
      return Value::none();
    }
    if (name == "insert") {
      int64_t n = static_cast<int64_t>(items.size());
      int64_t at = to_int(need(1), "index");
      if (at < 0) at = std::max<int64_t>(0, at + n);
      at = std::min(at, n);
      check_insert(*self.arr, need(2));
      items.insert(items.begin() + at, need(2));
      return Value::none();
    }
    if (name == "pop") {
      if (items.empty()) throw_tpl(TplErrorKind::Type, "pop from empty list");
      size_t at = 0;
      if (!py_index_checked(arg_int(a, 0, "index", -1), items.size(), &at))
        throw_tpl(TplErrorKind::Type, "pop index out of range");
      Value v = items[at];
      items.erase(items.begin() + static_cast<std::ptrdiff_t>(at));
      return v;
    }
    if (name == "remove") {
      for (size_t k = 0; k < items.size(); ++k)
        if (equals(items[k], need(1))) {
          items.erase(items.begin() + static_cast<std::ptrdiff_t>(k));
          return Value::none();
        }
      throw_tpl(TplErrorKind::Type, "list.remove(x): x not in list");
    }
    if (name == "reverse") {
      std::reverse(items.begin(), items.end());
      return Value::none();
    }
    if (name == "clear") {
      items.clear();
      return Value::none();
    }
    if (name == "sort") {
      bool rev = arg_bool(a, 1, "reverse", false);
      std::stable_sort(items.begin(), items.end(),
                       [&](const Value& x, const Value& y) { return rev ? less(y, x) : less(x, y); });
      return Value::none();
    }
  } else if (self.is_object()) {
    auto& o = *self.obj;
    if (name == "items") {
      std::vector<Value> out;
      for (auto& [k, v] : o.items) out.push_back(Value::array({Value::string(k), v}, true));
      return Value::array(std::move(out));
    }
    if (name == "keys") {
      std::vector<Value> out;
      for (auto& kv : o.items) out.push_back(Value::string(kv.first));
      return Value::array(std::move(out));
    }
    if (name == "values") {
      std::vector<Value> out;
      for (auto& kv : o.items) out.push_back(kv.second);
      return Value::array(std::move(out));
    }
    if (name == "get") {
      const Value& k = need(1);
      if (k.is_string())
        if (const Value* v = o.find(k.s)) return *v;
      return a.pos.size() > 1 ? a.pos[1] : Value::none();
    }
    if (name == "copy") {
      Value c = Value::object();
      c.obj->items = o.items;
      return c;
    }
    if (name == "pop") {
      const Value& k = need(1);
      for (size_t i = 0; i < o.items.size(); ++i)
        if (k.is_string() && o.items[i].first == k.s) {
          Value v = o.items[i].second;
          o.items.erase(o.items.begin() + static_cast<std::ptrdiff_t>(i));
          return v;
        }
      if (a.pos.size() > 1) return a.pos[1];
      throw_tpl(TplErrorKind::Type, "KeyError: " + repr(k));
    }
    if (name == "setdefault") {
      const std::string& k = need_str(need(1), "key");
      if (const Value* v = o.find(k)) return *v;
      Value d = a.pos.size() > 1 ? a.pos[1] : Value::none();
      o.set(k, d);
      return d;
    }
    if (name == "update") {
      if (!a.pos.empty()) {
        if (!a.pos[0].is_object())
          throw_tpl(TplErrorKind::Unsupported, "dict.update with a non-dict argument");
        for (auto& [k, v] : a.pos[0].obj->items) o.set(k, v);
      }
      for (auto& [k, v] : a.kw) o.set(k, v);
      return Value::none();
    }
    if (name == "clear") {
      o.items.clear();
      return Value::none();
    }
    if (name == "popitem") {
      if (o.items.empty()) throw_tpl(TplErrorKind::Type, "KeyError: 'popitem(): dictionary is empty'");
      auto kv = o.items.back();
      o.items.pop_back();
      return Value::array({Value::string(kv.first), kv.second}, true);
    }
  }
  throw_tpl(TplErrorKind::Unsupported, fmt::format("method {}.{}()", type_name(self), name));
}

// ---- filters -----------------------------------------------------------------------------------

namespace {

using FilterFn = Value (*)(Interp&, const Value&, CallArgs&);
struct FilterDef {
  const char* name;
  FilterFn fn;
};

// environment.getitem-based dotted attribute path (jinja make_attrgetter).
Value attr_path(Interp& in, Value v, const std::string& path) {
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = in.getitem(v, digits ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value ignore_case(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(lower(v.s));
  return v;
}

std::vector<Value> sorted_items(Interp& in, std::vector<Value> items, bool rev, bool cs,
                                const Value* attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& x : items) {
    Value k = attribute && !attribute->is_none() ? attr_path(in, x, to_str(*attribute)) : x;
    keyed.emplace_back(ignore_case(k, cs), x);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return rev ? less(b.first, a.first) : less(a.first, b.first);
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(kv.second);
  return out;
}

Value f_tojson(Interp&, const Value& v, CallArgs& a) {
  bool ensure_ascii = arg_bool(a, 0, "ensure_ascii", false);
  const Value* ind = arg(a, 1, "indent");
  int indent = -1;
  std::string indent_str;
  if (ind && !ind->is_none()) {
    if (ind->is_string()) {
      indent_str = ind->s;
      if (indent_str.empty()) indent = 0;
    } else {
      indent = static_cast<int>(std::clamp<int64_t>(to_int(*ind, "indent"), 0, INT32_MAX));
    }
  }
  std::string item_sep, key_sep;
  const Value* seps = arg(a, 2, "separators");
  if (seps && !seps->is_none()) {
    std::vector<Value> s = iterate(*seps);
    if (s.size() != 2) throw_tpl(TplErrorKind::Type, "separators must be a pair of strings");
    item_sep = need_str(s[0], "separator");
    key_sep = need_str(s[1], "separator");
    if (item_sep.empty() || key_sep.empty()) throw_tpl(TplErrorKind::Unsupported, "empty JSON separators");
  }
  bool sort_keys = arg_bool(a, 3, "sort_keys", false);
  return Value::string(to_json(v, ensure_ascii, indent, indent_str, item_sep, key_sep, sort_keys));
}

Value f_trim(Interp&, const Value& v, CallArgs& a) {
  return Value::string(strip_impl(to_str(v), arg(a, 0, "chars"), true, true));
}
Value f_upper(Interp&, const Value& v, CallArgs&) {
  return Value::string(upper(to_str(v)));
}
Value f_lower(Interp&, const Value& v, CallArgs&) {
  return Value::string(lower(to_str(v)));
}
Value f_title(Interp&, const Value& v, CallArgs&) {
  return Value::string(jinja_title(to_str(v)));
}
Value f_capitalize(Interp&, const Value& v, CallArgs&) {
  return Value::string(py_capitalize(to_str(v)));
}
Value f_length(Interp&, const Value& v, CallArgs&) {
  return Value::integer(py_len(v));
}
Value f_first(Interp&, const Value& v, CallArgs&) {
  std::vector<Value> it = iterate(v);
  if (it.empty()) return Value::undefined("No first item, sequence was empty.");
  return it.front();
}
Value f_last(Interp&, const Value& v, CallArgs&) {
  if (v.is_undefined()) throw_tpl(TplErrorKind::Type, "argument to reversed() must be a sequence");
  std::vector<Value> it = iterate(v);
  if (it.empty()) return Value::undefined("No last item, sequence was empty.");
  return it.back();
}
Value f_join(Interp& in, const Value& v, CallArgs& a) {
  std::string d = arg_str(a, 0, "d", "");
  const Value* attribute = arg(a, 1, "attribute");
  std::string out;
  bool first = true;
  for (auto& x : iterate(v)) {
    if (!first) out += d;
    first = false;
    out += to_str(attribute && !attribute->is_none() ? attr_path(in, x, to_str(*attribute)) : x);
    budget_bytes(out.size(), "string from filter 'join'");
  }
  return Value::string(out);
}
Value f_replace(Interp&, const Value& v, CallArgs& a) {
  const Value* o = arg(a, 0, "old");
  const Value* n = arg(a, 1, "new");
  if (!o || !n) throw_tpl(TplErrorKind::Type, "replace() missing required arguments");
  return Value::string(replace_impl(to_str(v), to_str(*o), to_str(*n), arg_int(a, 2, "count", -1)));
}
Value f_default(Interp&, const Value& v, CallArgs& a) {
  const Value* d = arg(a, 0, "default_value");
  bool boolean = arg_bool(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !truthy(v))) return d ? *d : Value::string("");
  return v;
}
Value f_items(Interp&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::array();
  if (!v.is_object()) throw_tpl(TplErrorKind::Type, "Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (auto& [k, x] : v.obj->items) out.push_back(Value::array({Value::string(k), x}, true));
  return Value::array(std::move(out));
}
Value f_list(Interp&, const Value& v, CallArgs&) {
  return Value::array(iterate(v));
}
Value f_safe(Interp&, const Value& v, CallArgs&) {
  return v.is_string() ? v : Value::string(to_str(v));
}
Value f_string(Interp&, const Value& v, CallArgs&) {
  return Value::string(to_str(v));
}
Value f_escape(Interp&, const Value& v, CallArgs&) {
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return Value::string(out);
}

bool parse_py_int(std::string s, int base, int64_t* out) {
  std::u32string u = utf8_decode(s);
  size_t b = 0, e = u.size();
  while (b < e && py_isspace(u[b])) ++b;
  while (e > b && py_isspace(u[e - 1])) --e;
  std::string t;
  for (size_t k = b; k < e; ++k) {
    if (u[k] > 127) return false;
    if (u[k] != '_') t.push_back(static_cast<char>(u[k]));
  }
  if (t.empty()) return false;
  size_t pos = 0;
  try {
    long long v = std::stoll(t, &pos, base);
    if (pos != t.size()) return false;
    *out = v;
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

bool parse_py_float(const std::string& s, double* out) {
  std::string t = strip_impl(s, nullptr, true, true);
  if (t.empty()) return false;
  std::string low = lower(t);
  if (low == "nan" || low == "+nan" || low == "-nan") {
    *out = NAN;
    return true;
  }
  if (low == "inf" || low == "+inf" || low == "infinity" || low == "+infinity") {
    *out = INFINITY;
    return true;
  }
  if (low == "-inf" || low == "-infinity") {
    *out = -INFINITY;
    return true;
  }
  for (char c : t)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' ||
          c == '-'))
      return false;
  size_t pos = 0;
  try {
    *out = std::stod(t, &pos);
    return pos == t.size();
  } catch (const std::exception&) {
    return false;
  }
}

Value f_int(Interp&, const Value& v, CallArgs& a) {
  const Value* d = arg(a, 0, "default");
  int base = static_cast<int>(arg_int(a, 1, "base", 10));
  Value def = d ? *d : Value::integer(0);
  if (v.type == VType::Int) return v;
  if (v.type == VType::Bool) return Value::integer(v.b);
  if (v.type == VType::Float) return std::isfinite(v.f) ? Value::integer(static_cast<int64_t>(v.f)) : def;
  if (v.is_string()) {
    int64_t r;
    if (parse_py_int(v.s, base, &r)) return Value::integer(r);
    double f;
    if (parse_py_float(v.s, &f) && std::isfinite(f)) return Value::integer(static_cast<int64_t>(f));
  }
  return def;
}
Value f_float(Interp&, const Value& v, CallArgs& a) {
  const Value* d = arg(a, 0, "default");
  Value def = d ? *d : Value::number(0.0);
  if (v.is_number())
    return Value::number(v.type == VType::Float ? v.f
                                                : static_cast<double>(v.type == VType::Bool ? v.b : v.i));
  double f;
  if (v.is_string() && parse_py_float(v.s, &f)) return Value::number(f);
  return def;
}
Value f_round(Interp&, const Value& v, CallArgs& a) {
  int64_t prec = arg_int(a, 0, "precision", 0);
  std::string method = arg_str(a, 1, "method", "common");
  if (method != "common" && method != "ceil" && method != "floor")
    throw_tpl(TplErrorKind::Type, "method must be 'common', 'ceil' or 'floor'");
  if (!v.is_number()) {
    if (v.is_undefined()) raise_undefined(v);
    throw_tpl(TplErrorKind::Type, fmt::format("type {} doesn't define __round__ method", type_name(v)));
  }
  double x = v.type == VType::Float ? v.f : static_cast<double>(v.type == VType::Bool ? v.b : v.i);
  double p = std::pow(10.0, static_cast<double>(prec));
  if (method == "common") {
    if (v.type != VType::Float && prec >= 0) return Value::integer(v.type == VType::Bool ? v.b : v.i);
    if (prec >= 0 && prec < 300 && std::isfinite(x)) {
      // Python rounds the exact binary value half-to-even at `prec` decimals; printf does the same.
      char buf[400];
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(prec), x);
      double r = std::strtod(buf, nullptr);
      if (r == 0 && std::signbit(x)) r = -0.0;
      return Value::number(r);
    }
    return Value::number(std::nearbyint(x * p) / p);
  }
  return Value::number((method == "ceil" ? std::ceil(x * p) : std::floor(x * p)) / p);
}
Value f_abs(Interp&, const Value& v, CallArgs&) {
  if (v.type == VType::Int) {
    if (v.i == INT64_MIN) throw_tpl(TplErrorKind::Unsupported, "integer overflow");
    return Value::integer(v.i < 0 ? -v.i : v.i);
  }
  if (v.type == VType::Bool) return Value::integer(v.b);
  if (v.type == VType::Float) return Value::number(std::fabs(v.f));
  if (v.is_undefined()) raise_undefined(v);
  throw_tpl(TplErrorKind::Type, fmt::format("bad operand type for abs(): '{}'", type_name(v)));
}
Value f_unique(Interp& in, const Value& v, CallArgs& a) {
  bool cs = arg_bool(a, 0, "case_sensitive", false);
  const Value* attribute = arg(a, 1, "attribute");
  std::vector<Value> seen, out;
  for (auto& x : iterate(v)) {
    Value k = ignore_case(attribute && !attribute->is_none() ? attr_path(in, x, to_str(*attribute)) : x, cs);
    bool dup = false;
    for (auto& s : seen)
      if (equals(s, k)) dup = true;
    if (!dup) {
      seen.push_back(k);
      out.push_back(x);
    }
  }
  return Value::array(std::move(out));
}
Value f_dictsort(Interp&, const Value& v, CallArgs& a) {
  bool cs = arg_bool(a, 0, "case_sensitive", false);
  std::string by = arg_str(a, 1, "by", "key");
  bool rev = arg_bool(a, 2, "reverse", false);
  if (!v.is_object()) throw_tpl(TplErrorKind::Type, "dictsort expects a mapping");
  int pos = by == "key" ? 0 : by == "value" ? 1 : -1;
  if (pos < 0) throw_tpl(TplErrorKind::Type, "You can only sort by either \"key\" or \"value\"");
  std::vector<Value> items;
  for (auto& [k, x] : v.obj->items) items.push_back(Value::array({Value::string(k), x}, true));
  std::stable_sort(items.begin(), items.end(), [&](const Value& p, const Value& q) {
    Value x = ignore_case(p.arr->items[static_cast<size_t>(pos)], cs),
          y = ignore_case(q.arr->items[static_cast<size_t>(pos)], cs);
    return rev ? less(y, x) : less(x, y);
  });
  return Value::array(std::move(items));
}
Value f_batch(Interp&, const Value& v, CallArgs& a) {
  int64_t n = arg_int(a, 0, "linecount", 0);
  if (n <= 0) throw_tpl(TplErrorKind::Type, "batch size must be positive");
  const Value* fill = arg(a, 1, "fill_with");
  std::vector<Value> out, cur;
  for (auto& x : iterate(v)) {
    cur.push_back(x);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::array(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none()) {
      budget_items(static_cast<uint64_t>(n), "list from filter 'batch'");
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
    }
    out.push_back(Value::array(std::move(cur)));
  }
  return Value::array(std::move(out));
}
Value minmax(Interp& in, const Value& v, CallArgs& a, bool is_max) {
  bool cs = arg_bool(a, 0, "case_sensitive", false);
  const Value* attribute = arg(a, 1, "attribute");
  std::vector<Value> it = iterate(v);
  if (it.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  auto key = [&](const Value& x) {
    return ignore_case(attribute && !attribute->is_none() ? attr_path(in, x, to_str(*attribute)) : x, cs);
  };
  for (size_t k = 1; k < it.size(); ++k) {
    if (is_max ? less(key(it[best]), key(it[k])) : less(key(it[k]), key(it[best]))) best = k;
  }
  return it[best];
}
Value f_min(Interp& in, const Value& v, CallArgs& a) {
  return minmax(in, v, a, false);
}
Value f_max(Interp& in, const Value& v, CallArgs& a) {
  return minmax(in, v, a, true);
}
Value f_sum(Interp& in, const Value& v, CallArgs& a) {
  const Value* attribute = arg(a, 0, "attribute");
  const Value* start = arg(a, 1, "start");
  Value acc = start ? *start : Value::integer(0);
  for (auto& x : iterate(v))
    acc = binary_op("+", acc, attribute && !attribute->is_none() ? attr_path(in, x, to_str(*attribute)) : x);
  return acc;
}
Value f_sort(Interp& in, const Value& v, CallArgs& a) {
  return Value::array(sorted_items(in, iterate(v), arg_bool(a, 0, "reverse", false),
                                   arg_bool(a, 1, "case_sensitive", false), arg(a, 2, "attribute")));
}
Value f_reverse(Interp&, const Value& v, CallArgs&) {
  if (v.is_string()) {
    std::u32string u = utf8_decode(v.s);
    std::reverse(u.begin(), u.end());
    return Value::string(utf8_encode(u));
  }
  std::vector<Value> it = iterate(v);
  std::reverse(it.begin(), it.end());
  return Value::array(std::move(it));
}
Value f_wordcount(Interp&, const Value& v, CallArgs&) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(to_str(v))) {
    auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    bool w = c == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
             (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}
Value f_center(Interp&, const Value& v, CallArgs& a) {
  return Value::string(pad(to_str(v), arg_int(a, 0, "width", 80), ' ', '^'));
}
Value f_format(Interp&, const Value& v, CallArgs& a) {
  if (!a.pos.empty() && !a.kw.empty())
    throw_tpl(TplErrorKind::Type, "can't handle positional and keyword arguments at the same time");
  if (!a.kw.empty()) {
    Value m = Value::object();
    for (auto& [k, x] : a.kw) m.obj->set(k, x);
    return Value::string(printf_format(to_str(v), m));
  }
  return Value::string(printf_format(to_str(v), Value::array(a.pos, true)));
}
Value f_attr(Interp& in, const Value& v, CallArgs& a) {
  std::string name = arg_str(a, 0, "name", "");
  if (v.is_undefined()) raise_undefined(v);
  if (in.has_method(v, name) || v.type == VType::Namespace) return in.getattr(v, name);
  return undefined_attr(v, name);
}
Value f_indent(Interp&, const Value& v, CallArgs& a) {
  const Value* w = arg(a, 0, "width");
  const int64_t width = w && !w->is_string() ? std::max<int64_t>(0, to_int(*w, "width")) : 4;
  if (!w || !w->is_string()) budget_bytes(static_cast<uint64_t>(width), "indent width");
  std::string ind = w && w->is_string() ? w->s : std::string(static_cast<size_t>(width), ' ');
  bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
  std::string s = to_str(v) + "\n";
  std::vector<std::string> lines = splitlines(s, false);
  budget_bytes(s.size() + (lines.size() + 1) * ind.size(), "string from filter 'indent'");
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : ind + lines[k]);
  }
  if (first) rv = ind + rv;
  return Value::string(rv);
}

Value f_map(Interp& in, const Value& v, CallArgs& a);
Value f_select(Interp& in, const Value& v, CallArgs& a);
Value f_reject(Interp& in, const Value& v, CallArgs& a);
Value f_selectattr(Interp& in, const Value& v, CallArgs& a);
Value f_rejectattr(Interp& in, const Value& v, CallArgs& a);

const FilterDef kFilters[] = {
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"upper", f_upper},
    {"lower", f_lower},
    {"title", f_title},
    {"capitalize", f_capitalize},
    {"length", f_length},
    {"count", f_length},
    {"first", f_first},
    {"last", f_last},
    {"join", f_join},
    {"replace", f_replace},
    {"default", f_default},
    {"d", f_default},
    {"items", f_items},
    {"list", f_list},
    {"map", f_map},
    {"select", f_select},
    {"reject", f_reject},
    {"selectattr", f_selectattr},
    {"rejectattr", f_rejectattr},
    {"indent", f_indent},
    {"safe", f_safe},
    {"string", f_string},
    {"int", f_int},
    {"float", f_float},
    {"round", f_round},
    {"unique", f_unique},
    {"dictsort", f_dictsort},
    {"batch", f_batch},
    {"abs", f_abs},
    {"min", f_min},
    {"max", f_max},
    {"sum", f_sum},
    {"sort", f_sort},
    {"reverse", f_reverse},
    {"wordcount", f_wordcount},
    {"center", f_center},
    {"format", f_format},
    {"escape", f_escape},
    {"e", f_escape},
    {"forceescape", f_escape},
    {"attr", f_attr},
};
const char* const kKnownFilters[] = {"filesizeformat", "groupby",   "pprint",   "random",
                                     "slice",          "striptags", "truncate", "urlencode",
                                     "urlize",         "wordwrap",  "xmlattr"};

// ---- tests ----

using TestFn = bool (*)(Interp&, const Value&, CallArgs&);
struct TestDef {
  const char* name;
  TestFn fn;
};

const Value& targ(const CallArgs& a) {
  if (a.pos.empty() && a.kw.empty()) throw_tpl(TplErrorKind::Type, "test requires an argument");
  return a.pos.empty() ? a.kw[0].second : a.pos[0];
}

bool t_defined(Interp&, const Value& v, CallArgs&) {
  return !v.is_undefined();
}
bool t_undefined(Interp&, const Value& v, CallArgs&) {
  return v.is_undefined();
}
bool t_none(Interp&, const Value& v, CallArgs&) {
  return v.is_none();
}
bool t_string(Interp&, const Value& v, CallArgs&) {
  return v.is_string();
}
bool t_mapping(Interp&, const Value& v, CallArgs&) {
  return v.is_object();
}
bool t_iterable(Interp&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_array() || v.is_object();
}
bool t_sequence(Interp&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_array() || v.is_object();
}
bool t_number(Interp&, const Value& v, CallArgs&) {
  return v.is_number();
}
bool t_integer(Interp&, const Value& v, CallArgs&) {
  return v.type == VType::Int;
}
bool t_float(Interp&, const Value& v, CallArgs&) {
  return v.type == VType::Float;
}
bool t_boolean(Interp&, const Value& v, CallArgs&) {
  return v.type == VType::Bool;
}
bool t_true(Interp&, const Value& v, CallArgs&) {
  return v.type == VType::Bool && v.b;
}
bool t_false(Interp&, const Value& v, CallArgs&) {
  return v.type == VType::Bool && !v.b;
}
bool t_callable(Interp&, const Value& v, CallArgs&) {
  return v.type == VType::Callable;
}
bool t_odd(Interp&, const Value& v, CallArgs&) {
  return to_int(v, "odd") % 2 != 0;
}
bool t_even(Interp&, const Value& v, CallArgs&) {
  return to_int(v, "even") % 2 == 0;
}
bool t_divisibleby(Interp&, const Value& v, CallArgs& a) {
  int64_t d = to_int(targ(a), "divisibleby");
  if (d == 0) throw_tpl(TplErrorKind::Type, "integer division or modulo by zero");
  return to_int(v, "divisibleby") % d == 0;
}
bool t_lower(Interp&, const Value& v, CallArgs&) {
  std::string s = to_str(v);
  return lower(s) == s && upper(s) != s;
}
bool t_upper(Interp&, const Value& v, CallArgs&) {
  std::string s = to_str(v);
  return upper(s) == s && lower(s) != s;
}
bool t_in(Interp&, const Value& v, CallArgs& a) {
  return contains(targ(a), v);
}
bool t_eq(Interp&, const Value& v, CallArgs& a) {
  return equals(v, targ(a));
}
bool t_ne(Interp&, const Value& v, CallArgs& a) {
  return !equals(v, targ(a));
}
bool t_lt(Interp&, const Value& v, CallArgs& a) {
  return less(v, targ(a));
}
bool t_le(Interp&, const Value& v, CallArgs& a) {
  return less(v, targ(a)) || equals(v, targ(a));
}
bool t_gt(Interp&, const Value& v, CallArgs& a) {
  return less(targ(a), v);
}
bool t_ge(Interp&, const Value& v, CallArgs& a) {
  return less(targ(a), v) || equals(v, targ(a));
}
bool t_sameas(Interp&, const Value& v, CallArgs& a) {
  const Value& o = targ(a);
  if (v.type != o.type) return false;
  switch (v.type) {
    case VType::None:
    case VType::Undefined:
      return true;
    case VType::Bool:
      return v.b == o.b;
    case VType::Array:
      return v.arr == o.arr;
    case VType::Object:
    case VType::Namespace:
      return v.obj == o.obj;
    case VType::Callable:
      return v.fn == o.fn;
    default:
      return equals(v, o);
  }
}
bool t_escaped(Interp&, const Value&, CallArgs&) {
  return false;
}
bool t_filter(Interp&, const Value& v, CallArgs&) {
  bool known = false;
  return v.is_string() && find_filter(v.s, &known) >= 0;
}
bool t_test(Interp&, const Value& v, CallArgs&) {
  bool known = false;
  return v.is_string() && find_test(v.s, &known) >= 0;
}

const TestDef kTests[] = {
    {"defined", t_defined},
    {"undefined", t_undefined},
    {"none", t_none},
    {"string", t_string},
    {"mapping", t_mapping},
    {"iterable", t_iterable},
    {"sequence", t_sequence},
    {"number", t_number},
    {"integer", t_integer},
    {"float", t_float},
    {"boolean", t_boolean},
    {"true", t_true},
    {"false", t_false},
    {"callable", t_callable},
    {"odd", t_odd},
    {"even", t_even},
    {"divisibleby", t_divisibleby},
    {"lower", t_lower},
    {"upper", t_upper},
    {"in", t_in},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"==", t_eq},
    {"ne", t_ne},
    {"!=", t_ne},
    {"lt", t_lt},
    {"lessthan", t_lt},
    {"<", t_lt},
    {"le", t_le},
    {"<=", t_le},
    {"gt", t_gt},
    {"greaterthan", t_gt},
    {">", t_gt},
    {"ge", t_ge},
    {">=", t_ge},
    {"sameas", t_sameas},
    {"escaped", t_escaped},
    {"filter", t_filter},
    {"test", t_test},
};

// map / select family (need filter and test application)
Value f_map(Interp& in, const Value& v, CallArgs& a) {
  std::vector<Value> out;
  const Value* attribute = nullptr;
  for (auto& kv : a.kw)
    if (kv.first == "attribute") attribute = &kv.second;
  if (attribute) {
    const Value* def = nullptr;
    for (auto& kv : a.kw)
      if (kv.first == "default") def = &kv.second;
    for (auto& x : iterate(v)) {
      Value r = attr_path(in, x, to_str(*attribute));
      out.push_back(r.is_undefined() && def ? *def : r);
    }
    return Value::array(std::move(out));
  }
  if (a.pos.empty()) throw_tpl(TplErrorKind::Type, "map requires a filter argument");
  std::string name = need_str(a.pos[0], "map filter name");
  bool known = false;
  int id = find_filter(name, &known);
  if (id < 0)
    throw_tpl(known ? TplErrorKind::Unsupported : TplErrorKind::Runtime,
              fmt::format("No filter named '{}'.", name));
  CallArgs rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (auto& x : iterate(v)) out.push_back(in.apply_filter(id, x, rest));
  return Value::array(std::move(out));
}

Value select_impl(Interp& in, const Value& v, CallArgs& a, bool attr_mode, bool want) {
  size_t base = 0;
  std::string attribute;
  if (attr_mode) {
    if (a.pos.empty()) throw_tpl(TplErrorKind::Type, "Missing parameter for attribute name");
    attribute = to_str(a.pos[0]);
    base = 1;
  }
  int id = -1;
  CallArgs rest;
  if (a.pos.size() > base) {
    std::string name = need_str(a.pos[base], "test name");
    bool known = false;
    id = find_test(name, &known);
    if (id < 0)
      throw_tpl(known ? TplErrorKind::Unsupported : TplErrorKind::Runtime,
                fmt::format("No test named '{}'.", name));
    rest.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(base) + 1, a.pos.end());
    rest.kw = a.kw;
  }
  std::vector<Value> out;
  for (auto& x : iterate(v)) {
    Value probe = attr_mode ? attr_path(in, x, attribute) : x;
    bool r = id >= 0 ? in.apply_test(id, probe, rest) : truthy(probe);
    if (r == want) out.push_back(x);
  }
  return Value::array(std::move(out));
}
Value f_select(Interp& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, false, true);
}
Value f_reject(Interp& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, false, false);
}
Value f_selectattr(Interp& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, true, true);
}
Value f_rejectattr(Interp& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, true, false);
}

}  // namespace

bool py_index_checked(int64_t idx, size_t n, size_t* out) {
  if (idx < 0) idx += static_cast<int64_t>(n);
  if (idx < 0 || idx >= static_cast<int64_t>(n)) return false;
  *out = static_cast<size_t>(idx);
  return true;
}

int find_filter(std::string_view name, bool* known) {
  for (size_t k = 0; k < std::size(kFilters); ++k)
    if (name == kFilters[k].name) {
      *known = true;
      return static_cast<int>(k);
    }
  *known = false;
  for (const char* n : kKnownFilters)
    if (name == n) *known = true;
  return -1;
}

int find_test(std::string_view name, bool* known) {
  for (size_t k = 0; k < std::size(kTests); ++k)
    if (name == kTests[k].name) {
      *known = true;
      return static_cast<int>(k);
    }
  *known = false;
  return -1;
}

Value Interp::apply_filter(int id, const Value& in, CallArgs& a) {
  budget.step(value_cost(in));  // a filter walks its input (join, map, selectattr, ...)
  return kFilters[id].fn(*this, in, a);
}

const char* filter_name(int id) noexcept {
  return kFilters[id].name;
}
bool Interp::apply_test(int id, const Value& in, CallArgs& a) {
  return kTests[id].fn(*this, in, a);
}

// ---- globals -----------------------------------------------------------------------------------

void Interp::install_globals(Scope& root) {
  root.vars["range"] = Value::callable("range", [](CallArgs& a) {
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) {
      stop = to_int(a.pos[0], "range");
    } else if (a.pos.size() == 2 || a.pos.size() == 3) {
      start = to_int(a.pos[0], "range");
      stop = to_int(a.pos[1], "range");
      if (a.pos.size() == 3) step = to_int(a.pos[2], "range");
    } else {
      throw_tpl(TplErrorKind::Type, "range expected 1 to 3 arguments");
    }
    if (step == 0) throw_tpl(TplErrorKind::Type, "range() arg 3 must not be zero");
    std::vector<Value> out;
    for (int64_t x = start; step > 0 ? x < stop : x > stop; x += step) {
      if (out.size() >= 100000)
        throw_tpl(TplErrorKind::Type,
                  "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      out.push_back(Value::integer(x));
    }
    return Value::array(std::move(out));
  });
  root.vars["dict"] = Value::callable("dict", [](CallArgs& a) {
    Value d = Value::object();
    if (!a.pos.empty()) {
      if (!a.pos[0].is_object()) throw_tpl(TplErrorKind::Unsupported, "dict() from a non-mapping");
      d.obj->items = a.pos[0].obj->items;
    }
    for (auto& [k, v] : a.kw) d.obj->set(k, v);
    return d;
  });
  root.vars["namespace"] = Value::callable("namespace", [](CallArgs& a) {
    Value n = Value::ns();
    if (!a.pos.empty()) {
      if (!a.pos[0].is_object()) throw_tpl(TplErrorKind::Unsupported, "namespace() from a non-mapping");
      n.obj->items = a.pos[0].obj->items;
    }
    for (auto& [k, v] : a.kw) n.obj->set(k, v);
    return n;
  });
  root.vars["raise_exception"] = Value::callable("raise_exception", [](CallArgs& a) -> Value {
    const Value* m = a.get(0, "message");
    if (!m)
      throw_tpl(TplErrorKind::Type, "raise_exception() missing 1 required positional argument: 'message'");
    throw_tpl(TplErrorKind::Raised, to_str(*m));
  });
  std::optional<std::time_t> now = opt.now;
  root.vars["strftime_now"] = Value::callable("strftime_now", [now](CallArgs& a) {
    const Value* f = a.get(0, "format");
    if (!f) throw_tpl(TplErrorKind::Type, "strftime_now() missing 1 required positional argument: 'format'");
    std::time_t t = now ? *now : std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    localtime_r(&t, &tm);
    std::string fmt_s = need_str(*f, "format");
    if (fmt_s.empty()) return Value::string("");
    std::string buf(256 + fmt_s.size() * 8, '\0');
    size_t n = std::strftime(buf.data(), buf.size(), fmt_s.c_str(), &tm);
    buf.resize(n);
    return Value::string(buf);
  });
  for (const char* n : {"cycler", "joiner", "lipsum"}) {
    std::string name = n;
    root.vars[name] = Value::callable(name, [name](CallArgs&) -> Value {
      throw_tpl(TplErrorKind::Unsupported,
                "the global '" + name + "()' is not supported by this chat-template engine");
    });
  }
}

}  // namespace cortiq::jinja
