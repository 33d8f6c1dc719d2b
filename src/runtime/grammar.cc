#include "runtime/grammar.h"

#include <algorithm>
#include <functional>
#include <map>
#include <utility>

#include "util/error.h"

namespace cortiq::runtime {

namespace {
constexpr uint32_t kMaxCp = 0x10FFFF;
constexpr long kMaxRepeat = 10000;
}  // namespace

bool Grammar::Elem::matches(uint32_t cp) const noexcept {
  for (const auto& [lo, hi] : ranges) {
    if (cp < lo) return false;
    if (cp <= hi) return true;
  }
  return false;
}

bool Grammar::Elem::intersects(uint32_t lo, uint32_t hi) const noexcept {
  for (const auto& r : ranges)
    if (r.first <= hi && lo <= r.second) return true;
  return false;
}

/// The GBNF parser and the checks (one use per Grammar::parse).
struct GrammarCompiler {
  std::string_view src;
  size_t pos = 0;
  Grammar g;
  std::map<std::string, uint32_t, std::less<>> ids;
  std::vector<size_t> defined_at;  // offset of each rule's definition (npos: not yet defined)
  std::vector<size_t> first_ref;   // offset of the first reference to each rule

  [[noreturn]] void error(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < src.size(); ++i) {
      if (src[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    fail(ErrorKind::Parse, "grammar: line {} column {} (offset {}): {}", line, col, at, what);
  }

  bool at_end() const { return pos >= src.size(); }
  char peek() const { return at_end() ? '\0' : src[pos]; }

  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = src[pos];
      if (c == ' ' || c == '\t' || c == '\r' || (newline_ok && c == '\n')) {
        ++pos;
      } else if (c == '#') {
        while (!at_end() && src[pos] != '\n') ++pos;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  }

  std::string parse_name() {
    const size_t b = pos;
    while (!at_end() && name_char(src[pos])) ++pos;
    if (pos == b) error(b, "expected a rule name");
    return std::string(src.substr(b, pos - b));
  }

  uint32_t rule_id(const std::string& name, size_t at) {
    auto it = ids.find(name);
    if (it != ids.end()) return it->second;
    const auto id = static_cast<uint32_t>(g.rules_.size());
    g.rules_.emplace_back();
    g.names_.push_back(name);
    defined_at.push_back(std::string::npos);
    first_ref.push_back(at);
    ids.emplace(name, id);
    return id;
  }

  uint32_t new_rule(const std::string& base, size_t at) {
    const auto id = static_cast<uint32_t>(g.rules_.size());
    g.rules_.emplace_back();
    g.names_.push_back(base + "-" + std::to_string(id));
    defined_at.push_back(at);
    first_ref.push_back(at);
    return id;
  }

  uint32_t hex(size_t digits) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      const char c = peek();
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) error(pos, "expected a hex digit in an escape");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos;
    }
    if (v > kMaxCp) error(pos, "escape beyond U+10FFFF");
    return v;
  }

  /// One (possibly escaped) character of a literal or class, as a code point.
  uint32_t parse_char() {
    if (at_end()) error(pos, "unexpected end inside a literal or class");
    const auto c = static_cast<uint8_t>(src[pos]);
    if (c == '\\') {
      const size_t at = pos++;
      const char e = peek();
      ++pos;
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '\'':
        case '^':
          return static_cast<uint8_t>(e);
        case 'x':
          return hex(2);
        case 'u':
          return hex(4);
        case 'U':
          return hex(8);
        default:
          error(at, std::string("unknown escape '\\") + e + "'");
      }
    }
    // raw UTF-8
    const size_t n = c < 0x80             ? 1
                     : (c & 0xE0) == 0xC0 ? 2
                     : (c & 0xF0) == 0xE0 ? 3
                     : (c & 0xF8) == 0xF0 ? 4
                                          : 0;
    if (n == 0 || pos + n > src.size()) error(pos, "invalid UTF-8 in the grammar");
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1Fu : n == 3 ? c & 0x0Fu : c & 0x07u;
    for (size_t i = 1; i < n; ++i) {
      const auto b = static_cast<uint8_t>(src[pos + i]);
      if ((b & 0xC0) != 0x80) error(pos, "invalid UTF-8 in the grammar");
      cp = cp << 6 | (b & 0x3Fu);
    }
    pos += n;
    return cp;
  }

  static Grammar::Elem chars(std::vector<std::pair<uint32_t, uint32_t>> r) {
    std::sort(r.begin(), r.end());
    std::vector<std::pair<uint32_t, uint32_t>> m;
    for (const auto& x : r) {
      if (!m.empty() && x.first <= m.back().second + 1)
        m.back().second = std::max(m.back().second, x.second);
      else
        m.push_back(x);
    }
    Grammar::Elem e;
    e.kind = Grammar::Elem::Chars;
    e.ranges = std::move(m);
    return e;
  }

  Grammar::Elem parse_class() {
    const size_t start = pos++;  // '['
    bool neg = false;
    if (peek() == '^') {
      neg = true;
      ++pos;
    }
    std::vector<std::pair<uint32_t, uint32_t>> r;
    while (peek() != ']') {
      if (at_end()) error(start, "unterminated character class");
      const uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (peek() == '-' && pos + 1 < src.size() && src[pos + 1] != ']') {
        ++pos;
        hi = parse_char();
        if (hi < lo) error(pos, "character range with its end below its start");
      }
      r.emplace_back(lo, hi);
    }
    ++pos;
    Grammar::Elem e = chars(std::move(r));
    if (neg) {
      std::vector<std::pair<uint32_t, uint32_t>> c;
      uint32_t next = 0;
      for (const auto& [lo, hi] : e.ranges) {
        if (lo > next) c.emplace_back(next, lo - 1);
        next = hi + 1;
      }
      if (next <= kMaxCp) c.emplace_back(next, kMaxCp);
      e.ranges = std::move(c);
    }
    return e;
  }

  long parse_int() {
    const size_t b = pos;
    long v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeat) error(b, "repetition count above 10000");
      ++pos;
    }
    if (pos == b) error(b, "expected a number in a repetition");
    return v;
  }

  /// Replaces seq[from, end) (one item) by `lo` copies and then up to `hi` (−1: unbounded).
  void repeat(Grammar::Alt& seq, size_t from, long lo, long hi, uint32_t owner, size_t at) {
    const Grammar::Alt item(seq.begin() + static_cast<std::ptrdiff_t>(from), seq.end());
    seq.resize(from);
    if (static_cast<long>(item.size()) * std::max(lo, hi) > kMaxRepeat)
      error(at, "repetition expands beyond 10000 elements");
    for (long i = 0; i < lo; ++i) seq.insert(seq.end(), item.begin(), item.end());
    auto ref = [](uint32_t r) {
      Grammar::Elem e;
      e.kind = Grammar::Elem::Ref;
      e.rule = r;
      return e;
    };
    const Grammar::Elem end{};
    if (hi < 0) {  // R ::= item R | ε
      const uint32_t r = new_rule(g.names_[owner], at);
      Grammar::Alt a = item;
      a.push_back(ref(r));
      a.push_back(end);
      g.rules_[r] = {a, {end}};
      seq.push_back(ref(r));
    } else if (hi > lo) {  // R1 ::= item | ε; Rk ::= item R(k-1) | ε
      uint32_t prev = 0;
      for (long k = 0; k < hi - lo; ++k) {
        const uint32_t r = new_rule(g.names_[owner], at);
        Grammar::Alt a = item;
        if (k > 0) a.push_back(ref(prev));
        a.push_back(end);
        g.rules_[r] = {a, {end}};
        prev = r;
      }
      seq.push_back(ref(prev));
    }
  }

  Grammar::Alt parse_sequence(uint32_t owner, int depth) {
    Grammar::Alt seq;
    size_t last = std::string::npos;  // where the last item starts in seq
    for (;;) {
      skip_space(depth > 0);
      const size_t at = pos;
      const char c = peek();
      if (c == '"') {
        ++pos;
        last = seq.size();
        while (peek() != '"') {
          if (at_end()) error(at, "unterminated literal");
          const uint32_t cp = parse_char();
          seq.push_back(chars({{cp, cp}}));
        }
        ++pos;
      } else if (c == '[') {
        last = seq.size();
        seq.push_back(parse_class());
      } else if (c == '.') {
        ++pos;
        last = seq.size();
        seq.push_back(chars({{0, kMaxCp}}));
      } else if (c == '(') {
        ++pos;
        const uint32_t r = new_rule(g.names_[owner], at);
        auto alts = parse_alternates(r, depth + 1);
        skip_space(true);
        if (peek() != ')') error(pos, "expected ')'");
        ++pos;
        g.rules_[r] = std::move(alts);
        Grammar::Elem e;
        e.kind = Grammar::Elem::Ref;
        e.rule = r;
        last = seq.size();
        seq.push_back(e);
      } else if (name_char(c)) {
        const std::string name = parse_name();
        Grammar::Elem e;
        e.kind = Grammar::Elem::Ref;
        e.rule = rule_id(name, at);
        last = seq.size();
        seq.push_back(e);
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (last == std::string::npos) error(at, std::string("'") + c + "' follows nothing");
        ++pos;
        long lo = 0, hi = -1;
        if (c == '+') lo = 1;
        if (c == '?') hi = 1;
        if (c == '{') {
          skip_space(false);
          lo = parse_int();
          skip_space(false);
          hi = lo;
          if (peek() == ',') {
            ++pos;
            skip_space(false);
            hi = peek() == '}' ? -1 : parse_int();
            skip_space(false);
          }
          if (peek() != '}') error(pos, "expected '}'");
          ++pos;
          if (hi >= 0 && hi < lo) error(at, "repetition {m,n} with n < m");
        }
        repeat(seq, last, lo, hi, owner, at);
        last = std::string::npos;
      } else {
        break;
      }
    }
    seq.push_back(Grammar::Elem{});
    return seq;
  }

  std::vector<Grammar::Alt> parse_alternates(uint32_t owner, int depth) {
    std::vector<Grammar::Alt> alts;
    alts.push_back(parse_sequence(owner, depth));
    for (;;) {
      skip_space(depth > 0);
      if (peek() != '|') break;
      ++pos;
      skip_space(true);
      alts.push_back(parse_sequence(owner, depth));
    }
    return alts;
  }

  void parse_all() {
    for (;;) {
      skip_space(true);
      if (at_end()) break;
      const size_t at = pos;
      const std::string name = parse_name();
      const uint32_t r = rule_id(name, at);
      if (defined_at[r] != std::string::npos) error(at, "rule '" + name + "' is defined twice");
      defined_at[r] = at;
      skip_space(false);
      if (src.substr(pos, 3) != "::=") error(pos, "expected '::=' after '" + name + "'");
      pos += 3;
      skip_space(true);
      g.rules_[r] = parse_alternates(r, 0);
      skip_space(false);
      if (!at_end() && peek() != '\n') error(pos, std::string("unexpected '") + peek() + "'");
    }
    for (size_t r = 0; r < g.rules_.size(); ++r)
      if (defined_at[r] == std::string::npos) error(first_ref[r], "undefined rule '" + g.names_[r] + "'");
    auto it = ids.find("root");
    if (it == ids.end()) error(0, "no 'root' rule");
    g.root_ = it->second;
  }

  /// Drops alternatives that derive no finite string; a root left without any is an error.
  void prune() {
    const size_t R = g.rules_.size();
    std::vector<bool> prod(R, false);
    const auto alt_ok = [&](const Grammar::Alt& a) {
      for (const auto& e : a) {
        if (e.kind == Grammar::Elem::Chars && e.ranges.empty()) return false;
        if (e.kind == Grammar::Elem::Ref && !prod[e.rule]) return false;
      }
      return true;
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < R; ++r)
        if (!prod[r] && std::any_of(g.rules_[r].begin(), g.rules_[r].end(), alt_ok)) prod[r] = changed = true;
    }
    if (!prod[g.root_])
      error(defined_at[g.root_], "rule 'root' can match nothing (it derives no finite string)");
    for (auto& alts : g.rules_) std::erase_if(alts, [&](const Grammar::Alt& a) { return !alt_ok(a); });
  }

  /// Refuses left recursion: a rule that reaches itself through leading nullable elements.
  void check_left_recursion() {
    const size_t R = g.rules_.size();
    std::vector<bool> nullable(R, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < R; ++r) {
        if (nullable[r]) continue;
        for (const auto& a : g.rules_[r])
          if (std::all_of(a.begin(), a.end(), [&](const Grammar::Elem& e) {
                return e.kind == Grammar::Elem::End || (e.kind == Grammar::Elem::Ref && nullable[e.rule]);
              })) {
            nullable[r] = changed = true;
            break;
          }
      }
    }
    std::vector<std::vector<uint32_t>> first(R);
    for (size_t r = 0; r < R; ++r)
      for (const auto& a : g.rules_[r])
        for (const auto& e : a) {
          if (e.kind != Grammar::Elem::Ref) break;
          first[r].push_back(e.rule);
          if (!nullable[e.rule]) break;
        }
    std::vector<uint8_t> color(R, 0);  // 0 new, 1 on the path, 2 done
    std::vector<uint32_t> path;
    std::function<void(uint32_t)> dfs = [&](uint32_t r) {
      color[r] = 1;
      path.push_back(r);
      for (uint32_t s : first[r]) {
        if (color[s] == 1) {
          std::string cyc;
          for (auto it = std::find(path.begin(), path.end(), s); it != path.end(); ++it)
            cyc += g.names_[*it] + " → ";
          error(defined_at[s],
                "left recursion (a rule reached again before any character): " + cyc + g.names_[s]);
        }
        if (color[s] == 0) dfs(s);
      }
      path.pop_back();
      color[r] = 2;
    };
    for (uint32_t r = 0; r < R; ++r)
      if (color[r] == 0) dfs(r);
  }
};

std::shared_ptr<const Grammar> Grammar::parse(std::string_view gbnf) {
  GrammarCompiler c;
  c.src = gbnf;
  c.parse_all();
  c.prune();
  c.check_left_recursion();
  return std::make_shared<const Grammar>(std::move(c.g));
}

// ---- recognizer ----

GrammarState::GrammarState(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  for (const auto& a : g_->rules()[g_->root()]) {
    Stack st;
    if (a[0].kind != Grammar::Elem::End) st.push_back(&a[0]);
    expand(st, stacks_);
  }
  std::sort(stacks_.begin(), stacks_.end());
  stacks_.erase(std::unique(stacks_.begin(), stacks_.end()), stacks_.end());
}

void GrammarState::expand(Stack& st, std::vector<Stack>& out) const {
  if (st.empty() || st.back()->kind == Grammar::Elem::Chars) {
    out.push_back(st);
    return;
  }
  const Grammar::Elem* top = st.back();  // a Ref
  st.pop_back();
  if ((top + 1)->kind != Grammar::Elem::End) st.push_back(top + 1);
  const auto& alts = g_->rules()[top->rule];
  for (size_t i = 0; i < alts.size(); ++i) {
    Stack s2 = st;
    if (alts[i][0].kind != Grammar::Elem::End) s2.push_back(&alts[i][0]);
    expand(s2, out);
  }
}

bool GrammarState::accept_cp(uint32_t cp, std::vector<Stack>& out) const {
  for (const auto& st : stacks_) {
    if (st.empty() || !st.back()->matches(cp)) continue;
    Stack s2(st.begin(), st.end() - 1);
    const Grammar::Elem* next = st.back() + 1;
    if (next->kind != Grammar::Elem::End) s2.push_back(next);
    expand(s2, out);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return !out.empty();
}

bool GrammarState::accept_byte(uint8_t b) {
  const auto feasible = [&](uint32_t partial, uint8_t need, uint32_t mn) {
    const uint32_t lo = std::max(partial << (6 * need), mn);
    const uint32_t hi = std::min(partial << (6 * need) | ((1u << (6 * need)) - 1), kMaxCp);
    if (lo > hi) return false;
    for (const auto& st : stacks_)
      if (!st.empty() && st.back()->intersects(lo, hi)) return true;
    return false;
  };
  uint32_t cp;
  if (need_ == 0) {
    if (b < 0x80) {
      cp = b;
    } else {
      uint32_t p, mn;
      uint8_t n;
      if (b >= 0xC2 && b <= 0xDF) {
        p = b & 0x1Fu, n = 1, mn = 0x80;
      } else if (b >= 0xE0 && b <= 0xEF) {
        p = b & 0x0Fu, n = 2, mn = 0x800;
      } else if (b >= 0xF0 && b <= 0xF4) {
        p = b & 0x07u, n = 3, mn = 0x10000;
      } else {
        return false;
      }
      if (!feasible(p, n, mn)) return false;
      partial_ = p, need_ = n, min_ = mn;
      return true;
    }
  } else {
    if ((b & 0xC0) != 0x80) return false;
    const uint32_t p = partial_ << 6 | (b & 0x3Fu);
    const auto n = static_cast<uint8_t>(need_ - 1);
    if (n > 0) {
      if (!feasible(p, n, min_)) return false;
      partial_ = p, need_ = n;
      return true;
    }
    if (p < min_ || p > kMaxCp || (p >= 0xD800 && p <= 0xDFFF)) return false;
    cp = p;
  }
  std::vector<Stack> out;
  if (!accept_cp(cp, out)) return false;
  stacks_ = std::move(out);
  need_ = 0;
  partial_ = 0;
  return true;
}

bool GrammarState::accept(std::string_view bytes) {
  GrammarState t = *this;
  for (char c : bytes)
    if (!t.accept_byte(static_cast<uint8_t>(c))) return false;
  *this = std::move(t);
  return true;
}

bool GrammarState::can_end() const noexcept {
  if (need_ != 0) return false;
  return std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

bool GrammarState::done() const noexcept {
  return need_ == 0 && std::all_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

// ---- token mask ----

TokenMasker::TokenMasker(const std::vector<std::string>& bytes, const std::vector<bool>& usable)
    : bytes_(bytes) {
  nodes_.emplace_back();
  for (size_t id = 0; id < bytes.size(); ++id) {
    if (bytes[id].empty() || (id < usable.size() && !usable[id])) continue;
    uint32_t n = 0;
    for (char c : bytes[id]) {
      const auto b = static_cast<uint8_t>(c);
      auto& kids = nodes_[n].kids;
      auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, uint32_t{0}),
                                 [](const auto& x, const auto& y) { return x.first < y.first; });
      if (it != kids.end() && it->first == b) {
        n = it->second;
      } else {
        const auto nn = static_cast<uint32_t>(nodes_.size());
        kids.insert(it, {b, nn});
        nodes_.emplace_back();
        n = nn;
      }
    }
    nodes_[n].ids.push_back(static_cast<uint32_t>(id));
  }
}

void TokenMasker::walk(uint32_t node, const GrammarState& st, std::vector<uint8_t>& out, size_t& n) const {
  for (const auto& [b, kid] : nodes_[node].kids) {
    const auto byte = b;  // clang 14 cannot capture a structured binding
    // cheap refusal of an ASCII byte no stack top takes, before copying the state
    if (st.need_ == 0 && byte < 0x80 &&
        std::none_of(st.stacks_.begin(), st.stacks_.end(),
                     [byte](const GrammarState::Stack& s) { return !s.empty() && s.back()->matches(byte); }))
      continue;
    GrammarState s2 = st;
    if (!s2.accept_byte(b)) continue;
    for (uint32_t id : nodes_[kid].ids) {
      out[id] = 1;
      ++n;
    }
    if (!nodes_[kid].kids.empty()) walk(kid, s2, out, n);
  }
}

size_t TokenMasker::allowed(const GrammarState& st, std::vector<uint8_t>& out) const {
  out.assign(bytes_.size(), 0);
  size_t n = 0;
  walk(0, st, out, n);
  return n;
}

}  // namespace cortiq::runtime
