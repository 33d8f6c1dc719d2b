// GBNF parsing, the recognizer, the token mask and JSON Schema → GBNF. The recognizer is checked
// against strings whose membership is known by construction; schema grammars against
// nlohmann::json's parser (an independent JSON reader) and hand-checked members and non-members.
#include "runtime/grammar.h"

#include <gtest/gtest.h>

#include "runtime/json_schema.h"
#include "util/error.h"

namespace cortiq::runtime {
namespace {

bool matches(const std::shared_ptr<const Grammar>& g, std::string_view s) {
  GrammarState st(g);
  return st.accept(s) && st.can_end();
}

std::string parse_error(std::string_view gbnf) {
  try {
    Grammar::parse(gbnf);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Parse);
    return e.message();
  }
  return "(accepted)";
}

TEST(Grammar, OperatorsClassesEscapesAndComments) {
  const auto g = Grammar::parse(
      "# a comment line\n"
      "root ::= greet ( \" \" name )+ tail? num{2,3} [^a-z\\n] \"\\u00e9\"  # trailing comment\n"
      "greet ::= \"hi\" | \"yo\\\"\"\n"
      "name ::= [a-c]* \n"
      "tail ::= \"!\"\n"
      "num ::= [0-9]\n");
  EXPECT_TRUE(matches(g, "hi ab c12X\xc3\xa9"));
  EXPECT_TRUE(matches(g, "yo\" a!123Z\xc3\xa9"));
  EXPECT_TRUE(matches(g, "hi  !99#\xc3\xa9"));      // empty name
  EXPECT_FALSE(matches(g, "hi ab 12x\xc3\xa9"));    // negated class refuses x
  EXPECT_FALSE(matches(g, "hi ab 1X\xc3\xa9"));     // {2,3}: one digit is too few
  EXPECT_FALSE(matches(g, "hi ab 1234X\xc3\xa9"));  // four too many
  EXPECT_FALSE(matches(g, "hiab 12X\xc3\xa9"));     // + needs one
  EXPECT_FALSE(matches(g, "hi ab 12X"));            // incomplete: cannot end
  GrammarState st(g);
  EXPECT_FALSE(st.accept("ho"));
  EXPECT_TRUE(st.accept("hi"));  // a refused byte left the state as it was
}

TEST(Grammar, Utf8BytesOneAtATime) {
  const auto g = Grammar::parse("root ::= [\\u00e0-\\u00ff] \"\\U0001F600\"");
  GrammarState st(g);
  EXPECT_FALSE(st.accept_byte(0xE2));  // a 3-byte lead cannot start U+00E0..U+00FF
  EXPECT_FALSE(st.accept_byte(0x80));  // a stray continuation byte
  EXPECT_TRUE(st.accept_byte(0xC3));
  EXPECT_FALSE(st.can_end());
  EXPECT_FALSE(st.accept_byte(0x41));  // not a continuation byte
  EXPECT_TRUE(st.accept_byte(0xA9));   // é
  EXPECT_TRUE(st.accept("\xF0\x9F\x98"));
  EXPECT_FALSE(st.can_end());
  EXPECT_FALSE(st.accept_byte(0x81));  // U+1F601
  EXPECT_TRUE(st.accept_byte(0x80));
  EXPECT_TRUE(st.can_end());
  EXPECT_TRUE(st.done());
  EXPECT_FALSE(matches(g, "\xC1\xA9\xF0\x9F\x98\x80"));  // overlong lead refused
}

TEST(Grammar, ErrorsNameThePosition) {
  EXPECT_EQ(parse_error("root ::= a\na ::= \"x\" b\n"),
            "grammar: line 2 column 11 (offset 21): undefined rule 'b'");
  EXPECT_EQ(parse_error("root ::= \"x\" )"), "grammar: line 1 column 14 (offset 13): unexpected ')'");
  EXPECT_EQ(parse_error("root ::= [a-"),
            "grammar: line 1 column 10 (offset 9): unterminated character class");
  EXPECT_EQ(parse_error("root ::= \"a\\q\""), "grammar: line 1 column 12 (offset 11): unknown escape '\\q'");
  EXPECT_EQ(parse_error("root ::= x{3,2}\nx ::= \"a\""),
            "grammar: line 1 column 11 (offset 10): repetition {m,n} with n < m");
  EXPECT_EQ(parse_error("a ::= \"x\""), "grammar: line 1 column 1 (offset 0): no 'root' rule");
  EXPECT_EQ(parse_error("root ::= \"a\"\nroot ::= \"b\""),
            "grammar: line 2 column 1 (offset 13): rule 'root' is defined twice");
  EXPECT_EQ(parse_error("root ::= a\na ::= a \"x\" | \"y\""),
            "grammar: line 2 column 1 (offset 11): left recursion (a rule reached again before any "
            "character): a → a");
  EXPECT_NE(parse_error("root ::= b? root \"x\" | \"y\"\nb ::= \"z\"").find("left recursion"),
            std::string::npos);
}

TEST(Grammar, ImpossibleGrammarsAreRefused) {
  EXPECT_EQ(
      parse_error("root ::= x\nx ::= \"a\" x"),
      "grammar: line 1 column 1 (offset 0): rule 'root' can match nothing (it derives no finite string)");
  EXPECT_NE(parse_error("root ::= [^\\x00-\\U0010FFFF]").find("can match nothing"), std::string::npos);
  // a dead alternative is dropped; the rest still matches
  const auto g = Grammar::parse("root ::= \"a\" x | \"b\"\nx ::= \"c\" x");
  EXPECT_TRUE(matches(g, "b"));
  GrammarState st(g);
  EXPECT_FALSE(st.accept("a"));
}

TEST(Grammar, TokenMaskFollowsTheGrammar) {
  const std::vector<std::string> vocab = {"{", "\"", "a",   "\"a\"", "}",    "{\"",
                                          "x", "",   "<s>", "\xC3",  "\xA9", "\xC3\xA9"};
  std::vector<bool> usable(vocab.size(), true);
  usable[8] = false;
  const TokenMasker m(vocab, usable);
  const auto g = Grammar::parse("root ::= \"{\" ( \"\\\"\" [a\\u00e9]* \"\\\"\" )? \"}\"");
  GrammarState st(g);
  std::vector<uint8_t> a;
  EXPECT_EQ(m.allowed(st, a), 2u);
  EXPECT_EQ(a, (std::vector<uint8_t>{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}));
  ASSERT_TRUE(st.accept("{\""));
  m.allowed(st, a);
  EXPECT_EQ(a, (std::vector<uint8_t>{0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 1}));  // a partial é (0xC3) too
  ASSERT_TRUE(st.accept("\xC3"));
  m.allowed(st, a);
  EXPECT_EQ(a, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0}));
}

TEST(JsonSchema, ObjectsArraysEnumsAndPatterns) {
  const auto schema = nlohmann::ordered_json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 3},
      "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", 1, null]}, "minItems": 1, "maxItems": 2},
      "id": {"type": "string", "pattern": "^[A-F]{2}-\\d+$"},
      "kind": {"$ref": "#/$defs/kind"}
    },
    "required": ["name", "id"],
    "additionalProperties": false,
    "$defs": {"kind": {"anyOf": [{"const": "x"}, {"type": "boolean"}]}}
  })");
  const auto g = Grammar::parse(json_schema_gbnf(schema));
  EXPECT_TRUE(matches(g, R"({"name": "ab", "id": "AF-12"})"));
  EXPECT_TRUE(matches(g, R"({"name":"","age":-3,"tags":["a",null],"id":"BB-0","kind":true})"));
  EXPECT_TRUE(matches(g, "{\n  \"name\": \"\\\"\",\n  \"id\": \"AA-1\",\n  \"kind\": \"x\"\n}"));
  EXPECT_FALSE(matches(g, R"({"id": "AF-12"})"));                           // required name missing
  EXPECT_FALSE(matches(g, R"({"name": "abcd", "id": "AF-12"})"));           // maxLength
  EXPECT_FALSE(matches(g, R"({"name": "a", "id": "AG-12"})"));              // pattern
  EXPECT_FALSE(matches(g, R"({"name": "a", "tags": [], "id": "AA-1"})"));   // minItems
  EXPECT_FALSE(matches(g, R"({"name": "a", "id": "AA-1", "zz": 1})"));      // additionalProperties
  EXPECT_FALSE(matches(g, R"({"name": "a", "age": 1.5, "id": "AA-1"})"));   // integer
  EXPECT_FALSE(matches(g, R"({"name": "a", "id": "AA-1", "kind": "y"})"));  // const
  const auto any = Grammar::parse(json_object_gbnf());
  EXPECT_TRUE(matches(any, R"({"a": [1, 2.5e3, {"b": null}], "c": "\u00e9"})"));
  EXPECT_FALSE(matches(any, R"([1])"));
}

TEST(JsonSchema, UnsupportedFeaturesAreNamed) {
  const auto err = [](const char* s) {
    try {
      json_schema_gbnf(nlohmann::ordered_json::parse(s));
    } catch (const Error& e) {
      return std::string(error_kind_name(e.kind())) + ": " + e.message();
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(err(R"({"type":"object","properties":{"a":{"type":"integer","minimum":0}}})"),
            "Unsupported: JSON schema: 'minimum' at /properties/a is not supported");
  EXPECT_EQ(err(R"({"type":"string","format":"email"})"),
            "Unsupported: JSON schema: 'format \"email\"' at / is not supported");
  EXPECT_EQ(
      err(R"({"type":"string","pattern":"(?=a)b"})"),
      "Unsupported: JSON schema: pattern feature '(?' (lookaround or named group) at / is not supported "
      "(pattern \"(?=a)b\")");
  EXPECT_EQ(err(R"({"allOf":[{}]})"), "Unsupported: JSON schema: 'allOf' at / is not supported");
  EXPECT_EQ(err(R"({"$ref":"#/$defs/nope"})"),
            "InvalidArgument: JSON schema: $ref #/$defs/nope names no definition at /");
  EXPECT_EQ(err(R"({"type":"object","required":["x"]})"),
            "InvalidArgument: JSON schema: 'required' names 'x', which is not in 'properties' at /");
}

}  // namespace
}  // namespace cortiq::runtime
