// The per-family output protocol (tokenizer/output_protocol.h): tool calls in each family's syntax,
// reasoning blocks, the streaming hold-back, the template's protocol.
#include "tokenizer/output_protocol.h"

#include <gtest/gtest.h>

#include <cctype>
#include <nlohmann/json.hpp>
#include <string>

namespace cortiq {
namespace {

using ojson = nlohmann::ordered_json;

ojson J(const char* s) {
  return ojson::parse(s);
}

TEST(OutputProtocol, OfTheTemplate) {
  const OutputProtocol none = OutputProtocol::of("");
  EXPECT_EQ(none.tools, ToolFormat::Any);
  EXPECT_FALSE(none.reasoning);
  const OutputProtocol qwen3 =
      OutputProtocol::of("{% if tools %}<tool_call>{% endif %}{% if x %}<think>\n\n</think>{% endif %}");
  EXPECT_EQ(qwen3.tools, ToolFormat::Hermes);
  EXPECT_TRUE(qwen3.reasoning);
  const OutputProtocol nemo = OutputProtocol::of("{{ '[TOOL_CALLS][' }}");
  EXPECT_EQ(nemo.tools, ToolFormat::Mistral);
  EXPECT_FALSE(nemo.mistral_space);
  EXPECT_FALSE(nemo.mistral_args);
  const OutputProtocol v11 = OutputProtocol::of("{{ '[TOOL_CALLS]' + name + '[ARGS]' }}");
  EXPECT_TRUE(v11.mistral_args);
  EXPECT_TRUE(v11.mistral_space);
  EXPECT_EQ(OutputProtocol::of("<|start_header_id|>").tools, ToolFormat::BareJson);
}

TEST(OutputProtocol, PartialTagSuffix) {
  EXPECT_EQ(partial_tag_suffix("abc<tool_c", "<tool_call>"), 7u);
  EXPECT_EQ(partial_tag_suffix("abc<tool_call>", "<tool_call>"), 0u);  // a whole tag is find()'s
  EXPECT_EQ(partial_tag_suffix("abc", ""), 0u);
  EXPECT_EQ(partial_tag_suffix("", "</think>"), 0u);
  EXPECT_EQ(partial_tag_suffix("x</", "</think>"), 2u);
  EXPECT_EQ(partial_tag_suffix("STO", "STOP"), 3u);
}

TEST(Reasoning, SplitAtThinkTags) {
  struct Case {
    const char* text;
    bool inside;
    const char* reasoning;
    const char* content;
    bool found;
  } cases[] = {
      {"<think>\nplan it\n</think>\n\nThe answer.", false, "plan it", "The answer.", true},
      {"\n <think>a</think>b", false, "a", "b", true},
      {"plan it\n</think>\n\nThe answer.", true, "plan it", "The answer.", true},  // DeepSeek-R1 prompt
      {"<think>\nstill thinking when max_tokens hit", false, "still thinking when max_tokens hit", "", true},
      {"no tags at all", false, "", "no tags at all", false},
      {"  answer first <think>x</think>", false, "", "  answer first <think>x</think>", false},
      {"<think></think>", false, "", "", true},
      {"<think>a</think>b</think>c", false, "a", "b</think>c", true},  // the first close ends it
      {"<thin", false, "", "<thin", false},
      {"", true, "", "", true},
  };
  for (const auto& c : cases) {
    const ReasoningSplit r = split_reasoning(c.text, c.inside);
    EXPECT_EQ(r.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(r.content, c.content) << c.text;
    EXPECT_EQ(r.found, c.found) << c.text;
  }
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  EXPECT_FALSE(template_has_reasoning("{{ messages[0].content }}"));
}

// Every way of cutting the text into stream pieces gives deltas that add up to the one-shot split,
// and nothing is sent before it is certain (a partial tag or trailing newlines are held back).
TEST(Reasoning, StreamDeltasAddUpToTheSplitForEveryCut) {
  const char* texts[] = {"<think>\nplan\n\nmore</think>\n\nThe answer.\n",
                         "\n<think>a</thinkish></think>b",
                         "<thinker>not a block",
                         "<think>\nunclosed\n",
                         "plain answer",
                         " \n"};
  for (const char* t : texts)
    for (bool inside : {false, true}) {
      const std::string text = t;
      const ReasoningSplit want = split_reasoning(text, inside);
      for (size_t a = 0; a <= text.size(); ++a)
        for (size_t b = a; b <= text.size(); ++b) {
          ReasoningStream rs(true, inside);
          std::string r, c;
          for (const auto& piece : {text.substr(0, a), text.substr(a, b - a), text.substr(b)}) {
            const auto d = rs.feed(piece);
            r += d.reasoning;
            c += d.content;
            EXPECT_EQ(want.reasoning.substr(0, r.size()), r) << text << " cut " << a << "," << b;
            EXPECT_EQ(want.content.substr(0, c.size()), c) << text << " cut " << a << "," << b;
          }
          const auto d = rs.finish();
          EXPECT_EQ(r + d.reasoning, want.reasoning) << text << " cut " << a << "," << b;
          EXPECT_EQ(c + d.content, want.content) << text << " cut " << a << "," << b;
          EXPECT_EQ(rs.found(), want.found) << text;
        }
    }
  ReasoningStream rs(true, false);
  EXPECT_EQ(rs.feed("<think>\nab</th").reasoning, "ab");  // the partial close tag waits
  EXPECT_EQ(rs.feed("ink>\n\nX").content, "X");
  ReasoningStream off(false, false);  // a model without reasoning blocks: all content, at once
  EXPECT_EQ(off.feed("<think>").content, "<think>");
  EXPECT_FALSE(off.found());
}

TEST(ToolCalls, QwenBlocks) {
  auto p = parse_tool_calls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
      true);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(ojson::parse(p.calls[0].arguments), J(R"({"city":"Paris"})"));
  EXPECT_EQ(p.calls[1].name, "get_time");
  EXPECT_EQ(p.calls[1].arguments, "{}");
  EXPECT_EQ(p.content, "Let me check.");
  EXPECT_EQ(p.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(p.calls[0].id.size(), 29u);
  EXPECT_NE(p.calls[0].id, p.calls[1].id);
  // An unparseable block stays in the text.
  auto bad = parse_tool_calls("<tool_call>\n{not json}\n</tool_call>", true);
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_EQ(bad.content, "<tool_call>\n{not json}\n</tool_call>");
}

TEST(ToolCalls, MistralBothForms) {
  auto v3 = parse_tool_calls("[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}]", true);
  ASSERT_EQ(v3.calls.size(), 1u);
  EXPECT_EQ(v3.calls[0].name, "add");
  EXPECT_EQ(ojson::parse(v3.calls[0].arguments), J(R"({"a":1,"b":2})"));
  auto v11 = parse_tool_calls("[TOOL_CALLS]add[ARGS]{\"a\": 1}[TOOL_CALLS]neg[ARGS]{\"x\": 3}", true);
  ASSERT_EQ(v11.calls.size(), 2u);
  EXPECT_EQ(v11.calls[1].name, "neg");
  EXPECT_EQ(ojson::parse(v11.calls[1].arguments), J(R"({"x":3})"));
  EXPECT_TRUE(parse_tool_calls("[TOOL_CALLS] nonsense", true).calls.empty());
}

TEST(ToolCalls, Llama3BareJsonOnlyWithTools) {
  const char* out = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}";
  auto p = parse_tool_calls(out, true);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(ojson::parse(p.calls[0].arguments), J(R"({"city":"Oslo"})"));
  EXPECT_TRUE(parse_tool_calls(out, false).calls.empty());
  EXPECT_EQ(parse_tool_calls(out, false).content, out);
  auto two = parse_tool_calls(
      "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"s\": "
      "\";\"}}",
      true);
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.calls[1].name, "b");
  EXPECT_TRUE(parse_tool_calls("{\"answer\": 42}", true).calls.empty());  // no name: plain content
  EXPECT_TRUE(parse_tool_calls("Hello there", true).calls.empty());
}

TEST(ToolCalls, MarkupStartForStreaming) {
  EXPECT_EQ(tool_markup_start("Hello <tool_call>{", false), 6u);
  EXPECT_EQ(tool_markup_start("Hello <tool", false), 6u);  // marker prefix at the end: hold back
  EXPECT_EQ(tool_markup_start("Hello <b>", false), std::string::npos);
  EXPECT_EQ(tool_markup_start("  {\"name\"", true), 2u);
  EXPECT_EQ(tool_markup_start("  {\"name\"", false), std::string::npos);
  EXPECT_EQ(tool_markup_start("x [TOOL_C", false), 2u);
}

// A template's format decides which syntax is a call: a Qwen (Hermes) model answering with plain
// JSON that has a "name" key is answering, not calling (found by a newcomer trial: the answer was
// lost and an undeclared function "Bob" called).
TEST(ToolCalls, FormatOfTheTemplateAndDeclaredNamesOnly) {
  EXPECT_EQ(tool_format_of("{% for m in messages %}<tool_call>{% endfor %}"), ToolFormat::Hermes);
  EXPECT_EQ(tool_format_of("{{ '[TOOL_CALLS]' }}"), ToolFormat::Mistral);
  EXPECT_EQ(tool_format_of("<|start_header_id|>ipython"), ToolFormat::BareJson);
  EXPECT_EQ(tool_format_of(""), ToolFormat::Any);
  EXPECT_TRUE(template_supports_tools("{% if tools %}{{ tools | tojson }}{% endif %}"));
  EXPECT_FALSE(template_supports_tools("{% for m in messages %}{{ m.content }}{% endfor %}"));
  EXPECT_FALSE(template_supports_tools(""));

  const char* json = R"({"name":"Bob","age":3})";
  EXPECT_TRUE(parse_tool_calls(json, true, {ToolFormat::Hermes, {"get_weather"}}).calls.empty());
  EXPECT_EQ(parse_tool_calls(json, true, {ToolFormat::Hermes, {"get_weather"}}).content, json);
  // BareJson: the same text is a call only if it names a declared function
  EXPECT_TRUE(parse_tool_calls(json, true, {ToolFormat::BareJson, {"get_weather"}}).calls.empty());
  EXPECT_EQ(parse_tool_calls(json, true, {ToolFormat::BareJson, {"Bob"}}).calls.size(), 1u);
  // Hermes: an undeclared name stays in the content, a declared one is a call
  const char* hermes = "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(parse_tool_calls(hermes, true, {ToolFormat::Hermes, {"get_weather"}}).calls.empty());
  EXPECT_EQ(parse_tool_calls(hermes, true, {ToolFormat::Hermes, {"rm_rf"}}).calls.size(), 1u);
  // another family's markup is not parsed
  EXPECT_TRUE(parse_tool_calls(hermes, true, {ToolFormat::Mistral, {}}).calls.empty());
  EXPECT_TRUE(parse_tool_calls("[TOOL_CALLS]add[ARGS]{}", true, {ToolFormat::Hermes, {}}).calls.empty());
  // streaming: a Hermes model's leading '{' is content, not held back
  EXPECT_EQ(tool_markup_start("{\"a\"", true, ToolFormat::Hermes), std::string::npos);
  EXPECT_EQ(tool_markup_start("{\"a\"", true, ToolFormat::BareJson), 0u);
  EXPECT_EQ(tool_markup_start("x <tool_call>", true, ToolFormat::Mistral), std::string::npos);
}

// Mistral's templates reject any call id but 9 alphanumerics when it comes back in a tool message.
TEST(ToolCalls, MistralIdsAreNineAlphanumerics) {
  for (const char* out : {R"([TOOL_CALLS] [{"name": "add", "arguments": {}}])", "[TOOL_CALLS]add[ARGS]{}"}) {
    const auto p = parse_tool_calls(out, true);
    ASSERT_EQ(p.calls.size(), 1u) << out;
    EXPECT_EQ(p.calls[0].id.size(), 9u) << p.calls[0].id;
    for (char ch : p.calls[0].id) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch))) << p.calls[0].id;
  }
}

TEST(ToolCalls, ForcedPrefixPerFormat) {
  EXPECT_EQ(forced_tool_prefix("auto", true, ToolFormat::Hermes, false), "");
  EXPECT_EQ(forced_tool_prefix("required", false, ToolFormat::Hermes, false), "");
  EXPECT_EQ(forced_tool_prefix("required", true, ToolFormat::Any, false), "");
  EXPECT_EQ(forced_tool_prefix("required", true, ToolFormat::Hermes, false), "<tool_call>\n{\"name\": \"");
  EXPECT_EQ(forced_tool_prefix("f", true, ToolFormat::Hermes, false),
            "<tool_call>\n{\"name\": \"f\", \"arguments\": ");
  EXPECT_EQ(forced_tool_prefix("f", true, ToolFormat::Mistral, true), "[TOOL_CALLS]f[ARGS]");
  EXPECT_EQ(forced_tool_prefix("f", true, ToolFormat::Mistral, false),
            "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": ");
  EXPECT_EQ(forced_tool_prefix("f", true, ToolFormat::Mistral, false, false),  // Nemo's spelling
            "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": ");
  EXPECT_EQ(forced_tool_prefix("f", true, ToolFormat::BareJson, false), "{\"name\": \"f\", \"parameters\": ");
  // prefix + a plausible continuation parses as the forced call
  const auto p =
      parse_tool_calls(forced_tool_prefix("f", true, ToolFormat::Hermes, false) + "{\"x\": 1}}\n</tool_call>",
                       true, {ToolFormat::Hermes, {"f"}});
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "f");
}

}  // namespace
}  // namespace cortiq
