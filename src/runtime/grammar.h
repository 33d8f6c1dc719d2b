// Grammar-constrained sampling: llama.cpp's GBNF as the input language, compiled into a pushdown
// recognizer over Unicode code points fed with UTF-8 bytes, and the per-step token mask.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cortiq::runtime {

/// A compiled GBNF grammar (llama.cpp's grammars/README.md dialect):
///   rule ::= alternatives; `|` alternation, juxtaposition sequences, `( … )` groups, postfix `*`
///   `+` `?` `{m}` `{m,}` `{m,n}`, "literals" and [char classes] (ranges `a-z`, negation `[^…]`,
///   escapes \n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH), `.` (any code point), rule names of
///   [A-Za-z0-9_-], `#` comments to the end of the line. A rule ends at a newline outside
///   parentheses (a line may go on after `|` or `::=`). The start rule is `root`.
/// Compilation rewrites repetitions into helper rules (x* → R ::= x R | ε), drops alternatives
/// that can derive no finite string, and refuses (Error(Parse), message "grammar: line L column C
/// (offset O): …"): syntax errors, undefined rules, a missing root, a root that can match nothing,
/// left recursion (a rule reachable from itself without consuming a character), duplicate rules,
/// repetition counts above 10000. Immutable after construction; shared by the jobs that use it.
class Grammar {
 public:
  /// Parses and checks `gbnf`. Throws Error(Parse) as above.
  static std::shared_ptr<const Grammar> parse(std::string_view gbnf);

  /// One sequence element: a character class (sorted, merged inclusive code point ranges; an
  /// empty list matches nothing), a reference to a rule, or the end of an alternative.
  struct Elem {
    enum Kind : uint8_t { Chars, Ref, End } kind = End;
    uint32_t rule = 0;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    bool matches(uint32_t cp) const noexcept;
    /// True when some code point in [lo, hi] matches.
    bool intersects(uint32_t lo, uint32_t hi) const noexcept;
  };
  using Alt = std::vector<Elem>;  ///< ends with an End element

  const std::vector<std::vector<Alt>>& rules() const noexcept { return rules_; }
  uint32_t root() const noexcept { return root_; }
  const std::string& rule_name(uint32_t r) const { return names_[r]; }

 private:
  friend struct GrammarCompiler;
  std::vector<std::vector<Alt>> rules_;
  std::vector<std::string> names_;
  uint32_t root_ = 0;
};

/// The live parses after some bytes: a set of stacks of grammar positions (each top a character
/// class, an empty stack = the grammar complete) plus a partial UTF-8 character. Cheap to copy for
/// the small grammars of structured output.
class GrammarState {
 public:
  explicit GrammarState(std::shared_ptr<const Grammar> g);
  /// Feeds one byte; false (state unchanged) when no live parse accepts it. Invalid UTF-8 is never
  /// accepted; a lead byte is accepted only when some parse accepts a code point it can start.
  bool accept_byte(uint8_t b);
  /// Feeds `bytes`; false (state unchanged) when some byte is refused.
  bool accept(std::string_view bytes);
  /// The grammar can end here (an empty stack and no partial UTF-8 character).
  bool can_end() const noexcept;
  /// No parse can take another byte (can_end() or dead).
  bool done() const noexcept;
  /// No live parse at all.
  bool dead() const noexcept { return stacks_.empty(); }

 private:
  using Stack = std::vector<const Grammar::Elem*>;
  void expand(Stack& st, std::vector<Stack>& out) const;
  bool accept_cp(uint32_t cp, std::vector<Stack>& out) const;
  std::shared_ptr<const Grammar> g_;
  std::vector<Stack> stacks_;
  uint32_t partial_ = 0;  ///< bits of the code point so far
  uint8_t need_ = 0;      ///< continuation bytes still to come
  uint32_t min_ = 0;      ///< smallest code point the lead byte allows (overlong check)
  friend class TokenMasker;
};

/// The vocabulary as a byte trie, built once per tokenizer: `allowed` walks it from a grammar
/// state, so tokens sharing a prefix share the work.
class TokenMasker {
 public:
  /// `bytes[id]`: what token id adds to the text (Tokenizer::token_bytes); `usable[id]` false for
  /// ids that never match a grammar (special/control tokens). Empty byte strings are never allowed.
  TokenMasker(const std::vector<std::string>& bytes, const std::vector<bool>& usable);
  /// Sets out[id] = 1 for every usable id whose whole byte string the state accepts, 0 otherwise
  /// (out is resized to the vocabulary). Returns the number allowed.
  size_t allowed(const GrammarState& st, std::vector<uint8_t>& out) const;
  const std::string& bytes(uint32_t id) const { return bytes_[id]; }
  size_t vocab() const noexcept { return bytes_.size(); }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, uint32_t>> kids;  ///< byte → node, ascending
    std::vector<uint32_t> ids;                       ///< tokens ending here
  };
  void walk(uint32_t node, const GrammarState& st, std::vector<uint8_t>& out, size_t& n) const;
  std::vector<Node> nodes_;
  std::vector<std::string> bytes_;
};

}  // namespace cortiq::runtime
