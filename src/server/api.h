// OpenAI-compatible request model and response shapes for `cortiq serve` (issue 7; ENGINE-NOTES
// "OpenAI-compatible server"; PITFALLS SRV-2, SRV-3, SRV-5). Pure functions over JSON: no sockets,
// no model execution, so everything here is unit-tested in isolation.
//
// Policies fixed here (documented for clients):
//  * `content` as a list of parts: the `text` of every {"type":"text"} part, joined with "\n";
//    any non-text part (image_url, input_audio, file) → 400 (the models are text-only).
//  * `content: null` or absent (assistant turns carrying `tool_calls`) → "" (SRV-3).
//  * `tool_calls[].function.arguments` given as a JSON string is parsed into an object for the
//    template (transformers convention); a string that is not JSON stays a string.
//  * role "developer" is rendered as "system".
//  * Sampling defaults: the engine's (temperature 0.7, top_p 0.9, top_k 40, min_p 0.05) with every
//    field the request sets overriding; repetition penalty 1 (OpenAI has none; extension field
//    `repetition_penalty`); temperature 0 → greedy argmax (same chain as `cortiq run --greedy`).
#pragma once

#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/stop_strings.h"

namespace cortiq::server {

using ojson = nlohmann::ordered_json;

/// An error answered to the client as `{"error":{"message","type","param","code"}}` with `status`.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string type = "invalid_request_error",
           std::optional<std::string> param = std::nullopt, std::optional<std::string> code = std::nullopt)
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type;
  std::optional<std::string> param, code;
};

/// The OpenAI error body for `e`.
ojson error_body(const ApiError& e);
/// Shorthand: error body for a status and message (type derived from the status).
ojson error_body(int status, std::string_view message);

/// The error answered for an exception a route handler let escape (`ep` non-null): an ApiError
/// as it is; a cortiq::Error of kind InvalidArgument 400 with its message, of any other kind 500
/// with "<Kind>: message"; std::bad_alloc 500 "out of memory …"; any other std::exception 500
/// "internal error: what()"; anything else 500 naming no type. Never throws for a valid `ep`
/// beyond std::bad_alloc.
ApiError api_error_of(std::exception_ptr ep);

/// `j` as compact JSON text; invalid UTF-8 in a string becomes U+FFFD instead of a throw (an
/// answer must never fail on its own serialization).
std::string dump_json(const ojson& j);

/// Sampling and stopping settings common to both generation routes.
struct SamplingOptions {
  runtime::SamplerParams sampler;    ///< chain settings (see runtime/sampler.h)
  float frequency_penalty = 0.0f;    ///< subtracted count(id in completion) times, per OpenAI
  float presence_penalty = 0.0f;     ///< subtracted once per id in the completion, per OpenAI
  float repeat_penalty = 1.0f;       ///< llama.cpp's repeat_penalty / vLLM's repetition_penalty (prompt too)
  std::optional<size_t> max_tokens;  ///< none → up to the context
  std::vector<std::string> stop;     ///< up to 4 strings
  bool logprobs = false;
  int top_logprobs = 0;  ///< 0..20
  /// OpenAI `logit_bias`: token id → bias in [-100, 100] added to its logit before sampling (ids are
  /// checked against the vocabulary by the server).
  std::vector<std::pair<uint32_t, float>> logit_bias;
};

/// A parsed POST /v1/chat/completions body.
struct ChatCompletionRequest {
  std::string model;
  ojson messages = ojson::array();  ///< normalized: string content, parsed tool-call arguments
  ojson tools = nullptr;            ///< null when absent or hidden by tool_choice "none"
  /// auto | none | required | a function name (validated against `tools`; the server starts the
  /// answer with the tool-call opening of the template's format for required / a name)
  std::string tool_choice = "auto";
  bool stream = false, include_usage = false;
  SamplingOptions sampling;
  std::optional<std::string> task;   ///< `cortiq.task`
  std::optional<std::string> skill;  ///< `cortiq.skill`: a skill id, "auto" or "none"
  std::optional<bool> enable_thinking;
};

/// A parsed POST /v1/completions body. Exactly one of prompt_text / prompt_ids is set.
struct CompletionRequest {
  std::string model;
  std::optional<std::string> prompt_text;
  std::optional<std::vector<uint32_t>> prompt_ids;
  bool stream = false, include_usage = false, echo = false;
  SamplingOptions sampling;
  std::optional<std::string> task;
  std::optional<std::string> skill;  ///< `cortiq.skill`
};

/// Parses and validates a chat body. Throws ApiError(400) naming the field (`param`) for a wrong
/// type, an out-of-range value, an empty `messages`, a non-text content part, n != 1, or a
/// response_format other than "text".
ChatCompletionRequest parse_chat_request(const ojson& body);
/// Parses and validates a completions body (prompt: string, [string] of length 1, [int] or
/// [[int]] of length 1; max_tokens 0 only with echo). Throws ApiError(400) naming the field.
CompletionRequest parse_completion_request(const ojson& body);

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

/// Mistral's chat templates accept only 9-character alphanumeric tool-call ids (they raise for
/// "call_…" ids from OpenAI or other servers): `id` itself when it is one, else 9 alphanumerics
/// derived from hash64(id), so a call and the tool message answering it map to the same id.
std::string mistral_call_id(const std::string& id);

/// Rewrites every tool-call id in `messages` (assistant tool_calls[].id, tool messages'
/// tool_call_id) with mistral_call_id.
void mistral_call_ids(ojson& messages);

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

using runtime::partial_tag_suffix;  // "…<tool_c" and "<tool_call>" → 7 (runtime/stop_strings.h)

/// Random id with `prefix` and `n` alphanumerics (thread-safe).
std::string random_id(std::string_view prefix, size_t n = 24);

/// Text for the SSE wire: "data: " + dump_json(j) + "\n\n" (never throws on invalid UTF-8).
std::string sse_event(const ojson& j);

/// A logprobs entry's `token` for a token whose text is `bytes` (Tokenizer::token_bytes): the
/// bytes themselves when they are valid UTF-8, else OpenAI's spelling of a partial character,
/// "bytes:" then each byte as \xNN ({0xE2, 0x80} → "bytes:\\xe2\\x80"). The raw bytes go to the
/// entry's `bytes` list either way, so a client can join the pieces of a character.
std::string logprob_token(std::string_view bytes);

}  // namespace cortiq::server
