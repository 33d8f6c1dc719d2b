// Chat-template front end: tokenizer_config.json handling and the transformers render context.
#include "tokenizer/chat_template.h"

namespace cortiq {

std::string render_chat_template(std::string_view tmpl, const nlohmann::ordered_json& context,
                                 const jinja::Options& opt) {
  return jinja::Template(tmpl).render(context, opt);
}

std::optional<std::string> special_token_string(const nlohmann::ordered_json& cfg, std::string_view key) {
  auto it = cfg.find(std::string(key));
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  fail(ErrorKind::Parse, "tokenizer_config.{}: expected a string or an object with a string \"content\"",
       key);
}

ChatTemplate::ChatTemplate(std::string_view source, std::optional<std::string> bos_token,
                           std::optional<std::string> eos_token)
    : source_(source), tmpl_(source), bos_(std::move(bos_token)), eos_(std::move(eos_token)) {}

ChatTemplate ChatTemplate::from_tokenizer_config(const nlohmann::ordered_json& cfg, std::string_view name,
                                                 bool with_tools) {
  if (!cfg.is_object()) fail(ErrorKind::Parse, "tokenizer_config: expected a JSON object");
  auto it = cfg.find("chat_template");
  if (it == cfg.end() || it->is_null()) fail(ErrorKind::Parse, "tokenizer_config.chat_template: missing");
  std::string source;
  if (it->is_string()) {
    if (!name.empty() && name != "default")
      fail(ErrorKind::Parse,
           "tokenizer_config.chat_template: a single template has no '{}' variant (only 'default')", name);
    source = it->get<std::string>();
  } else if (it->is_array()) {
    std::string want(name);
    auto has = [&](const std::string& n) {
      for (auto& t : *it)
        if (t.is_object() && t.value("name", "") == n) return true;
      return false;
    };
    if (want.empty()) want = (with_tools && has("tool_use")) ? "tool_use" : "default";
    bool found = false;
    std::string names;  // for the error: the names there are
    for (auto& t : *it) {
      if (!t.is_object() || !t.contains("name") || !t.contains("template") || !t["template"].is_string())
        fail(ErrorKind::Parse, "tokenizer_config.chat_template[]: entries must be {{name, template}}");
      names += (names.empty() ? "'" : ", '") +
               (t["name"].is_string() ? t["name"].get<std::string>() : t["name"].dump()) + "'";
      if (t["name"] == want) {
        source = t["template"].get<std::string>();
        found = true;
      }
    }
    if (!found)
      fail(ErrorKind::Parse, "tokenizer_config.chat_template: no template named '{}' (it has {})", want,
           names.empty() ? "none" : names);
  } else {
    fail(ErrorKind::Parse,
         "tokenizer_config.chat_template: expected a string or a list of {{name, template}}");
  }
  return ChatTemplate(source, special_token_string(cfg, "bos_token"), special_token_string(cfg, "eos_token"));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context, const jinja::Options& opt) const {
  return tmpl_.render(context, opt);
}

std::string ChatTemplate::apply(const ChatRequest& req) const {
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = req.messages;
  ctx["tools"] = req.tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = req.add_generation_prompt;
  if (bos_) ctx["bos_token"] = *bos_;
  if (eos_) ctx["eos_token"] = *eos_;
  if (req.enable_thinking) ctx["enable_thinking"] = *req.enable_thinking;
  for (auto it = req.extra.begin(); it != req.extra.end(); ++it) ctx[it.key()] = it.value();
  return tmpl_.render(ctx, req.jinja);
}

}  // namespace cortiq
