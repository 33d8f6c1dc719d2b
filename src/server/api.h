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

#include "runtime/grammar.h"
#include "runtime/sampler.h"
#include "tokenizer/output_protocol.h"

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
  /// The output constraint: llama.cpp's `grammar` (GBNF) or `response_format` json_object /
  /// json_schema, compiled (runtime/grammar.h, runtime/json_schema.h); null = unconstrained.
  std::shared_ptr<const runtime::Grammar> grammar;
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

// The tool-call and reasoning protocol the answers are read with (tokenizer/output_protocol.h), by
// the names the server has always used.
using cortiq::forced_tool_prefix;
using cortiq::parse_tool_calls;
using cortiq::partial_tag_suffix;
using cortiq::prompt_opens_reasoning;
using cortiq::random_id;
using cortiq::ReasoningSplit;
using cortiq::ReasoningStream;
using cortiq::split_reasoning;
using cortiq::template_has_reasoning;
using cortiq::template_supports_tools;
using cortiq::tool_format_of;
using cortiq::tool_markup_start;
using cortiq::ToolCall;
using cortiq::ToolContext;
using cortiq::ToolFormat;
using cortiq::ToolParse;

/// Mistral's chat templates accept only 9-character alphanumeric tool-call ids (they raise for
/// "call_…" ids from OpenAI or other servers): `id` itself when it is one, else 9 alphanumerics
/// derived from hash64(id), so a call and the tool message answering it map to the same id.
std::string mistral_call_id(const std::string& id);

/// Rewrites every tool-call id in `messages` (assistant tool_calls[].id, tool messages'
/// tool_call_id) with mistral_call_id.
void mistral_call_ids(ojson& messages);

/// Text for the SSE wire: "data: " + dump_json(j) + "\n\n" (never throws on invalid UTF-8).
std::string sse_event(const ojson& j);

/// A logprobs entry's `token` for a token whose text is `bytes` (Tokenizer::token_bytes): the
/// bytes themselves when they are valid UTF-8, else OpenAI's spelling of a partial character,
/// "bytes:" then each byte as \xNN ({0xE2, 0x80} → "bytes:\\xe2\\x80"). The raw bytes go to the
/// entry's `bytes` list either way, so a client can join the pieces of a character.
std::string logprob_token(std::string_view bytes);

}  // namespace cortiq::server
