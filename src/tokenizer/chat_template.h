// Chat templates: render a Hugging Face `chat_template` exactly as transformers'
// apply_chat_template does (see tokenizer/jinja/jinja.h for the engine and its error model).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "tokenizer/jinja/jinja.h"

namespace cortiq {

/// Renders `tmpl` once with `context` (a JSON object: messages, tools, add_generation_prompt,
/// bos_token, ... — passed as template variables verbatim, key order preserved).
/// Throws jinja::TemplateError (a cortiq::Error): Parse/Unsupported with line and column for a bad
/// template; InvalidArgument for render failures (raise_exception, undefined use, TypeError).
std::string render_chat_template(std::string_view tmpl, const nlohmann::ordered_json& context,
                                 const jinja::Options& opt = {});

/// Per-call inputs of ChatTemplate::apply, mirroring apply_chat_template's arguments.
struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  ///< [{role, content, ...}]
  nlohmann::ordered_json tools = nullptr;                             ///< list of tool schemas or null
  bool add_generation_prompt = true;
  std::optional<bool> enable_thinking;  ///< passed only when set (templates test `is defined`)
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  ///< further template kwargs
  jinja::Options jinja;
};

/// A chat template parsed once and rendered many times, with the special-token strings of its
/// tokenizer_config.json.
class ChatTemplate {
 public:
  /// Parses `source`. Throws jinja::TemplateError(Syntax|Unsupported) with line and column.
  ChatTemplate(std::string_view source, std::optional<std::string> bos_token = std::nullopt,
               std::optional<std::string> eos_token = std::nullopt);

  /// From a parsed tokenizer_config.json. `chat_template` may be a string or a list of
  /// {name, template}; `name` empty picks "tool_use" when `with_tools` and present, else "default"
  /// (transformers' rule). bos/eos may be strings or AddedToken objects ({"content": ...}).
  /// Throws Error(Parse) when there is no chat template or the named one is missing.
  static ChatTemplate from_tokenizer_config(const nlohmann::ordered_json& cfg, std::string_view name = "",
                                            bool with_tools = false);

  /// Builds the transformers context {messages, tools, documents: null, add_generation_prompt,
  /// bos_token, eos_token, [enable_thinking], extra...} and renders it.
  std::string apply(const ChatRequest& req) const;
  /// Renders with an explicit context object.
  std::string render(const nlohmann::ordered_json& context, const jinja::Options& opt = {}) const;

  const std::string& source() const noexcept { return source_; }
  const std::optional<std::string>& bos_token() const noexcept { return bos_; }
  const std::optional<std::string>& eos_token() const noexcept { return eos_; }

 private:
  std::string source_;
  jinja::Template tmpl_;
  std::optional<std::string> bos_, eos_;
};

/// The string of a special-token entry of tokenizer_config.json: a string, an AddedToken-like object
/// {"content": ...}, or null/absent (nullopt). Throws Error(Parse) for any other shape.
std::optional<std::string> special_token_string(const nlohmann::ordered_json& cfg, std::string_view key);

}  // namespace cortiq
