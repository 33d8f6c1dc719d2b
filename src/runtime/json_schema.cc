#include "runtime/json_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "tokenizer/output_protocol.h"
#include "util/error.h"

namespace cortiq::runtime {

namespace {

using ojson = nlohmann::ordered_json;

/// The JSON primitives as GBNF rules named P + name.
std::string primitives(const std::string& P) {
  return fmt::format(
      "{0}ws ::= ( \" \" | \"\\n\" [ \\t]{{0,20}} )?\n"
      "{0}char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{{4}} )\n"
      "{0}string ::= \"\\\"\" {0}char* \"\\\"\"\n"
      "{0}integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{{0,15}} )\n"
      "{0}number ::= {0}integer ( \".\" [0-9]{{1,16}} )? ( [eE] [-+]? [0-9]{{1,3}} )?\n"
      "{0}boolean ::= \"true\" | \"false\"\n"
      "{0}null ::= \"null\"\n"
      "{0}value ::= {0}object | {0}array | {0}string | {0}number | {0}boolean | {0}null\n"
      "{0}member ::= {0}string {0}ws \":\" {0}ws {0}value\n"
      "{0}object ::= \"{{\" {0}ws ( {0}member ( {0}ws \",\" {0}ws {0}member )* {0}ws )? \"}}\"\n"
      "{0}array ::= \"[\" {0}ws ( {0}value ( {0}ws \",\" {0}ws {0}value )* {0}ws )? \"]\"\n",
      P);
}

/// `s` as a GBNF literal (quotes included).
std::string lit(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"')
      o += "\\\"";
    else if (c == '\\')
      o += "\\\\";
    else if (c == '\n')
      o += "\\n";
    else if (c == '\r')
      o += "\\r";
    else if (c == '\t')
      o += "\\t";
    else if (c < 0x20)
      o += fmt::format("\\x{:02x}", c);
    else
      o += static_cast<char>(c);
  }
  return o + "\"";
}

std::string cp_esc(uint32_t c) {
  return c <= 0xFF     ? fmt::format("\\x{:02x}", c)
         : c <= 0xFFFF ? fmt::format("\\u{:04x}", c)
                       : fmt::format("\\U{:08x}", c);
}

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges m;
  for (const auto& x : r) {
    if (!m.empty() && x.first <= m.back().second + 1)
      m.back().second = std::max(m.back().second, x.second);
    else
      m.push_back(x);
  }
  return m;
}

Ranges complement(const Ranges& r) {
  Ranges c;
  uint32_t next = 0;
  for (const auto& [lo, hi] : normalize(r)) {
    if (lo > next) c.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= 0x10FFFF) c.emplace_back(next, 0x10FFFF);
  return c;
}

/// r minus the characters a JSON string must escape (", \, controls): a class's characters are
/// written raw.
std::string json_class(const Ranges& r) {
  Ranges out;
  const Ranges bad = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  const Ranges keep = complement(bad);
  for (const auto& a : normalize(r))
    for (const auto& k : keep) {
      const uint32_t lo = std::max(a.first, k.first), hi = std::min(a.second, k.second);
      if (lo <= hi) out.emplace_back(lo, hi);
    }
  std::string s = "[";
  for (const auto& [lo, hi] : out) s += lo == hi ? cp_esc(lo) : cp_esc(lo) + "-" + cp_esc(hi);
  return s + "]";
}

/// Translates a regex subset (ECMA-262 syntax) into a GBNF expression over the JSON-encoded string.
struct RegexToGbnf {
  std::string_view re;
  size_t i = 0;
  std::string path, P;

  [[noreturn]] void unsupported(const std::string& what) const {
    fail(ErrorKind::Unsupported, "JSON schema: pattern feature {} at {} is not supported (pattern \"{}\")",
         what, path, std::string(re));
  }
  bool end() const { return i >= re.size(); }

  uint32_t utf8() {
    const auto c = static_cast<unsigned char>(re[i]);
    const size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    if (i + n > re.size()) unsupported("(invalid UTF-8)");
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1Fu : n == 3 ? c & 0x0Fu : c & 0x07u;
    for (size_t k = 1; k < n; ++k) cp = cp << 6 | (static_cast<unsigned char>(re[i + k]) & 0x3Fu);
    i += n;
    return cp;
  }

  /// An escape after '\' (i at the letter): a class's ranges.
  Ranges escape() {
    const char e = re[i++];
    const Ranges d = {{'0', '9'}}, w = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}},
                 s = {{' ', ' '}, {'\t', '\r'}};
    switch (e) {
      case 'd':
        return d;
      case 'D':
        return complement(d);
      case 'w':
        return w;
      case 'W':
        return complement(w);
      case 's':
        return s;
      case 'S':
        return complement(s);
      case 'n':
        return {{'\n', '\n'}};
      case 't':
        return {{'\t', '\t'}};
      case 'r':
        return {{'\r', '\r'}};
      default:
        if (std::string_view(".\\/^$|?*+()[]{}-\"").find(e) != std::string_view::npos)
          return {{static_cast<uint8_t>(e), static_cast<uint8_t>(e)}};
        unsupported(std::string("'\\") + e + "'");
    }
  }

  std::string chars(const Ranges& r) {
    // quote and backslash appear escaped inside a JSON string
    std::vector<std::string> alts;
    const Ranges n = normalize(r);
    const auto has = [&](uint32_t c) {
      return std::any_of(n.begin(), n.end(), [c](const auto& x) { return x.first <= c && c <= x.second; });
    };
    const std::string cls = json_class(n);
    if (cls != "[]") alts.push_back(cls);
    if (has('"')) alts.push_back("\"\\\\\\\"\"");
    if (has('\\')) alts.push_back("\"\\\\\\\\\"");
    if (has('\n')) alts.push_back("\"\\\\n\"");
    if (has('\t')) alts.push_back("\"\\\\t\"");
    if (has('\r')) alts.push_back("\"\\\\r\"");
    if (alts.empty()) unsupported("(a class that matches no character)");
    std::string o = "(";
    for (size_t k = 0; k < alts.size(); ++k) o += (k ? " | " : "") + alts[k];
    return o + ")";
  }

  std::string alternation() {
    std::string o = "(" + sequence();
    while (!end() && re[i] == '|') {
      ++i;
      o += " | " + sequence();
    }
    return o + ")";
  }

  std::string sequence() {
    std::string o;
    while (!end() && re[i] != '|' && re[i] != ')') {
      std::string atom;
      const char c = re[i];
      if (c == '(') {
        ++i;
        if (re.substr(i, 2) == "?:")
          i += 2;
        else if (!end() && re[i] == '?')
          unsupported("'(?' (lookaround or named group)");
        atom = alternation();
        if (end() || re[i] != ')') unsupported("(unbalanced parentheses)");
        ++i;
      } else if (c == '[') {
        ++i;
        bool neg = false;
        if (!end() && re[i] == '^') neg = true, ++i;
        Ranges r;
        while (!end() && re[i] != ']') {
          Ranges a;
          if (re[i] == '\\') {
            ++i;
            if (end()) unsupported("(trailing backslash)");
            a = escape();
          } else {
            const uint32_t x = utf8();
            a = {{x, x}};
          }
          if (a.size() == 1 && a[0].first == a[0].second && i + 1 < re.size() && re[i] == '-' &&
              re[i + 1] != ']') {
            ++i;
            uint32_t hi;
            if (re[i] == '\\') {
              ++i;
              const Ranges h = escape();
              if (h.size() != 1 || h[0].first != h[0].second)
                unsupported("(a class range ending in a class)");
              hi = h[0].first;
            } else {
              hi = utf8();
            }
            if (hi < a[0].first) unsupported("(a reversed class range)");
            a = {{a[0].first, hi}};
          }
          r.insert(r.end(), a.begin(), a.end());
        }
        if (end()) unsupported("(unterminated class)");
        ++i;
        atom = chars(neg ? complement(r) : r);
      } else if (c == '.') {
        ++i;
        atom = chars(complement({{'\n', '\n'}}));
      } else if (c == '\\') {
        ++i;
        if (end()) unsupported("(trailing backslash)");
        if (re[i] >= '1' && re[i] <= '9') unsupported("'\\" + std::string(1, re[i]) + "' (backreference)");
        if (re[i] == 'b' || re[i] == 'B') unsupported("'\\" + std::string(1, re[i]) + "' (word boundary)");
        atom = chars(escape());
      } else if (c == '^' || c == '$') {
        unsupported(std::string("'") + c + "' inside the pattern");
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        unsupported(std::string("'") + c + "' after nothing");
      } else {
        const uint32_t x = utf8();
        atom = chars({{x, x}});
      }
      // quantifier
      if (!end() && (re[i] == '*' || re[i] == '+' || re[i] == '?')) {
        atom += re[i++];
      } else if (!end() && re[i] == '{') {
        const size_t close = re.find('}', i);
        if (close == std::string_view::npos) unsupported("(unterminated {m,n})");
        const std::string q(re.substr(i, close - i + 1));
        for (char k : q.substr(1, q.size() - 2))
          if (!(k >= '0' && k <= '9') && k != ',') unsupported("'" + q + "'");
        atom += q;
        i = close + 1;
      }
      if (!end() && re[i] == '?') ++i;  // lazy: the same language
      o += " " + atom;
    }
    return o.empty() ? "\"\"" : o;
  }

  std::string run() {
    bool a0 = false, a1 = false;
    if (!re.empty() && re[0] == '^') a0 = true, i = 1;
    if (re.size() > i && re.back() == '$' && (re.size() < 2 || re[re.size() - 2] != '\\')) {
      a1 = true;
      re.remove_suffix(1);
    }
    std::string body = alternation();
    if (!end()) unsupported("(unbalanced parentheses)");
    return "\"\\\"\" " + (a0 ? std::string() : P + "char* ") + body +
           (a1 ? std::string() : " " + P + "char*") + " \"\\\"\"";
  }
};

struct Converter {
  const ojson& top;
  std::string P;
  std::string out;
  std::map<std::string, std::string> refs;  // "$defs/NAME" → rule
  size_t next = 0;

  std::string rule(const std::string& hint, const std::string& body) {
    std::string name = P + "s" + std::to_string(next++);
    if (!hint.empty()) {
      name += "-";
      for (char c : hint) name += (std::isalnum(static_cast<unsigned char>(c)) ? c : '-');
    }
    out += name + " ::= " + body + "\n";
    return name;
  }

  [[noreturn]] static void unsupported(const std::string& kw, const std::string& path) {
    fail(ErrorKind::Unsupported, "JSON schema: '{}' at {} is not supported", kw, path.empty() ? "/" : path);
  }
  [[noreturn]] static void invalid(const std::string& why, const std::string& path) {
    fail(ErrorKind::InvalidArgument, "JSON schema: {} at {}", why, path.empty() ? "/" : path);
  }

  static size_t count(const ojson& s, const char* k, const std::string& path) {
    const auto& v = s.at(k);
    if (!v.is_number_unsigned()) invalid(std::string("'") + k + "' must be a non-negative integer", path);
    const auto n = v.get<uint64_t>();
    if (n > 10000) unsupported(std::string(k) + " above 10000", path);
    return static_cast<size_t>(n);
  }

  std::string ref(const std::string& r, const std::string& path) {
    std::string sect, name;
    for (const char* s : {"$defs", "definitions"}) {
      const std::string pre = std::string("#/") + s + "/";
      if (r.rfind(pre, 0) == 0) sect = s, name = r.substr(pre.size());
    }
    if (sect.empty()) unsupported("$ref " + r + " (only #/$defs/NAME and #/definitions/NAME)", path);
    const std::string key = sect + "/" + name;
    if (auto it = refs.find(key); it != refs.end()) return it->second;
    const auto s = top.find(sect);
    if (s == top.end() || !s->is_object() || !s->contains(name))
      invalid("$ref " + r + " names no definition", path);
    const std::string rn = P + "def" + std::to_string(next++);
    refs[key] = rn;
    const std::string body = visit(s->at(name), "/" + sect + "/" + name);
    out += rn + " ::= " + body + "\n";
    return rn;
  }

  std::string object(const ojson& s, const std::string& path) {
    struct Prop {
      std::string kv;
      bool req;
    };
    std::vector<Prop> props;
    std::set<std::string> required;
    if (auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) invalid("'required' must be an array of strings", path);
      for (const auto& x : *r) {
        if (!x.is_string()) invalid("'required' must be an array of strings", path);
        required.insert(x.get<std::string>());
      }
    }
    if (auto p = s.find("properties"); p != s.end()) {
      if (!p->is_object()) invalid("'properties' must be an object", path);
      for (const auto& [k, v] : p->items()) {
        const std::string val = visit(v, path + "/properties/" + k);
        props.push_back(
            {lit(ojson(k).dump()) + " " + P + "ws \":\" " + P + "ws " + val, required.count(k) > 0});
        required.erase(k);
      }
    }
    if (!required.empty())
      invalid("'required' names '" + *required.begin() + "', which is not in 'properties'", path);
    std::string extra;  // an additional member, or "" when none is allowed
    if (auto a = s.find("additionalProperties"); a != s.end() && !(a->is_boolean() && a->get<bool>())) {
      if (a->is_object())
        extra = P + "string " + P + "ws \":\" " + P + "ws " + visit(*a, path + "/additionalProperties");
      else if (!a->is_boolean())
        invalid("'additionalProperties' must be a boolean or a schema", path);
    } else {
      extra = P + "member";
    }
    const std::string comma = P + "ws \",\" " + P + "ws ";
    // R[i]: members from property i on, after something was written; S[i]: with nothing written yet.
    std::string R = extra.empty() ? "\"\"" : rule("", "( " + comma + extra + " )*");
    std::string S = extra.empty() ? "\"\"" : rule("", "( " + extra + " " + R + " )?");
    for (size_t i = props.size(); i-- > 0;) {
      const Prop& p = props[i];
      const std::string r2 = rule("", p.req ? comma + p.kv + " " + R : "( " + comma + p.kv + " )? " + R);
      const std::string s2 = rule("", p.req ? p.kv + " " + R : p.kv + " " + R + " | " + S);
      R = r2;
      S = s2;
    }
    return "\"{\" " + P + "ws " + S + " " + P + "ws \"}\"";
  }

  std::string array(const ojson& s, const std::string& path) {
    std::string item = P + "value";
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) unsupported("items as an array (use prefixItems; not supported either)", path);
      item = visit(*it, path + "/items");
    }
    const size_t lo = s.contains("minItems") ? count(s, "minItems", path) : 0;
    const bool bounded = s.contains("maxItems");
    const size_t hi = bounded ? count(s, "maxItems", path) : 0;
    if (bounded && hi < lo) invalid("maxItems < minItems", path);
    const std::string comma = P + "ws \",\" " + P + "ws ";
    std::string body;
    if (bounded && hi == 0) {
      body = "\"\"";
    } else {
      const std::string more = "( " + comma + item + " )";
      std::string rep =
          lo > 1 ? more + "{" + std::to_string(lo - 1) + (bounded ? "," + std::to_string(hi - 1) : ",") + "}"
                 : more + (bounded ? "{0," + std::to_string(hi - 1) + "}" : "*");
      body = "( " + item + " " + rep + " )" + (lo == 0 ? "?" : "");
    }
    return "\"[\" " + P + "ws " + body + " " + P + "ws \"]\"";
  }

  std::string string(const ojson& s, const std::string& path) {
    if (s.contains("format")) unsupported("format " + s["format"].dump(), path);
    if (auto p = s.find("pattern"); p != s.end()) {
      if (!p->is_string()) invalid("'pattern' must be a string", path);
      if (s.contains("minLength") || s.contains("maxLength"))
        unsupported("pattern together with minLength/maxLength", path);
      RegexToGbnf t{p->get_ref<const std::string&>(), 0, path.empty() ? "/" : path, P};
      return t.run();
    }
    const size_t lo = s.contains("minLength") ? count(s, "minLength", path) : 0;
    if (!s.contains("maxLength"))
      return lo == 0 ? P + "string" : "\"\\\"\" " + P + "char{" + std::to_string(lo) + ",} \"\\\"\"";
    const size_t hi = count(s, "maxLength", path);
    if (hi < lo) invalid("maxLength < minLength", path);
    return "\"\\\"\" " + P + "char{" + std::to_string(lo) + "," + std::to_string(hi) + "} \"\\\"\"";
  }

  std::string typed(const ojson& s, const std::string& t, const std::string& path) {
    if (t == "object") return object(s, path);
    if (t == "array") return array(s, path);
    if (t == "string") return string(s, path);
    if (t == "number" || t == "integer" || t == "boolean" || t == "null") return P + t;
    invalid("unknown type '" + t + "'", path);
  }

  std::string visit(const ojson& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) invalid("schema false matches nothing", path);
      return P + "value";
    }
    if (!s.is_object()) invalid("a schema must be an object or a boolean", path);
    static const std::set<std::string> ignored = {"title",    "description", "default",  "examples",
                                                  "$schema",  "$id",         "$comment", "deprecated",
                                                  "readOnly", "writeOnly",   "$defs",    "definitions"};
    static const std::set<std::string> known = {"type",  "properties", "required",  "additionalProperties",
                                                "items", "minItems",   "maxItems",  "enum",
                                                "const", "minLength",  "maxLength", "pattern",
                                                "anyOf", "oneOf",      "$ref",      "format"};
    for (const auto& [k, v] : s.items())
      if (!ignored.count(k) && !known.count(k)) unsupported(k, path);
    if (auto r = s.find("$ref"); r != s.end()) {
      if (!r->is_string()) invalid("'$ref' must be a string", path);
      for (const auto& [k, v] : s.items())
        if (k != "$ref" && !ignored.count(k)) unsupported(k + " beside $ref", path);
      return ref(r->get<std::string>(), path);
    }
    if (auto c = s.find("const"); c != s.end()) return lit(c->dump());
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty()) invalid("'enum' must be a non-empty array", path);
      std::string o = "(";
      for (size_t k = 0; k < e->size(); ++k) o += (k ? " | " : " ") + lit((*e)[k].dump());
      return o + " )";
    }
    for (const char* kw : {"anyOf", "oneOf"})
      if (auto a = s.find(kw); a != s.end()) {
        if (!a->is_array() || a->empty())
          invalid(std::string("'") + kw + "' must be a non-empty array", path);
        if (s.contains("type")) unsupported(std::string(kw) + " beside type", path);
        std::string o = "(";
        for (size_t k = 0; k < a->size(); ++k)
          o += (k ? " | " : " ") + visit((*a)[k], path + "/" + kw + "/" + std::to_string(k));
        return o + " )";
      }
    auto t = s.find("type");
    if (t == s.end()) {
      if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required"))
        return object(s, path);
      if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) return array(s, path);
      if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern")) return string(s, path);
      return P + "value";
    }
    if (t->is_string()) return typed(s, t->get<std::string>(), path);
    if (!t->is_array() || t->empty()) invalid("'type' must be a string or a non-empty array", path);
    std::string o = "(";
    for (size_t k = 0; k < t->size(); ++k) {
      if (!(*t)[k].is_string()) invalid("'type' entries must be strings", path);
      o += (k ? " | " : " ") + typed(s, (*t)[k].get<std::string>(), path);
    }
    return o + " )";
  }
};

}  // namespace

std::string json_object_gbnf() {
  return "root ::= object\n" + primitives("");
}

std::string tool_call_gbnf(const ojson& tools, const std::string& tool_choice, int format,
                           bool mistral_args) {
  const auto fmt_ = static_cast<ToolFormat>(format);
  const bool named = tool_choice != "required";
  std::string rules, alts;
  size_t k = 0;
  for (const auto& t : tools) {
    const auto& f = t.at("function");
    const std::string name = f.at("name").get<std::string>();
    if (named && name != tool_choice) continue;
    const std::string P = "t" + std::to_string(k++) + "-";
    ojson params =
        f.contains("parameters") && !f["parameters"].is_null() ? f["parameters"] : ojson{{"type", "object"}};
    try {
      rules += json_schema_gbnf(params, P);
    } catch (const Error& e) {
      throw Error(e.kind(), "function '" + name + "' parameters: " + e.message());
    }
    const std::string args = P + "root";
    std::string call;
    switch (fmt_) {
      case ToolFormat::Hermes:
        call = (named ? "" : lit(name + "\", \"arguments\": ")) + " " + args +
               " \"}\" ( \"\\n\" )? \"</tool_call>\"";
        break;
      case ToolFormat::Mistral:
        if (mistral_args)
          call = (named ? "" : lit(name + "[ARGS]")) + " " + args;
        else
          call = (named ? "" : lit(name + "\", \"arguments\": ")) + " " + args + " \"}]\"";
        break;
      case ToolFormat::BareJson:
        call = (named ? "" : lit(name + "\", \"parameters\": ")) + " " + args + " \"}\"";
        break;
      case ToolFormat::Any:
        fail(ErrorKind::InvalidArgument, "tool calls cannot be constrained without a known tool-call syntax");
    }
    alts += (alts.empty() ? "" : " | ") + std::string("( ") + call + " )";
  }
  if (alts.empty())
    fail(ErrorKind::InvalidArgument, "tool_choice '{}' names no function of 'tools'", tool_choice);
  return "root ::= " + alts + "\n" + rules;
}

std::string json_schema_gbnf(const ojson& schema, const std::string& prefix) {
  Converter c{schema, prefix, "", {}, 0};
  const std::string body = c.visit(schema, "");
  return prefix + "root ::= " + body + "\n" + c.out + primitives(prefix);
}

}  // namespace cortiq::runtime
