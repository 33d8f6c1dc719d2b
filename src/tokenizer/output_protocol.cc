#include "tokenizer/output_protocol.h"

#include <cctype>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "tokenizer/tokenizer.h"

namespace cortiq {

namespace {
using ojson = nlohmann::ordered_json;
}  // namespace

OutputProtocol OutputProtocol::of(std::string_view chat_template) {
  OutputProtocol p;
  if (chat_template.empty()) return p;
  p.tools = tool_format_of(chat_template);
  p.mistral_args = chat_template.find("[ARGS]") != std::string_view::npos;
  p.mistral_space = chat_template.find("[TOOL_CALLS][") == std::string_view::npos;
  p.reasoning = template_has_reasoning(chat_template);
  return p;
}

std::vector<uint32_t> tool_markup_specials(const Tokenizer& tok) {
  std::vector<uint32_t> ids;
  for (const char* s : {"[TOOL_CALLS]", "[ARGS]", "<|python_tag|>", "<tool_call>", "</tool_call>"})
    if (auto id = tok.token_to_id(s); id && tok.is_special(*id)) ids.push_back(*id);
  return ids;
}

// Tool calls

std::string random_id(std::string_view prefix, size_t n) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  static const char* alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string s(prefix);
  std::lock_guard<std::mutex> g(mu);
  for (size_t i = 0; i < n; ++i) s += alnum[rng() % 62];
  return s;
}

ToolFormat tool_format_of(std::string_view chat_template) {
  if (chat_template.empty()) return ToolFormat::Any;
  if (chat_template.find("<tool_call>") != std::string_view::npos) return ToolFormat::Hermes;
  if (chat_template.find("[TOOL_CALLS]") != std::string_view::npos) return ToolFormat::Mistral;
  return ToolFormat::BareJson;
}

bool template_supports_tools(std::string_view chat_template) {
  return chat_template.find("tools") != std::string_view::npos;
}

namespace {

std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return std::string(s.substr(a, b - a));
}

bool declared(const ToolContext& ctx, const std::string& name) {
  return ctx.names.empty() || std::find(ctx.names.begin(), ctx.names.end(), name) != ctx.names.end();
}

// Mistral's templates accept only 9 alphanumerics as a call id.
std::string call_id(bool mistral) {
  return mistral ? random_id("", 9) : random_id("call_");
}

// {"name": str (declared), "arguments"|"parameters": object|string} → ToolCall.
std::optional<ToolCall> call_from_json(const ojson& j, const ToolContext& ctx, bool mistral = false) {
  if (!j.is_object()) return std::nullopt;
  auto n = j.find("name");
  if (n == j.end() || !n->is_string() || !declared(ctx, n->get<std::string>())) return std::nullopt;
  ToolCall c{call_id(mistral), n->get<std::string>(), "{}"};
  auto a = j.find("arguments");
  if (a == j.end()) a = j.find("parameters");
  if (a != j.end()) c.arguments = a->is_string() ? a->get<std::string>() : a->dump();
  return c;
}

const char* kMarkers[] = {"<tool_call>", "[TOOL_CALLS]", "<|python_tag|>"};

}  // namespace

ToolParse parse_tool_calls(std::string_view text, bool tools_requested, const ToolContext& ctx) {
  ToolParse out;
  const auto allows = [&](ToolFormat f) { return ctx.format == ToolFormat::Any || ctx.format == f; };
  // Qwen / Hermes blocks.
  if (allows(ToolFormat::Hermes) && text.find("<tool_call>") != std::string_view::npos) {
    std::string rest;
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t a = text.find("<tool_call>", pos);
      if (a == std::string_view::npos) {
        rest += text.substr(pos);
        break;
      }
      rest += text.substr(pos, a - pos);
      const size_t body = a + 11;
      size_t b = text.find("</tool_call>", body);
      const size_t end = b == std::string_view::npos ? text.size() : b + 12;
      if (b == std::string_view::npos) b = text.size();
      auto j = ojson::parse(text.substr(body, b - body), nullptr, false);
      auto c = j.is_discarded() ? std::nullopt : call_from_json(j, ctx);
      if (c) {
        out.calls.push_back(*c);
      } else {
        rest += text.substr(a, end - a);  // unparseable: stays in the text
      }
      pos = end;
    }
    out.content = trim(rest);
    return out;
  }
  // Mistral.
  if (const size_t m = allows(ToolFormat::Mistral) ? text.find("[TOOL_CALLS]") : std::string_view::npos;
      m != std::string_view::npos) {
    std::string_view body = text.substr(m + 12);
    const std::string before = trim(text.substr(0, m));
    auto j = ojson::parse(body, nullptr, false);
    if (!j.is_discarded()) {
      if (j.is_object()) j = ojson::array({j});
      if (j.is_array()) {
        std::vector<ToolCall> calls;
        for (const auto& x : j)
          if (auto c = call_from_json(x, ctx, true)) calls.push_back(*c);
        if (!calls.empty() && calls.size() == j.size()) return {before, calls};
      }
    }
    // v11+: NAME[ARGS]{json} repeated, each after [TOOL_CALLS].
    std::vector<ToolCall> calls;
    std::string_view s = text.substr(m);
    bool ok = true;
    while (!s.empty() && ok) {
      if (s.substr(0, 12) != "[TOOL_CALLS]") break;
      s.remove_prefix(12);
      const size_t ar = s.find("[ARGS]");
      if (ar == std::string_view::npos) {
        ok = false;
        break;
      }
      const std::string name = trim(s.substr(0, ar));
      s.remove_prefix(ar + 6);
      const size_t next = s.find("[TOOL_CALLS]");
      auto args = ojson::parse(s.substr(0, next), nullptr, false);
      if (name.empty() || args.is_discarded() || !declared(ctx, name)) {
        ok = false;
        break;
      }
      calls.push_back({call_id(true), name, args.is_string() ? args.get<std::string>() : args.dump()});
      s = next == std::string_view::npos ? std::string_view() : s.substr(next);
    }
    if (ok && !calls.empty()) return {before, calls};
    out.content = trim(text);
    return out;
  }
  // Llama 3.x: bare JSON (after an optional <|python_tag|>), only when tools were requested.
  std::string t = trim(text);
  if (t.rfind("<|python_tag|>", 0) == 0) t = trim(t.substr(14));
  if (allows(ToolFormat::BareJson) && tools_requested && !t.empty() && t[0] == '{') {
    std::vector<ToolCall> calls;
    bool ok = true;
    // Several calls may be separated by ';'.
    auto whole = ojson::parse(t, nullptr, false);
    if (!whole.is_discarded()) {
      if (auto c = call_from_json(whole, ctx))
        calls.push_back(*c);
      else
        ok = false;
    } else {
      size_t start = 0;
      while (start < t.size() && ok) {
        size_t semi = t.find(";", start);
        // find a split where the piece parses
        bool found = false;
        while (true) {
          const size_t end = semi == std::string::npos ? t.size() : semi;
          auto j = ojson::parse(std::string_view(t).substr(start, end - start), nullptr, false);
          if (!j.is_discarded()) {
            auto c = call_from_json(j, ctx);
            if (!c) break;
            calls.push_back(*c);
            start = end == t.size() ? end : end + 1;
            found = true;
            break;
          }
          if (semi == std::string::npos) break;
          semi = t.find(";", semi + 1);
        }
        if (!found) ok = false;
      }
    }
    if (ok && !calls.empty()) return {"", calls};
  }
  out.content = trim(text);
  return out;
}

std::string forced_tool_prefix(const std::string& tool_choice, bool has_tools, ToolFormat format,
                               bool mistral_args, bool mistral_space) {
  if (!has_tools || tool_choice == "auto" || tool_choice == "none" || format == ToolFormat::Any) return "";
  const bool named = tool_choice != "required";
  const std::string name = named ? tool_choice : "";
  switch (format) {
    case ToolFormat::Hermes:
      return "<tool_call>\n{\"name\": \"" + (named ? name + "\", \"arguments\": " : "");
    case ToolFormat::Mistral:
      if (mistral_args) return "[TOOL_CALLS]" + (named ? name + "[ARGS]" : "");
      return std::string(mistral_space ? "[TOOL_CALLS] [" : "[TOOL_CALLS][") + "{\"name\": \"" +
             (named ? name + "\", \"arguments\": " : "");
    case ToolFormat::BareJson:
      return "{\"name\": \"" + (named ? name + "\", \"parameters\": " : "");
    case ToolFormat::Any:
      break;
  }
  return "";
}

size_t tool_markup_start(std::string_view text, bool tools_requested, ToolFormat format) {
  size_t best = std::string_view::npos;
  for (const char* m : kMarkers) {
    const std::string_view mk(m);
    const ToolFormat of = mk == "<tool_call>"    ? ToolFormat::Hermes
                          : mk == "[TOOL_CALLS]" ? ToolFormat::Mistral
                                                 : ToolFormat::BareJson;
    if (format != ToolFormat::Any && format != of) continue;
    if (size_t p = text.find(mk); p != std::string_view::npos) best = std::min(best, p);
    if (const size_t k = partial_tag_suffix(text, mk); k > 0) best = std::min(best, text.size() - k);
  }
  if (tools_requested && (format == ToolFormat::Any || format == ToolFormat::BareJson)) {
    size_t i = 0;
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i < text.size() && text[i] == '{') best = std::min(best, i);
  }
  return best;
}

namespace {
constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";

std::string_view strip_newlines(std::string_view s, bool front, bool back) {
  while (front && !s.empty() && s.front() == '\n') s.remove_prefix(1);
  while (back && !s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

/// The split of `text` so far. done = false gives the certain part only (see ReasoningStream);
/// `decided` false: it is not yet known whether the text opens a block (nothing is certain).
struct PartialSplit {
  std::string_view reasoning, content;
  bool found = false, decided = true;
};
PartialSplit split_partial(std::string_view text, bool starts_inside, bool done) {
  PartialSplit r;
  size_t pos = 0;
  if (!starts_inside) {
    size_t i = 0;
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    const std::string_view rest = text.substr(i);
    if (rest.substr(0, kThinkOpen.size()) != kThinkOpen) {
      // undecided while the text is whitespace or a proper prefix of <think>
      if (!done && (rest.empty() || kThinkOpen.substr(0, rest.size()) == rest)) {
        r.decided = false;
        return r;
      }
      r.content = text;
      return r;
    }
    pos = i + kThinkOpen.size();
  }
  r.found = true;
  const size_t close = text.find(kThinkClose, pos);
  if (close == std::string_view::npos) {
    std::string_view body = text.substr(pos);
    if (!done) body.remove_suffix(partial_tag_suffix(body, kThinkClose));
    r.reasoning = strip_newlines(body, true, true);  // not done: trailing newlines held back
    return r;
  }
  r.reasoning = strip_newlines(text.substr(pos, close - pos), true, true);
  r.content = strip_newlines(text.substr(close + kThinkClose.size()), true, false);
  return r;
}
}  // namespace

bool template_has_reasoning(std::string_view chat_template) {
  return chat_template.find(kThinkClose) != std::string_view::npos;
}

bool prompt_opens_reasoning(std::string_view prompt) {
  while (!prompt.empty() && std::isspace(static_cast<unsigned char>(prompt.back()))) prompt.remove_suffix(1);
  return prompt.size() >= kThinkOpen.size() && prompt.substr(prompt.size() - kThinkOpen.size()) == kThinkOpen;
}

ReasoningSplit split_reasoning(std::string_view text, bool starts_inside) {
  const PartialSplit p = split_partial(text, starts_inside, true);
  return {std::string(p.reasoning), std::string(p.content), p.found};
}

bool ReasoningStream::found() const {
  return found_;
}

ReasoningStream::Delta ReasoningStream::advance(std::string_view text, bool done) {
  Delta d;
  if (!enabled_) {
    d.content = std::string(text);
    return d;
  }
  full_.append(text);
  const PartialSplit p = split_partial(full_, inside_, done);
  if (!p.decided) return d;
  found_ = p.found;
  // the certain parts only grow (each is a prefix of the final split); guard anyway
  if (p.reasoning.size() > sent_reasoning_) {
    d.reasoning = std::string(p.reasoning.substr(sent_reasoning_));
    sent_reasoning_ = p.reasoning.size();
  }
  if (p.content.size() > sent_content_) {
    d.content = std::string(p.content.substr(sent_content_));
    sent_content_ = p.content.size();
  }
  return d;
}

}  // namespace cortiq
