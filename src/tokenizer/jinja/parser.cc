// Lexer and parser of the Jinja2 subset used by chat templates.
//
// Lexing follows jinja2/lexer.py (3.1) as transformers configures it: newlines normalised to "\n",
// one trailing newline of the source dropped (keep_trailing_newline=False), `{%-`/`-%}` strip all
// whitespace, trim_blocks removes the first "\n" after a block/comment tag, lstrip_blocks removes
// spaces/tabs between the start of a line and a block/comment tag, `+` disables both. Grammar and
// operator precedence follow jinja2/parser.py (filters bind tighter than binary operators, `**` is
// left-associative, chained comparisons, `x if c` without else yields Undefined).
#include <algorithm>
#include <cstring>
#include <set>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/jinja.h"

namespace cortiq::jinja {

namespace {

enum class TT : uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Tok {
  TT type;
  std::string val;
  size_t off;  // offset into normalised source
  int64_t ival = 0;
  double fval = 0;
};

bool is_ws(char32_t c) {
  return py_isspace(c);
}

/// Python str.rstrip() on UTF-8 text.
std::string rstrip_ws(const std::string& s) {
  std::u32string u = utf8_decode(s);
  size_t e = u.size();
  while (e > 0 && is_ws(u[e - 1])) --e;
  return utf8_encode(std::u32string_view(u).substr(0, e));
}

/// Length of the leading Unicode whitespace run of src at pos (bytes).
size_t ws_run(const std::string& src, size_t pos) {
  size_t p = pos;
  while (p < src.size()) {
    unsigned char c = static_cast<unsigned char>(src[p]);
    if (c < 0x80) {
      if (!is_ws(c)) break;
      ++p;
      continue;
    }
    size_t n = (c >= 0xF0) ? 4 : (c >= 0xE0) ? 3 : 2;
    std::u32string u = utf8_decode(std::string_view(src).substr(p, n));
    if (u.size() != 1 || !is_ws(u[0])) break;
    p += n;
  }
  return p - pos;
}

class Lexer {
 public:
  explicit Lexer(std::string_view raw) {
    // Newline normalisation and trailing-newline removal (jinja2 Lexer.tokeniter).
    src_.reserve(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\r') {
        src_.push_back('\n');
        if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
      } else {
        src_.push_back(raw[i]);
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  const std::string& source() const { return src_; }

  void position(size_t off, int* line, int* col) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off);
    size_t li = static_cast<size_t>(it - line_starts_.begin()) - 1;
    *line = static_cast<int>(li) + 1;
    *col = static_cast<int>(
               utf8_length(std::string_view(src_).substr(line_starts_[li], off - line_starts_[li]))) +
           1;
  }

  [[noreturn]] void error(size_t off, TplErrorKind k, const std::string& msg) const {
    int line, col;
    position(off, &line, &col);
    throw TemplateError(k, msg, line, col);
  }

  std::vector<Tok> run() {
    std::vector<Tok> toks;
    size_t pos = 0;
    bool line_starting = true;
    const std::string& s = src_;
    while (pos < s.size()) {
      size_t found = std::string::npos;
      for (size_t p = s.find('{', pos); p != std::string::npos; p = s.find('{', p + 1)) {
        if (p + 1 < s.size() && (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#')) {
          found = p;
          break;
        }
      }
      if (found == std::string::npos) {
        toks.push_back({TT::Data, s.substr(pos), pos});
        break;
      }
      char kind = s[found + 1];
      char sign = found + 2 < s.size() ? s[found + 2] : '\0';
      if (sign != '-' && sign != '+') sign = '\0';
      std::string text = s.substr(pos, found - pos);
      // raw block?
      bool is_raw = false;
      size_t raw_body = 0;
      if (kind == '%') {
        size_t q = found + 2 + (sign ? 1 : 0);
        q += ws_run(s, q);
        if (s.compare(q, 3, "raw") == 0) {
          size_t r = q + 3;
          size_t w = ws_run(s, r);
          r += w;
          if (s.compare(r, 3, "-%}") == 0) {
            is_raw = true;
            raw_body = r + 3 + ws_run(s, r + 3);
          } else if (s.compare(r, 2, "%}") == 0) {
            is_raw = true;
            raw_body = r + 2;
          }
        }
      }
      text = apply_lstrip(text, sign, kind != '{', line_starting);
      if (!text.empty()) toks.push_back({TT::Data, text, pos});
      line_starting = false;
      if (is_raw) {
        pos = lex_raw(found, raw_body, toks, &line_starting);
        continue;
      }
      size_t start = found + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        size_t e = s.find("#}", start);
        if (e == std::string::npos) error(found, TplErrorKind::Syntax, "Missing end of comment tag");
        char esign = e > start ? s[e - 1] : '\0';
        pos = e + 2;
        if (esign == '-') {
          pos += ws_run(s, pos);
        } else if (esign != '+' && pos < s.size() && s[pos] == '\n') {
          ++pos;
        }
        line_starting = pos > e + 2 && s[pos - 1] == '\n';
        continue;
      }
      toks.push_back({kind == '{' ? TT::VarBegin : TT::BlockBegin, "", found});
      pos = lex_tag(start, kind == '{', toks, &line_starting);
    }
    toks.push_back({TT::Eof, "", s.size()});
    return toks;
  }

 private:
  std::string apply_lstrip(const std::string& text, char sign, bool block_or_comment, bool line_starting) {
    if (sign == '-') return rstrip_ws(text);
    if (sign == '+' || !block_or_comment) return text;
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return text;
    if (l_pos == text.size()) return text;
    if (ws_run(text, l_pos) == text.size() - l_pos) return text.substr(0, l_pos);
    return text;
  }

  size_t lex_raw(size_t tag_off, size_t body, std::vector<Tok>& toks, bool* line_starting) {
    const std::string& s = src_;
    for (size_t p = s.find("{%", body); p != std::string::npos; p = s.find("{%", p + 1)) {
      size_t q = p + 2;
      char sign = (q < s.size() && (s[q] == '-' || s[q] == '+')) ? s[q] : '\0';
      if (sign) ++q;
      q += ws_run(s, q);
      if (s.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      q += ws_run(s, q);
      size_t end;
      if (s.compare(q, 3, "+%}") == 0) {
        end = q + 3;
      } else if (s.compare(q, 3, "-%}") == 0) {
        end = q + 3 + ws_run(s, q + 3);
      } else if (s.compare(q, 2, "%}") == 0) {
        end = q + 2;
        if (end < s.size() && s[end] == '\n') ++end;
      } else {
        continue;
      }
      bool ls = body > 0 && s[body - 1] == '\n';
      std::string text = apply_lstrip(s.substr(body, p - body), sign, true, ls);
      if (!text.empty()) toks.push_back({TT::Data, text, body});
      *line_starting = end > 0 && s[end - 1] == '\n';
      return end;
    }
    error(tag_off, TplErrorKind::Syntax, "Missing end of raw directive");
  }

  size_t lex_tag(size_t pos, bool var, std::vector<Tok>& toks, bool* line_starting) {
    const std::string& s = src_;
    std::vector<char> balance;
    while (true) {
      pos += ws_run(s, pos);
      if (pos >= s.size())
        error(pos, TplErrorKind::Syntax,
              var ? "unexpected end of template, expected 'end of print statement'"
                  : "unexpected end of template, expected 'end of statement block'");
      if (balance.empty()) {
        if (var) {
          if (s.compare(pos, 3, "-}}") == 0) {
            toks.push_back({TT::VarEnd, "", pos});
            pos += 3;
            pos += ws_run(s, pos);
            *line_starting = s[pos - 1] == '\n';
            return pos;
          }
          if (s.compare(pos, 2, "}}") == 0) {
            toks.push_back({TT::VarEnd, "", pos});
            *line_starting = false;
            return pos + 2;
          }
        } else {
          if (s.compare(pos, 3, "+%}") == 0) {
            toks.push_back({TT::BlockEnd, "", pos});
            *line_starting = false;
            return pos + 3;
          }
          if (s.compare(pos, 3, "-%}") == 0) {
            toks.push_back({TT::BlockEnd, "", pos});
            size_t e = pos + 3;
            e += ws_run(s, e);
            *line_starting = s[e - 1] == '\n';
            return e;
          }
          if (s.compare(pos, 2, "%}") == 0) {
            toks.push_back({TT::BlockEnd, "", pos});
            size_t e = pos + 2;
            if (e < s.size() && s[e] == '\n') ++e;
            *line_starting = s[e - 1] == '\n';
            return e;
          }
        }
      }
      char c = s[pos];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos;
        while (e < s.size() && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
        toks.push_back({TT::Name, s.substr(pos, e - pos), pos});
        pos = e;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        pos = lex_number(pos, toks);
        continue;
      }
      if (c == '\'' || c == '"') {
        pos = lex_string(pos, toks);
        continue;
      }
      static const char* ops2[] = {"//", "**", "==", "!=", "<=", ">="};
      bool matched = false;
      for (const char* o : ops2) {
        if (s.compare(pos, 2, o) == 0) {
          toks.push_back({TT::Op, o, pos});
          pos += 2;
          matched = true;
          break;
        }
      }
      if (matched) continue;
      if (std::strchr("+-/*%~[](){}<>=.:|,;", c) && c != '\0') {
        if (c == '(' || c == '[' || c == '{') {
          balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
        } else if (c == ')' || c == ']' || c == '}') {
          if (balance.empty()) error(pos, TplErrorKind::Syntax, fmt::format("unexpected '{}'", c));
          if (balance.back() != c)
            error(pos, TplErrorKind::Syntax,
                  fmt::format("unexpected '{}', expected '{}'", c, balance.back()));
          balance.pop_back();
        }
        toks.push_back({TT::Op, std::string(1, c), pos});
        ++pos;
        continue;
      }
      error(pos, TplErrorKind::Syntax, fmt::format("unexpected char '{}'", c));
    }
  }

  size_t lex_number(size_t pos, std::vector<Tok>& toks) {
    const std::string& s = src_;
    auto digits = [&](size_t p) {
      size_t e = p;
      while (e < s.size() && (std::isdigit(static_cast<unsigned char>(s[e])) || (s[e] == '_' && e > p))) ++e;
      return e;
    };
    size_t e = digits(pos);
    bool is_float = false;
    bool after_dot = pos > 0 && s[pos - 1] == '.';
    if (!after_dot && e + 1 < s.size() && s[e] == '.' && std::isdigit(static_cast<unsigned char>(s[e + 1]))) {
      e = digits(e + 1);
      is_float = true;
    }
    if (!after_dot && e < s.size() && (s[e] == 'e' || s[e] == 'E')) {
      size_t q = e + 1;
      if (q < s.size() && (s[q] == '+' || s[q] == '-')) ++q;
      if (q < s.size() && std::isdigit(static_cast<unsigned char>(s[q]))) {
        e = digits(q);
        is_float = true;
      }
    }
    std::string txt;
    for (size_t k = pos; k < e; ++k)
      if (s[k] != '_') txt.push_back(s[k]);
    Tok t{is_float ? TT::Float : TT::Int, txt, pos};
    try {
      if (is_float)
        t.fval = std::stod(txt);
      else
        t.ival = std::stoll(txt);
    } catch (const std::exception&) {
      error(pos, TplErrorKind::Unsupported, "integer literal out of the 64-bit range: " + txt);
    }
    toks.push_back(t);
    return e;
  }

  size_t lex_string(size_t pos, std::vector<Tok>& toks) {
    const std::string& s = src_;
    char q = s[pos];
    std::string out;
    size_t p = pos + 1;
    while (true) {
      if (p >= s.size()) error(pos, TplErrorKind::Syntax, "unexpected char '" + std::string(1, q) + "'");
      char c = s[p];
      if (c == q) break;
      if (c != '\\') {
        out.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= s.size()) error(pos, TplErrorKind::Syntax, "unterminated string");
      char e = s[p + 1];
      p += 2;
      auto hex = [&](int n) {
        if (p + static_cast<size_t>(n) > s.size())
          error(pos, TplErrorKind::Syntax, "truncated \\x/\\u escape");
        uint32_t v = 0;
        for (int k = 0; k < n; ++k) {
          char h = s[p + static_cast<size_t>(k)];
          if (!std::isxdigit(static_cast<unsigned char>(h)))
            error(pos, TplErrorKind::Syntax, "truncated \\x/\\u escape");
          v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                 ? h - '0'
                                                 : (std::tolower(h) - 'a' + 10));
        }
        p += static_cast<size_t>(n);
        return static_cast<char32_t>(v);
      };
      switch (e) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case '\n':
          break;  // line continuation
        case 'x':
          utf8_append(out, hex(2));
          break;
        case 'u':
          utf8_append(out, hex(4));
          break;
        case 'U':
          utf8_append(out, hex(8));
          break;
        case 'N':
          error(p - 2, TplErrorKind::Unsupported, "\\N{...} escapes in string literals are not supported");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && p < s.size() && s[p] >= '0' && s[p] <= '7'; ++k, ++p)
              v = v * 8 + static_cast<uint32_t>(s[p] - '0');
            utf8_append(out, v);
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    toks.push_back({TT::String, out, pos});
    return p + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
};

// ---- parser -------------------------------------------------------------------------------------

const std::set<std::string, std::less<>> kUnsupportedTags = {
    "block",      "extends", "include",   "import",   "from",
    "autoescape", "trans",   "pluralize", "endblock", "endautoescape"};

class Parser {
 public:
  Parser(const Lexer& lx, std::vector<Tok> toks) : lx_(lx), t_(std::move(toks)) {}

  Body parse_all() {
    std::string end;
    Body b = subparse({}, &end);
    if (cur().type != TT::Eof) fail_at(cur(), "unexpected tag");
    return b;
  }

 private:
  const Tok& cur() const { return t_[p_]; }
  const Tok& peek(size_t n = 1) const { return t_[std::min(p_ + n, t_.size() - 1)]; }
  void next() {
    if (p_ + 1 < t_.size()) ++p_;
  }

  [[noreturn]] void fail_at(const Tok& t, const std::string& msg,
                            TplErrorKind k = TplErrorKind::Syntax) const {
    lx_.error(t.off, k, msg);
  }
  static std::string describe(const Tok& t) {
    switch (t.type) {
      case TT::Eof:
        return "end of template";
      case TT::BlockEnd:
        return "end of statement block";
      case TT::VarEnd:
        return "end of print statement";
      case TT::Name:
        return "'" + t.val + "'";
      case TT::Op:
        return "'" + t.val + "'";
      default:
        return "'" + t.val + "'";
    }
  }
  bool is_op(const char* o) const { return cur().type == TT::Op && cur().val == o; }
  bool is_name(const char* n) const { return cur().type == TT::Name && cur().val == n; }
  void expect_op(const char* o) {
    if (!is_op(o)) fail_at(cur(), fmt::format("expected token '{}', got {}", o, describe(cur())));
    next();
  }
  void expect_name(const char* n) {
    if (!is_name(n)) fail_at(cur(), fmt::format("expected token '{}', got {}", n, describe(cur())));
    next();
  }
  std::string expect_ident() {
    if (cur().type != TT::Name) fail_at(cur(), fmt::format("expected name, got {}", describe(cur())));
    std::string v = cur().val;
    next();
    return v;
  }
  void expect_block_end() {
    if (cur().type != TT::BlockEnd)
      fail_at(cur(), fmt::format("expected token 'end of statement block', got {}", describe(cur())));
    next();
  }

  ExprPtr mk(EK k, const Tok& at) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    lx_.position(at.off, &e->line, &e->col);
    return e;
  }
  StmtPtr mks(SK k, const Tok& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    lx_.position(at.off, &s->line, &s->col);
    return s;
  }

  /// Parses statements until a block tag whose name is in `ends` (left unconsumed, name in *end).
  Body subparse(const std::vector<std::string>& ends, std::string* end) {
    const Nest nest(*this, cur());
    Body body;
    while (true) {
      const Tok& t = cur();
      if (t.type == TT::Eof) {
        if (!ends.empty())
          fail_at(t,
                  fmt::format("Unexpected end of template. Jinja was looking for the following tags: '{}'.",
                              fmt::join(ends, "' or '")));
        return body;
      }
      if (t.type == TT::Data) {
        auto s = mks(SK::Text, t);
        s->text = t.val;
        body.push_back(std::move(s));
        next();
      } else if (t.type == TT::VarBegin) {
        auto s = mks(SK::Output, t);
        next();
        s->expr = parse_tuple(true);
        if (cur().type != TT::VarEnd)
          fail_at(cur(), fmt::format("expected token 'end of print statement', got {}", describe(cur())));
        next();
        body.push_back(std::move(s));
      } else if (t.type == TT::BlockBegin) {
        const Tok& nm = peek();
        if (nm.type == TT::Name && std::find(ends.begin(), ends.end(), nm.val) != ends.end()) {
          next();
          *end = nm.val;
          return body;
        }
        next();
        body.push_back(parse_statement());
      } else {
        fail_at(t, "unexpected token " + describe(t));
      }
    }
  }

  StmtPtr parse_statement() {
    const Tok& t = cur();
    if (t.type != TT::Name) fail_at(t, "tag name expected");
    std::string n = t.val;
    if (n == "if") return parse_if();
    if (n == "for") return parse_for();
    if (n == "set") return parse_set();
    if (n == "macro") return parse_macro();
    if (n == "call") return parse_call_block();
    if (n == "filter") return parse_filter_block();
    if (n == "with") return parse_with();
    if (n == "generation") {
      auto s = mks(SK::Generation, t);
      next();
      expect_block_end();
      std::string end;
      s->body = subparse({"endgeneration"}, &end);
      next();
      expect_block_end();
      return s;
    }
    if (n == "break" || n == "continue") {
      auto s = mks(n == "break" ? SK::Break : SK::Continue, t);
      next();
      if (loop_depth_ == 0) fail_at(t, "'" + n + "' outside of a loop");
      expect_block_end();
      return s;
    }
    if (kUnsupportedTags.count(n))
      fail_at(t, fmt::format("the '{}' tag is not supported by this chat-template engine", n),
              TplErrorKind::Unsupported);
    fail_at(t, fmt::format("Encountered unknown tag '{}'.", n));
  }

  StmtPtr parse_if() {
    auto s = mks(SK::If, cur());
    next();
    while (true) {
      s->conds.push_back(parse_tuple(false));
      expect_block_end();
      std::string end;
      s->bodies.push_back(subparse({"elif", "else", "endif"}, &end));
      next();
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end();
        s->else_body = subparse({"endif"}, &end);
        next();
      }
      expect_block_end();
      return s;
    }
  }

  Target parse_target(bool allow_tuple, bool allow_ns) {
    Target tg;
    tg.names.push_back(expect_ident());
    if (allow_ns && is_op(".")) {
      next();
      tg.attr = expect_ident();
      return tg;
    }
    while (allow_tuple && is_op(",")) {
      tg.tuple = true;
      next();
      if (cur().type != TT::Name || is_name("in")) break;
      tg.names.push_back(expect_ident());
    }
    return tg;
  }

  StmtPtr parse_for() {
    auto s = mks(SK::For, cur());
    next();
    bool paren = is_op("(");
    if (paren) next();
    s->target = parse_target(true, false);
    if (paren) expect_op(")");
    expect_name("in");
    s->expr = parse_tuple(false, "recursive");
    if (is_name("if")) {
      next();
      s->cond = parse_expression(true);
    }
    if (is_name("recursive"))
      fail_at(cur(), "recursive for loops are not supported", TplErrorKind::Unsupported);
    expect_block_end();
    std::string end;
    ++loop_depth_;
    s->body = subparse({"endfor", "else"}, &end);
    --loop_depth_;
    next();
    if (end == "else") {
      expect_block_end();
      int saved = loop_depth_;
      loop_depth_ = 0;
      s->else_body = subparse({"endfor"}, &end);
      loop_depth_ = saved;
      next();
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set() {
    const Tok& at = cur();
    next();
    Target tg = parse_target(true, true);
    if (is_op("=")) {
      auto s = mks(SK::Set, at);
      s->target = tg;
      next();
      s->expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    auto s = mks(SK::SetBlock, at);
    s->target = tg;
    if (is_op("|")) s->expr = parse_filter(nullptr);
    expect_block_end();
    std::string end;
    s->body = subparse({"endset"}, &end);
    next();
    expect_block_end();
    return s;
  }

  void parse_params(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      if (is_op(")")) break;
      s.params.push_back(expect_ident());
      if (is_op("=")) {
        next();
        s.defaults.push_back(parse_expression(true));
      } else {
        s.defaults.push_back(nullptr);
      }
    }
    next();
  }

  StmtPtr parse_macro() {
    auto s = mks(SK::Macro, cur());
    next();
    s->text = expect_ident();
    parse_params(*s);
    expect_block_end();
    std::string end;
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = subparse({"endmacro"}, &end);
    loop_depth_ = saved;
    next();
    if (cur().type == TT::Name) next();  // optional macro name after endmacro
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = mks(SK::CallBlock, cur());
    next();
    if (is_op("(")) parse_params(*s);
    const Tok& at = cur();
    s->expr = parse_expression(true);
    if (s->expr->kind != EK::Call) fail_at(at, "expected call");
    expect_block_end();
    std::string end;
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = subparse({"endcall"}, &end);
    loop_depth_ = saved;
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = mks(SK::FilterBlock, cur());
    next();
    s->expr = parse_filter(nullptr, true);
    expect_block_end();
    std::string end;
    s->body = subparse({"endfilter"}, &end);
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_with() {
    auto s = mks(SK::With, cur());
    next();
    while (cur().type != TT::BlockEnd) {
      if (!s->with_vars.empty()) expect_op(",");
      Target tg = parse_target(false, false);
      expect_op("=");
      s->with_vars.emplace_back(tg, parse_expression(true));
    }
    expect_block_end();
    std::string end;
    s->body = subparse({"endwith"}, &end);
    next();
    expect_block_end();
    return s;
  }

  // ---- expressions ----

  ExprPtr parse_tuple(bool with_condexpr, const char* extra_end = nullptr) {
    const Tok& at = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) {
        if (!is_op(",")) break;
        is_tuple = true;
        next();
      }
      if (cur().type == TT::BlockEnd || cur().type == TT::VarEnd || is_op(")") ||
          (extra_end && is_name(extra_end)) || is_name("if"))
        break;
      items.push_back(parse_expression(with_condexpr));
    }
    if (!is_tuple) {
      if (items.empty()) fail_at(cur(), fmt::format("Expected an expression, got {}", describe(cur())));
      return std::move(items[0]);
    }
    auto e = mk(EK::Tuple, at);
    e->items = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    ExprPtr e1 = parse_or();
    while (is_name("if")) {
      const Tok& at = cur();
      next();
      ExprPtr e2 = parse_or();
      ExprPtr e3;
      if (is_name("else")) {
        next();
        e3 = parse_condexpr();
      }
      auto c = mk(EK::Cond, at);
      c->a = std::move(e2);
      c->b = std::move(e1);
      c->c = std::move(e3);
      e1 = std::move(c);
    }
    return e1;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      auto e = mk(EK::Or, cur());
      next();
      e->a = std::move(l);
      e->b = parse_and();
      l = std::move(e);
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      auto e = mk(EK::And, cur());
      next();
      e->a = std::move(l);
      e->b = parse_not();
      l = std::move(e);
    }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      auto e = mk(EK::Not, cur());
      next();
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const Tok& at = cur();
    ExprPtr l = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> rhs;
    while (true) {
      if (cur().type == TT::Op && (cur().val == "==" || cur().val == "!=" || cur().val == "<" ||
                                   cur().val == ">" || cur().val == "<=" || cur().val == ">=")) {
        ops.push_back(cur().val);
        next();
      } else if (is_name("in")) {
        ops.push_back("in");
        next();
      } else if (is_name("not") && peek().type == TT::Name && peek().val == "in") {
        ops.push_back("notin");
        next();
        next();
      } else {
        break;
      }
      rhs.push_back(parse_math1());
    }
    if (ops.empty()) return l;
    auto e = mk(EK::Compare, at);
    e->a = std::move(l);
    e->cmp_ops = std::move(ops);
    e->items = std::move(rhs);
    return e;
  }
  ExprPtr binary(ExprPtr l, const std::string& op, ExprPtr r, const Tok& at) {
    auto e = mk(EK::Binary, at);
    e->name = op;
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      Tok at = cur();
      next();
      l = binary(std::move(l), at.val, parse_concat(), at);
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      Tok at = cur();
      next();
      l = binary(std::move(l), "~", parse_math2(), at);
    }
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      Tok at = cur();
      next();
      l = binary(std::move(l), at.val, parse_pow(), at);
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      Tok at = cur();
      next();
      l = binary(std::move(l), "**", parse_unary(true), at);
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    const Nest nest(*this, cur());
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      auto e = mk(is_op("-") ? EK::Neg : EK::Pos, cur());
      next();
      e->a = parse_unary(false);
      node = std::move(e);
    } else {
      node = parse_postfix(parse_primary());
    }
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Tok& t = cur();
    if (t.type == TT::Name) {
      if (t.val == "true" || t.val == "True" || t.val == "false" || t.val == "False") {
        auto e = mk(EK::Const, t);
        e->value = Value::boolean(t.val[0] == 't' || t.val[0] == 'T');
        next();
        return e;
      }
      if (t.val == "none" || t.val == "None") {
        auto e = mk(EK::Const, t);
        e->value = Value::none();
        next();
        return e;
      }
      auto e = mk(EK::Name, t);
      e->name = t.val;
      next();
      return e;
    }
    if (t.type == TT::String) {
      auto e = mk(EK::Const, t);
      std::string s;
      while (cur().type == TT::String) {
        s += cur().val;
        next();
      }
      e->value = Value::string(std::move(s));
      return e;
    }
    if (t.type == TT::Int || t.type == TT::Float) {
      auto e = mk(EK::Const, t);
      e->value = t.type == TT::Int ? Value::integer(t.ival) : Value::number(t.fval);
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) {
        auto e = mk(EK::Tuple, t);
        next();
        return e;
      }
      ExprPtr inner = parse_tuple(true);
      expect_op(")");
      if (inner->kind == EK::Tuple) lx_.position(t.off, &inner->line, &inner->col);
      return inner;
    }
    if (is_op("[")) {
      auto e = mk(EK::List, t);
      next();
      while (!is_op("]")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("]")) break;
        e->items.push_back(parse_expression(true));
      }
      next();
      return e;
    }
    if (is_op("{")) {
      auto e = mk(EK::Dict, t);
      next();
      while (!is_op("}")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("}")) break;
        e->items.push_back(parse_expression(true));
        expect_op(":");
        e->items2.push_back(parse_expression(true));
      }
      next();
      return e;
    }
    fail_at(t, fmt::format("unexpected {}", describe(t)));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        Tok at = cur();
        next();
        if (cur().type == TT::Name) {
          auto e = mk(EK::GetAttr, at);
          e->name = cur().val;
          e->a = std::move(node);
          next();
          node = std::move(e);
        } else if (cur().type == TT::Int) {
          auto e = mk(EK::GetItem, at);
          e->a = std::move(node);
          e->b = mk(EK::Const, cur());
          e->b->value = Value::integer(cur().ival);
          next();
          node = std::move(e);
        } else {
          fail_at(cur(), "expected name or number");
        }
      } else if (is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    Tok at = cur();
    next();
    ExprPtr parts[3];
    int colons = 0;
    bool slice = false;
    while (!is_op("]")) {
      if (is_op(":")) {
        slice = true;
        ++colons;
        if (colons > 2) fail_at(cur(), "unexpected ':'");
        next();
        continue;
      }
      if (is_op(",")) fail_at(cur(), "tuple subscripts are not supported", TplErrorKind::Unsupported);
      if (parts[colons]) fail_at(cur(), fmt::format("expected token ']', got {}", describe(cur())));
      parts[colons] = parse_expression(true);
    }
    next();
    if (!slice) {
      if (!parts[0]) fail_at(at, "expected subscript expression");
      auto e = mk(EK::GetItem, at);
      e->a = std::move(node);
      e->b = std::move(parts[0]);
      return e;
    }
    auto e = mk(EK::Slice, at);
    e->items.push_back(std::move(node));
    for (auto& p : parts) e->items.push_back(std::move(p));
    return e;
  }

  void parse_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**"))
        fail_at(cur(), "*args / **kwargs in calls are not supported", TplErrorKind::Unsupported);
      if (cur().type == TT::Name && peek().type == TT::Op && peek().val == "=") {
        std::string k = cur().val;
        next();
        next();
        e.kw.emplace_back(k, parse_expression(true));
      } else {
        if (!e.kw.empty()) fail_at(cur(), "positional argument follows keyword argument");
        e.items.push_back(parse_expression(true));
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = mk(EK::Call, cur());
    e->a = std::move(node);
    parse_args(*e);
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  /// `|name(args)|name2...`; with `start_inline` the first `|` is absent (filter blocks).
  ExprPtr parse_filter(ExprPtr node, bool start_inline = false) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      Tok at = cur();
      std::string name = expect_ident();
      while (is_op(".")) {
        next();
        name.push_back('.');
        name += expect_ident();
      }
      auto e = mk(EK::Filter, at);
      e->name = name;
      bool known = false;
      e->builtin = find_filter(name, &known);
      if (e->builtin < 0) {
        if (known)
          fail_at(at, fmt::format("filter '{}' is not supported by this chat-template engine", name),
                  TplErrorKind::Unsupported);
        fail_at(at, fmt::format("No filter named '{}'.", name));
      }
      e->a = std::move(node);
      if (is_op("(")) parse_args(*e);
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    Tok at = cur();
    next();  // is
    bool neg = false;
    if (is_name("not")) {
      neg = true;
      next();
    }
    std::string name = expect_ident();
    while (is_op(".")) {
      next();
      name.push_back('.');
      name += expect_ident();
    }
    auto e = mk(EK::Test, at);
    e->name = name;
    e->negated = neg;
    bool known = false;
    e->builtin = find_test(name, &known);
    if (e->builtin < 0) {
      if (known)
        fail_at(at, fmt::format("test '{}' is not supported by this chat-template engine", name),
                TplErrorKind::Unsupported);
      fail_at(at, fmt::format("No test named '{}'.", name));
    }
    e->a = std::move(node);
    if (is_op("(")) {
      parse_args(*e);
    } else if ((cur().type == TT::Name || cur().type == TT::String || cur().type == TT::Int ||
                cur().type == TT::Float || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_at(cur(), "You cannot chain multiple tests with is");
      e->items.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  const Lexer& lx_;
  std::vector<Tok> t_;
  size_t p_ = 0;
  int loop_depth_ = 0;
  int nest_ = 0;  ///< expressions and blocks being parsed (bounded by kMaxSyntaxDepth)

  /// Counts one level of nesting for its lifetime; the parser (and later the interpreter) recurse
  /// once per level, so a template nested deeper than kMaxSyntaxDepth is refused at `t`.
  struct Nest {
    Parser& p;
    Nest(Parser& parser, const Tok& t) : p(parser) {
      if (++p.nest_ > kMaxSyntaxDepth) {
        --p.nest_;
        p.fail_at(t, fmt::format("expressions or blocks nested deeper than {} levels", kMaxSyntaxDepth));
      }
    }
    ~Nest() { --p.nest_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
  };
};

}  // namespace

Body parse_template(std::string_view source) {
  Lexer lx(source);
  std::vector<Tok> toks = lx.run();
  Parser p(lx, std::move(toks));
  return p.parse_all();
}

}  // namespace cortiq::jinja
