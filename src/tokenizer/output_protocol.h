// What a chat model writes besides plain text, per family, next to the chat template that teaches
// it: tool calls (Hermes/Qwen `<tool_call>` blocks, Mistral `[TOOL_CALLS]`, Llama 3.x bare JSON)
// and reasoning blocks (`<think>…</think>`: Qwen3, QwQ, DeepSeek-R1). `cortiq serve` turns them
// into OpenAI's tool_calls and reasoning_content; `cortiq run` shows them apart from the answer.
// Also the one hold-back rule for text that may still become a tag or a stop string
// (partial_tag_suffix), which the generation engine applies to stop strings.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cortiq {

/// Length of the longest proper prefix of `tag` that ends `s` (0 when none, and for an empty tag):
/// the bytes of `s` that must wait, since the next text may complete `tag`. Partial matches only —
/// a whole `tag` inside `s` is the caller's find(). "…<tool_c" and "<tool_call>" → 7.
inline size_t partial_tag_suffix(std::string_view s, std::string_view tag) {
  if (tag.empty()) return 0;
  for (size_t k = std::min(tag.size() - 1, s.size()); k > 0; --k)
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  return 0;
}

/// A parsed OpenAI tool call.
struct ToolCall {
  std::string id, name;
  std::string arguments;  ///< JSON text of the arguments object
};

/// Result of scanning generated text for tool calls.
struct ToolParse {
  std::string content;  ///< text outside the tool-call markup (trimmed); "" when none
  std::vector<ToolCall> calls;
};

/// The tool-call syntax a chat template teaches its model.
enum class ToolFormat {
  Any,     ///< every syntax below (no template to tell)
  Hermes,  ///< Qwen / Hermes: `<tool_call>{"name":…,"arguments":{…}}</tool_call>` blocks
  Mistral,  ///< `[TOOL_CALLS][{"name":…,"arguments":{…}},…]` (v3) or `[TOOL_CALLS]name[ARGS]{…}` (v11+)
  BareJson,  ///< Llama 3.x: the whole output (optionally after `<|python_tag|>`) is the call JSON
};

/// Hermes when `chat_template` mentions `<tool_call>`, Mistral when it mentions `[TOOL_CALLS]`,
/// BareJson for any other template (Llama 3.x writes plain JSON), Any for an empty template.
ToolFormat tool_format_of(std::string_view chat_template);

/// Whether a chat template can show the model the request's `tools`: it reads the `tools` variable
/// (Qwen, Llama 3.x, Mistral v3+ and Hermes templates do; stories260K's, Gemma 3's and Mistral 7B
/// v0.1's do not). A request with tools for a template that cannot is refused (400) rather than
/// rendered without them.
bool template_supports_tools(std::string_view chat_template);

/// What a request allows as a tool call.
struct ToolContext {
  ToolFormat format = ToolFormat::Any;
  /// The request's declared function names: a call naming another function is not a call and its
  /// text stays content (OpenAI never returns an undeclared name). Empty: any name.
  std::vector<std::string> names;
};

/// Extracts tool calls from generated text in the syntax `ctx.format` allows (all of them for Any):
///  * Hermes: `<tool_call>{"name":…,"arguments":{…}}</tool_call>` blocks (several allowed);
///  * Mistral: `[TOOL_CALLS][{"name":…,"arguments":{…}},…]` (v3) or `[TOOL_CALLS]name[ARGS]{…}` (v11+);
///  * BareJson: the whole output (optionally after `<|python_tag|>`) is `{"name":…,"parameters"|
///    "arguments":{…}}`, or several separated by ";" — accepted only when `tools_requested`.
/// A block that is not valid JSON with a string `name`, or names an undeclared function, stays in
/// the content. Call ids are "call_" + 24 random alphanumerics, except Mistral's: 9 alphanumerics,
/// the only form Mistral's chat templates accept when the id comes back in a `tool` message.
ToolParse parse_tool_calls(std::string_view text, bool tools_requested, const ToolContext& ctx = {});

/// The start of the answer that makes the model call a tool, appended to the rendered prompt when
/// `tool_choice` is "required" (the model writes the name) or a function name (the model writes the
/// arguments): Hermes `<tool_call>\n{"name": "`, Mistral `[TOOL_CALLS]NAME[ARGS]` when the template
/// uses [ARGS] (v11+) else `[TOOL_CALLS] [{"name": "`, BareJson `{"name": "`; then, for a named
/// function, `NAME", "arguments": ` (BareJson: `"parameters"`). "" for auto / none, no tools, or
/// Any. The generated text is parsed with this prefix in front of it. Prefix forcing, not
/// constrained decoding: the model still chooses the rest.
/// `mistral_space`: the v3 form's template writes `[TOOL_CALLS] [` (Mistral 7B v0.3) rather than
/// `[TOOL_CALLS][` (Mistral Nemo): the prefix follows the template's spelling.
std::string forced_tool_prefix(const std::string& tool_choice, bool has_tools, ToolFormat format,
                               bool mistral_args, bool mistral_space = true);

/// What a chat template teaches its model to write besides text, read from the template's source
/// once: its tool-call syntax and spelling, and whether it writes reasoning blocks.
struct OutputProtocol {
  ToolFormat tools = ToolFormat::Any;  ///< tool_format_of
  bool mistral_args = false;           ///< Mistral v11+ template: `[TOOL_CALLS]name[ARGS]{…}`
  /// The template writes `[TOOL_CALLS] [` (Mistral 7B v0.3), not `[TOOL_CALLS][` (Nemo).
  bool mistral_space = true;
  bool reasoning = false;  ///< template_has_reasoning
  /// The protocol of `chat_template` ("" = no template: ToolFormat::Any, no reasoning).
  static OutputProtocol of(std::string_view chat_template);
};

class Tokenizer;

/// The special tokens of `tok` that spell tool-call markup ([TOOL_CALLS], [ARGS], <|python_tag|>,
/// <tool_call>, </tool_call>, those it has as specials): a generation keeps their text
/// (runtime::Job::keep_special), where special tokens are otherwise dropped, so the markup can be
/// parsed.
std::vector<uint32_t> tool_markup_specials(const Tokenizer& tok);

/// Position where tool-call markup of `format` may begin in partially generated `text` (so a stream
/// holds back everything from there), or npos. Considers the markers above and, for BareJson / Any
/// when `tools_requested`, a first non-space character '{'. A proper prefix of a marker at the end
/// of `text` counts.
size_t tool_markup_start(std::string_view text, bool tools_requested, ToolFormat format = ToolFormat::Any);

/// A reasoning model's answer split at its think tags (Qwen3, QwQ, DeepSeek-R1:
/// `<think>\n…\n</think>\n\nanswer`), as OpenAI-compatible servers return it: the reasoning in
/// `message.reasoning_content` (stream: `delta.reasoning_content`), the answer in `content`.
struct ReasoningSplit {
  std::string reasoning;  ///< between the tags, newlines stripped at both ends (Qwen3's template's rule)
  std::string content;    ///< after `</think>`, leading newlines stripped; the whole text when no reasoning
  bool found = false;     ///< the text opened a reasoning block (or started inside one)
};

/// Whether a chat template writes reasoning blocks: it mentions `</think>`.
bool template_has_reasoning(std::string_view chat_template);

/// Whether a rendered prompt leaves the model inside a reasoning block: it ends (before trailing
/// whitespace) with `<think>`, as DeepSeek-R1's and QwQ's generation prompts do.
bool prompt_opens_reasoning(std::string_view prompt);

/// Splits generated `text`. `starts_inside`: the prompt opened the block (prompt_opens_reasoning).
/// Otherwise a block is recognized only at the start of the text (after whitespace), where the
/// model writes it; a `<think>` elsewhere is content. An unclosed block (max_tokens reached while
/// reasoning) is all reasoning, with empty content.
ReasoningSplit split_reasoning(std::string_view text, bool starts_inside);

/// split_reasoning for a stream: text arrives in pieces, and each feed returns only what is certain
/// (never retracted): a partial `<think>` / `</think>` at the end and trailing newlines are held
/// back. The concatenated deltas of feed and finish equal split_reasoning of the whole text.
class ReasoningStream {
 public:
  /// `enabled` false: every byte is content at once (a model without reasoning blocks).
  ReasoningStream(bool enabled, bool starts_inside) : enabled_(enabled), inside_(starts_inside) {}
  struct Delta {
    std::string reasoning, content;
  };
  /// Appends generated text; returns the new certain reasoning and content.
  Delta feed(std::string_view text) { return advance(text, false); }
  /// The end of the generation: everything not yet returned.
  Delta finish() { return advance({}, true); }
  /// Whether a reasoning block has been seen (or the prompt opened one).
  bool found() const;

 private:
  Delta advance(std::string_view text, bool done);
  bool enabled_, inside_;
  std::string full_;
  size_t sent_reasoning_ = 0, sent_content_ = 0;
  bool found_ = false;
};

/// Random id with `prefix` and `n` alphanumerics (thread-safe).
std::string random_id(std::string_view prefix, size_t n = 24);

}  // namespace cortiq
