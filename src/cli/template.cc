// `cortiq template <model.cmf|tokenizer_config.json|HF folder> --messages FILE.json|- [--tools
// FILE.json] [--no-generation-prompt] [--no-think]`: prints the chat prompt rendered exactly as transformers'
// apply_chat_template would (src/tokenizer/chat_template.h).
#include <cstdio>
#include <filesystem>

#include "cli/command.h"
#include "cmf/reader.h"
#include "runtime/session.h"
#include "tokenizer/chat_template.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace cortiq::cli {
namespace {

struct TemplateArgs {
  std::string model;
  std::string messages;
  std::string tools;
  std::string name;
  bool no_generation_prompt = false;
  bool no_think = false;
};

nlohmann::ordered_json read_json(const std::string& path) {
  try {
    return nlohmann::ordered_json::parse(read_input(path));
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::Parse, "{}: invalid JSON: {}", path, e.what());
  }
}

/// The tokenizer config to render for `model` when it is not a .cmf: the tokenizer_config.json file
/// itself, or for a Hugging Face folder (as `cortiq tokenize` accepts) its tokenizer_config.json
/// with the template of its chat_template.jinja when that file is there and not blank (it wins, as
/// in transformers and in `cortiq convert`). Throws Error(InvalidArgument) for a folder with
/// neither file.
nlohmann::ordered_json folder_config(const std::string& model) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(model)) return read_json(model);
  const fs::path p = fs::path(model) / "tokenizer_config.json",
                 jinja = fs::path(model) / "chat_template.jinja";
  if (!fs::exists(p) && !fs::exists(jinja))
    fail(ErrorKind::InvalidArgument,
         "'{}' is a folder without tokenizer_config.json or chat_template.jinja: give a .cmf or a "
         "tokenizer_config.json",
         model);
  nlohmann::ordered_json cfg = fs::exists(p) ? read_json(p.string()) : nlohmann::ordered_json::object();
  if (fs::exists(jinja)) {
    const std::string t = read_input(jinja.string());
    if (t.find_first_not_of(" \t\r\n") != std::string::npos) cfg["chat_template"] = t;
  }
  return cfg;
}

bool ends_with(const std::string& s, const char* suf) {
  size_t n = std::char_traits<char>::length(suf);
  return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
}

void run(const TemplateArgs& a) {
  nlohmann::ordered_json msgs = read_json(a.messages);
  ChatRequest req;
  // FILE.json is either the messages array or an object {messages, tools?, ...extra kwargs}.
  if (msgs.is_array()) {
    req.messages = msgs;
  } else if (msgs.is_object() && msgs.contains("messages")) {
    for (auto it = msgs.begin(); it != msgs.end(); ++it) {
      if (it.key() == "messages")
        req.messages = it.value();
      else if (it.key() == "tools")
        req.tools = it.value();
      else
        req.extra[it.key()] = it.value();
    }
  } else {
    fail(ErrorKind::Parse, "{}: expected a JSON array of messages or an object with \"messages\"",
         a.messages);
  }
  if (!req.messages.is_array()) fail(ErrorKind::Parse, "{}: \"messages\" must be an array", a.messages);
  if (!a.tools.empty()) req.tools = read_json(a.tools);
  // transformers' apply_chat_template takes tools as a list; anything else is refused, not dropped
  if (!req.tools.is_null() && !req.tools.is_array())
    fail(ErrorKind::Parse, "{}: \"tools\" must be a JSON array of tool schemas, not {}",
         a.tools.empty() ? a.messages : a.tools, req.tools.type_name());
  req.add_generation_prompt = !a.no_generation_prompt;
  if (a.no_think) req.enable_thinking = false;

  bool with_tools = !req.tools.is_null();
  if (ends_with(a.model, ".cmf")) {
    cmf::Reader r = cmf::Reader::open(a.model);
    const auto& tc = r.header().tokenizer_config;
    if (!tc || !tc->chat_template)
      fail(ErrorKind::Parse, "{}: header.tokenizer_config.chat_template is absent", a.model);
    nlohmann::ordered_json cfg = nlohmann::ordered_json::object();
    cfg["chat_template"] = *tc->chat_template;
    // Special-token strings: the bundle's extra keys when the converter kept them, else the texts of
    // its bos / first eos ids in the file's tokenizer (vocab section, or the tokenizer.json beside
    // it), as run and serve render the template.
    for (const char* k : {"bos_token", "eos_token"})
      if (tc->extra.contains(k)) cfg[k] = nlohmann::ordered_json::parse(tc->extra[k].dump());
    if (!cfg.contains("bos_token") || !cfg.contains("eos_token")) {
      const auto tok = runtime::load_tokenizer(r, a.model);
      if (tok && !cfg.contains("bos_token") && tc->bos_token_id)
        cfg["bos_token"] = tok->id_to_token(*tc->bos_token_id);
      if (tok && !cfg.contains("eos_token") && !tc->eos_token_ids.empty())
        cfg["eos_token"] = tok->id_to_token(tc->eos_token_ids[0]);
    }
    std::string out = ChatTemplate::from_tokenizer_config(cfg, a.name, with_tools).apply(req);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return;
  }
  std::string out =
      ChatTemplate::from_tokenizer_config(folder_config(a.model), a.name, with_tools).apply(req);
  std::fwrite(out.data(), 1, out.size(), stdout);
}

void setup(CLI::App& root) {
  auto a = std::make_shared<TemplateArgs>();
  auto* c = root.add_subcommand("template", "Render a chat template (as transformers' apply_chat_template)");
  add_examples(c,
               {"cortiq template ../shared/models/tokenizer-qwen2.5 --messages chat.json",
                "echo '[{\"role\":\"user\",\"content\":\"Hi\"}]' | cortiq template model.cmf --messages -"});
  c->add_option("model", a->model, "model.cmf, tokenizer_config.json or a Hugging Face folder")->required();
  c->add_option("--messages", a->messages,
                "JSON file (- = stdin): [messages] or {messages, tools, ...kwargs}")
      ->required();
  c->add_option("--tools", a->tools, "JSON file with the tool schemas list");
  c->add_option("--template-name", a->name, "named template variant (e.g. tool_use)");
  c->add_flag("--no-generation-prompt", a->no_generation_prompt, "add_generation_prompt=false");
  c->add_flag("--no-think", a->no_think, "pass enable_thinking=false");
  c->callback([a] { run(*a); });
}

}  // namespace
CORTIQ_COMMAND(40, setup);
}  // namespace cortiq::cli
