#include "server/api.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <random>

#include "cmf/hash.h"
#include "runtime/json_schema.h"
#include "util/error.h"
#include "util/utf8.h"

namespace cortiq::server {

namespace {

std::string status_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

[[noreturn]] void bad(std::string_view param, const std::string& msg) {
  throw ApiError(400, msg, "invalid_request_error", std::string(param), "invalid_value");
}

std::string type_name(const ojson& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

[[noreturn]] void wrong_type(std::string_view param, std::string_view want, const ojson& v) {
  bad(param, "'" + std::string(param) + "' must be " + std::string(want) + ", got " + type_name(v));
}

// Field getters: absent or null → nullopt; wrong type → 400.
std::optional<double> get_number(const ojson& b, const char* key, double lo, double hi) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) wrong_type(key, "a number", *it);
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    bad(key, fmt::format("'{}' = {} is out of range [{}, {}]", key, it->dump(), lo, hi));
  return v;
}

std::optional<int64_t> get_int(const ojson& b, const char* key, int64_t lo, int64_t hi) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!(it->is_number_integer() || it->is_number_unsigned())) {
    // JSON has one number type: accept 5.0 but not 5.5.
    if (it->is_number_float() && std::isfinite(it->get<double>()) &&
        it->get<double>() == std::floor(it->get<double>()) && std::fabs(it->get<double>()) < 9e15) {
      const auto v = static_cast<int64_t>(it->get<double>());
      if (v < lo || v > hi)
        bad(key, fmt::format("'{}' = {} is out of range [{}, {}]", key, it->dump(), lo, hi));
      return v;
    }
    wrong_type(key, "an integer", *it);
  }
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    bad(key, "'" + std::string(key) + "' is out of range");
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi)
    bad(key, "'" + std::string(key) + "' = " + std::to_string(v) + " is out of range [" + std::to_string(lo) +
                 ", " + std::to_string(hi) + "]");
  return v;
}

std::optional<bool> get_bool(const ojson& b, const char* key) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) wrong_type(key, "a boolean", *it);
  return it->get<bool>();
}

std::optional<std::string> get_string(const ojson& b, const char* key) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) wrong_type(key, "a string", *it);
  return it->get<std::string>();
}

/// `grammar` (GBNF) and `response_format` → s.grammar; an invalid grammar or schema, or a schema
/// feature we do not implement, is a 400 naming the field and what is wrong (with its position).
void parse_constraint(const ojson& b, SamplingOptions& s) {
  const auto compile = [](const std::string& gbnf, const char* param) {
    try {
      return runtime::Grammar::parse(gbnf);
    } catch (const Error& e) {
      bad(param, std::string(param) + ": " + e.message());
    }
  };
  if (auto g = get_string(b, "grammar")) s.grammar = compile(*g, "grammar");
  auto it = b.find("response_format");
  if (it == b.end() || it->is_null()) return;
  if (!it->is_object()) wrong_type("response_format", "an object", *it);
  const std::string t = get_string(*it, "type").value_or("text");
  if (t == "text") return;
  if (s.grammar) bad("response_format", "'grammar' and a response_format other than text exclude each other");
  if (t == "json_object") {
    s.grammar = compile(runtime::json_object_gbnf(), "response_format");
  } else if (t == "json_schema") {
    auto js = it->find("json_schema");
    if (js == it->end() || !js->is_object())
      bad("response_format", "response_format json_schema needs a 'json_schema' object");
    auto sc = js->find("schema");
    if (sc == js->end()) bad("response_format", "response_format.json_schema needs a 'schema'");
    std::string gbnf;
    try {
      gbnf = runtime::json_schema_gbnf(*sc);
    } catch (const Error& e) {
      bad("response_format", "response_format.json_schema.schema: " + e.message());
    }
    s.grammar = compile(gbnf, "response_format");
  } else {
    bad("response_format",
        "response_format type '" + t + "' is not supported (\"text\", \"json_object\" or \"json_schema\")");
  }
}

void parse_sampling(const ojson& b, SamplingOptions& s, bool chat) {
  if (auto v = get_number(b, "temperature", 0.0, 2.0)) s.sampler.temperature = static_cast<float>(*v);
  if (auto v = get_number(b, "top_p", 0.0, 1.0)) s.sampler.top_p = static_cast<float>(*v);
  if (auto v = get_int(b, "top_k", -1, 1 << 30)) s.sampler.top_k = static_cast<int>(*v);
  if (auto v = get_number(b, "min_p", 0.0, 1.0)) s.sampler.min_p = static_cast<float>(*v);
  // The penalties are the engine's (Job::repeat_penalty); the sampler's own stay neutral.
  s.sampler.repeat_penalty = 1.0f;
  s.sampler.presence_penalty = 0.0f;
  // vLLM's name, then llama.cpp server's (the latter wins when both are given)
  if (auto v = get_number(b, "repetition_penalty", 0.01, 10.0)) s.repeat_penalty = static_cast<float>(*v);
  if (auto v = get_number(b, "repeat_penalty", 0.01, 10.0)) s.repeat_penalty = static_cast<float>(*v);
  if (auto v = get_number(b, "presence_penalty", -2.0, 2.0)) s.presence_penalty = static_cast<float>(*v);
  if (auto v = get_number(b, "frequency_penalty", -2.0, 2.0)) s.frequency_penalty = static_cast<float>(*v);
  if (auto v = get_int(b, "seed", INT64_MIN, INT64_MAX)) s.sampler.seed = static_cast<uint64_t>(*v);
  if (s.sampler.temperature < 1e-6f)
    s.sampler = [&] {
      auto g = runtime::SamplerParams::greedy();
      g.seed = s.sampler.seed;
      return g;
    }();
  // completions take 0 with echo (score the prompt, generate nothing: parse_completion_request)
  std::optional<int64_t> mt = get_int(b, "max_tokens", chat ? 1 : 0, INT32_MAX);
  if (chat) {
    if (auto v = get_int(b, "max_completion_tokens", 1, INT32_MAX)) mt = v;
  }
  if (mt) s.max_tokens = static_cast<size_t>(*mt);
  if (auto it = b.find("stop"); it != b.end() && !it->is_null()) {
    if (it->is_string()) {
      s.stop.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      if (it->size() > 4) bad("stop", "'stop' takes at most 4 sequences");
      for (const auto& x : *it) {
        if (!x.is_string()) wrong_type("stop", "a string or an array of strings", x);
        s.stop.push_back(x.get<std::string>());
      }
    } else {
      wrong_type("stop", "a string or an array of strings", *it);
    }
    for (const auto& x : s.stop)
      if (x.empty()) bad("stop", "'stop' sequences must not be empty");
  }
  if (auto it = b.find("logit_bias"); it != b.end() && !it->is_null()) {
    if (!it->is_object()) wrong_type("logit_bias", "an object of token id → bias", *it);
    for (const auto& [k, v] : it->items()) {
      char* end = nullptr;
      const unsigned long long id = std::strtoull(k.c_str(), &end, 10);
      if (k.empty() || *end != '\0' || !std::isdigit(static_cast<unsigned char>(k[0])) || id > UINT32_MAX)
        bad("logit_bias", "logit_bias key '" + k + "' is not a token id");
      if (!v.is_number()) wrong_type("logit_bias", "a number for each token id", v);
      const double bias = v.get<double>();
      if (!(bias >= -100.0 && bias <= 100.0))
        bad("logit_bias", fmt::format("logit_bias[{}] = {} is out of range [-100, 100]", k, v.dump()));
      s.logit_bias.emplace_back(static_cast<uint32_t>(id), static_cast<float>(bias));
    }
  }
  if (auto v = get_int(b, "n", 1, 1 << 20); v && *v != 1) bad("n", "only n = 1 is supported");
  parse_constraint(b, s);
  if (auto it = b.find("stream_options"); it != b.end() && !it->is_null() && !it->is_object())
    wrong_type("stream_options", "an object", *it);
}

/// `cortiq.<key>` as a string, or nullopt when absent / null.
std::optional<std::string> parse_cortiq(const ojson& b, const char* key) {
  auto it = b.find("cortiq");
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) wrong_type("cortiq", "an object", *it);
  auto t = it->find(key);
  if (t == it->end() || t->is_null()) return std::nullopt;
  if (!t->is_string()) wrong_type(std::string("cortiq.") + key, "a string", *t);
  return t->get<std::string>();
}

std::optional<std::string> parse_task(const ojson& b) {
  return parse_cortiq(b, "task");
}

/// stream_options.include_usage; stream_options without `stream: true` is refused, as OpenAI does.
bool include_usage(const ojson& b) {
  auto it = b.find("stream_options");
  if (it == b.end() || it->is_null()) return false;
  if (!get_bool(b, "stream").value_or(false))
    bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
  if (!it->is_object()) return false;
  auto v = get_bool(*it, "include_usage");
  return v.value_or(false);
}

std::string content_text(const ojson& c, const std::string& where) {
  if (c.is_null()) return "";
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) wrong_type(where, "a string, an array of content parts or null", c);
  std::string out;
  bool first = true;
  for (const auto& p : c) {
    if (p.is_string()) {  // lenient: bare strings as parts
      if (!first) out += '\n';
      out += p.get<std::string>();
      first = false;
      continue;
    }
    if (!p.is_object()) wrong_type(where, "an array of content part objects", p);
    const auto type = p.value("type", std::string("text"));
    if (type != "text")
      bad(where,
          "content part type '" + type + "' is not supported: this model is text-only (send \"text\" parts)");
    auto t = p.find("text");
    if (t == p.end() || !t->is_string()) bad(where, "a \"text\" content part needs a string 'text'");
    if (!first) out += '\n';
    out += t->get<std::string>();
    first = false;
  }
  return out;
}

}  // namespace

ojson error_body(const ApiError& e) {
  ojson err = {{"message", e.what()}, {"type", e.type}};
  err["param"] = e.param ? ojson(*e.param) : ojson(nullptr);
  err["code"] = e.code ? ojson(*e.code) : ojson(nullptr);
  return {{"error", err}};
}

ojson error_body(int status, std::string_view message) {
  return error_body(ApiError(status, std::string(message), status_type(status)));
}

ApiError api_error_of(std::exception_ptr ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const ApiError& e) {
    return e;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::InvalidArgument) return ApiError(400, e.message(), "invalid_request_error");
    return ApiError(500, e.what(), "server_error");
  } catch (const std::bad_alloc&) {
    return ApiError(500, "out of memory while answering the request (std::bad_alloc)", "server_error");
  } catch (const std::exception& e) {
    return ApiError(500, std::string("internal error: ") + e.what(), "server_error");
  } catch (...) {
    return ApiError(500, "internal error: an exception that is not a std::exception", "server_error");
  }
}

std::string dump_json(const ojson& j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

ChatCompletionRequest parse_chat_request(const ojson& b) {
  if (!b.is_object()) throw ApiError(400, "the request body must be a JSON object");
  ChatCompletionRequest r;
  r.model = get_string(b, "model").value_or("");
  auto mit = b.find("messages");
  if (mit == b.end() || mit->is_null()) bad("messages", "'messages' is required");
  if (!mit->is_array()) wrong_type("messages", "an array", *mit);
  if (mit->empty()) bad("messages", "'messages' must not be empty");
  for (size_t i = 0; i < mit->size(); ++i) {
    const auto& m = (*mit)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) wrong_type(where, "an object", m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) bad(where + ".role", where + ".role must be a string");
    std::string rs = role->get<std::string>();
    if (rs == "developer") rs = "system";
    if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool")
      bad(where + ".role", "unknown role '" + rs + "' (system, developer, user, assistant, tool)");
    ojson out = ojson::object();
    out["role"] = rs;
    auto c = m.find("content");
    const bool has_calls = m.contains("tool_calls") && !m["tool_calls"].is_null();
    if (rs != "assistant" && (c == m.end() || c->is_null()))
      bad(where + ".content", where + ".content is required for a '" + rs + "' message");
    if (rs == "assistant" && !has_calls && (c == m.end() || c->is_null()))
      bad(where + ".content", where + ".content is required unless the message has tool_calls");
    out["content"] = c == m.end() ? std::string() : content_text(*c, where + ".content");
    if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
      if (!tc->is_array()) wrong_type(where + ".tool_calls", "an array", *tc);
      ojson calls = ojson::array();
      for (const auto& call : *tc) {
        if (!call.is_object()) wrong_type(where + ".tool_calls[]", "an object", call);
        ojson cc = call;
        auto f = call.find("function");
        if (f == call.end() || !f->is_object())
          bad(where + ".tool_calls", "each tool call needs a 'function' object");
        if (!f->contains("name") || !(*f)["name"].is_string())
          bad(where + ".tool_calls", "each tool call needs a string function.name");
        if (!call.contains("id") || !call["id"].is_string())
          bad(where + ".tool_calls", "each tool call needs a string 'id' (the tool message answers it)");
        if (auto a = f->find("arguments"); a != f->end() && a->is_string()) {
          auto parsed = ojson::parse(a->get<std::string>(), nullptr, false);
          if (!parsed.is_discarded()) cc["function"]["arguments"] = parsed;
        }
        calls.push_back(cc);
      }
      out["tool_calls"] = calls;
    }
    if (auto v = get_string(m, "tool_call_id"))
      out["tool_call_id"] = *v;
    else if (rs == "tool")
      bad(where + ".tool_call_id", "a 'tool' message needs 'tool_call_id' (the id of the call it answers)");
    if (auto v = get_string(m, "name")) out["name"] = *v;
    // an earlier answer's reasoning, as this server returns it (Qwen3's template renders it back)
    if (auto v = get_string(m, "reasoning_content"); v && rs == "assistant") out["reasoning_content"] = *v;
    r.messages.push_back(out);
  }
  if (auto t = b.find("tools"); t != b.end() && !t->is_null()) {
    if (!t->is_array()) wrong_type("tools", "an array", *t);
    for (const auto& x : *t)
      if (!x.is_object() || !x.contains("function") || !x["function"].is_object() ||
          !x["function"].contains("name") || !x["function"]["name"].is_string())
        bad("tools", "each tool must be {\"type\":\"function\",\"function\":{\"name\":…}}");
    if (!t->empty()) r.tools = *t;
  }
  if (auto tc = b.find("tool_choice"); tc != b.end() && !tc->is_null()) {
    if (tc->is_string()) {
      r.tool_choice = tc->get<std::string>();
      if (r.tool_choice != "auto" && r.tool_choice != "none" && r.tool_choice != "required")
        bad("tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or a function object");
    } else if (tc->is_object()) {
      auto f = tc->find("function");
      if (f == tc->end() || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string())
        bad("tool_choice", "tool_choice object needs function.name");
      r.tool_choice = (*f)["name"].get<std::string>();
    } else {
      wrong_type("tool_choice", "a string or an object", *tc);
    }
  }
  if (r.tool_choice != "auto" && r.tool_choice != "none") {
    if (r.tools.is_null())
      bad("tool_choice", "tool_choice '" + r.tool_choice + "' needs a non-empty 'tools' array");
    if (r.tool_choice != "required") {
      bool found = false;
      for (const auto& t : r.tools) found = found || t["function"]["name"] == r.tool_choice;
      if (!found) bad("tool_choice", "tool_choice names '" + r.tool_choice + "', which is not in 'tools'");
    }
  }
  if (r.tool_choice == "none") r.tools = nullptr;
  r.stream = get_bool(b, "stream").value_or(false);
  r.include_usage = include_usage(b);
  parse_sampling(b, r.sampling, true);
  r.sampling.logprobs = get_bool(b, "logprobs").value_or(false);
  if (auto v = get_int(b, "top_logprobs", 0, 20)) {
    if (!r.sampling.logprobs) bad("top_logprobs", "'top_logprobs' requires 'logprobs': true");
    r.sampling.top_logprobs = static_cast<int>(*v);
  }
  r.task = parse_task(b);
  r.skill = parse_cortiq(b, "skill");
  if (auto v = get_bool(b, "enable_thinking")) r.enable_thinking = v;
  if (auto k = b.find("chat_template_kwargs"); k != b.end() && !k->is_null()) {
    if (!k->is_object()) wrong_type("chat_template_kwargs", "an object", *k);
    if (auto v = get_bool(*k, "enable_thinking")) r.enable_thinking = v;
  }
  return r;
}

CompletionRequest parse_completion_request(const ojson& b) {
  if (!b.is_object()) throw ApiError(400, "the request body must be a JSON object");
  CompletionRequest r;
  r.model = get_string(b, "model").value_or("");
  auto p = b.find("prompt");
  if (p == b.end() || p->is_null()) bad("prompt", "'prompt' is required");
  auto ids_of = [](const ojson& a) {
    std::vector<uint32_t> ids;
    for (const auto& x : a) {
      if (!x.is_number_integer() && !x.is_number_unsigned()) bad("prompt", "token ids must be integers");
      const int64_t v = x.get<int64_t>();
      if (v < 0 || v > UINT32_MAX) bad("prompt", "token id " + std::to_string(v) + " is out of range");
      ids.push_back(static_cast<uint32_t>(v));
    }
    return ids;
  };
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array()) {
    if (p->empty()) bad("prompt", "'prompt' must not be empty");
    if ((*p)[0].is_string()) {
      if (p->size() != 1) bad("prompt", "only one prompt per request is supported");
      r.prompt_text = (*p)[0].get<std::string>();
    } else if ((*p)[0].is_array()) {
      if (p->size() != 1) bad("prompt", "only one prompt per request is supported");
      r.prompt_ids = ids_of((*p)[0]);
    } else {
      r.prompt_ids = ids_of(*p);
    }
  } else {
    wrong_type("prompt", "a string, an array of strings or an array of token ids", *p);
  }
  if (r.prompt_ids && r.prompt_ids->empty()) bad("prompt", "'prompt' must not be empty");
  r.stream = get_bool(b, "stream").value_or(false);
  r.include_usage = include_usage(b);
  r.echo = get_bool(b, "echo").value_or(false);
  // Fields of OpenAI's legacy API this server does not implement: refused rather than ignored.
  if (auto v = get_string(b, "suffix"); v && !v->empty())
    bad("suffix", "'suffix' (text after the insertion point) is not supported");
  if (auto v = get_int(b, "best_of", 1, 1 << 20); v && *v != 1)
    bad("best_of", "only best_of = 1 is supported");
  if (b.contains("top_logprobs") && !b["top_logprobs"].is_null())
    bad("top_logprobs",
        "'top_logprobs' is a chat completions field; /v1/completions takes 'logprobs': N (0-5)");
  parse_sampling(b, r.sampling, false);
  if (!b.contains("max_tokens")) r.sampling.max_tokens = 16;  // OpenAI's legacy default
  if (r.sampling.max_tokens == size_t{0} && !r.echo)
    bad("max_tokens",
        "'max_tokens' = 0 generates nothing; it is only allowed with 'echo': true (scoring the prompt)");
  if (auto v = get_int(b, "logprobs", 0, 5)) {
    r.sampling.logprobs = true;
    r.sampling.top_logprobs = static_cast<int>(*v);
  }
  r.task = parse_task(b);
  r.skill = parse_cortiq(b, "skill");
  return r;
}

// ---------------------------------------------------------------------------------------------
// Tool-call ids in Mistral's form (the rest of the tool-call and reasoning protocol:
// tokenizer/output_protocol)

std::string mistral_call_id(const std::string& id) {
  const bool ok =
      id.size() == 9 && std::all_of(id.begin(), id.end(), [](unsigned char c) { return std::isalnum(c); });
  if (ok) return id;
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  uint64_t h = cmf::hash64(id);
  std::string out(9, 'a');
  for (char& c : out) {  // 62^9 ≈ 1.35e16 < 2^64
    c = kAlnum[h % 62];
    h /= 62;
  }
  return out;
}

void mistral_call_ids(ojson& messages) {
  for (auto& m : messages) {
    if (auto tc = m.find("tool_calls"); tc != m.end() && tc->is_array())
      for (auto& call : *tc)
        if (call.contains("id") && call["id"].is_string())
          call["id"] = mistral_call_id(call["id"].get<std::string>());
    if (auto id = m.find("tool_call_id"); id != m.end() && id->is_string())
      *id = mistral_call_id(id->get<std::string>());
  }
}

std::string sse_event(const ojson& j) {
  return "data: " + dump_json(j) + "\n\n";
}

std::string logprob_token(std::string_view bytes) {
  if (is_valid_utf8(bytes)) return std::string(bytes);
  std::string out = "bytes:";
  for (unsigned char c : bytes) out += fmt::format("\\x{:02x}", c);
  return out;
}

}  // namespace cortiq::server
