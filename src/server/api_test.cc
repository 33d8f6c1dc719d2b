// Request model, tool-call parsing and error shapes of the OpenAI server (PITFALLS SRV-2, SRV-3).
#include "server/api.h"

#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>

#include "tokenizer/chat_template.h"
#include "util/error.h"

namespace cortiq::server {
namespace {

ojson J(const char* s) {
  return ojson::parse(s);
}

/// The chat template of ../shared/models/tokenizer-NAME (nullopt when ../shared is missing).
std::optional<ChatTemplate> shared_template(const std::string& name) {
  const std::string path =
      std::string(CORTIQ_SOURCE_DIR) + "/../shared/models/tokenizer-" + name + "/tokenizer_config.json";
  if (!std::filesystem::exists(path)) return std::nullopt;
  std::ifstream f(path);
  return ChatTemplate::from_tokenizer_config(nlohmann::ordered_json::parse(f));
}

int status_of(const std::function<void()>& f, std::string* param = nullptr) {
  try {
    f();
  } catch (const ApiError& e) {
    if (param) *param = e.param.value_or("");
    return e.status;
  }
  return 200;
}

TEST(ChatRequest, ContentPartsEqualStringForm) {  // SRV-2
  auto parts =
      parse_chat_request(J(R"({"messages":[{"role":"system","content":[{"type":"text","text":"Be brief."}]},
      {"role":"user","content":[{"type":"text","text":"Hi"}]}]})"));
  auto plain = parse_chat_request(J(R"({"messages":[{"role":"system","content":"Be brief."},
      {"role":"user","content":"Hi"}]})"));
  EXPECT_EQ(parts.messages, plain.messages);
  EXPECT_EQ(parts.messages[1]["content"], "Hi");
  // Several parts: joined with "\n" (the documented rule).
  auto multi = parse_chat_request(J(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})"));
  EXPECT_EQ(multi.messages[0]["content"], "a\nb");
}

TEST(ChatRequest, ImagePartIsRejected) {  // SRV-2
  std::string param;
  EXPECT_EQ(
      400,
      status_of(
          [] {
            parse_chat_request(J(
                R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})"));
          },
          &param));
  EXPECT_EQ(param, "messages[0].content");
}

TEST(ChatRequest, NullOrMissingContentWithToolCalls) {  // SRV-3
  const char* with_null =
      R"({"messages":[{"role":"user","content":"Get the secret number"},{"role":"assistant","content":null,
    "tool_calls":[{"id":"c1","type":"function","function":{"name":"get_secret_number","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"c1","content":"42.69"}]})";
  const char* without = R"({"messages":[{"role":"user","content":"Get the secret number"},{"role":"assistant",
    "tool_calls":[{"id":"c1","type":"function","function":{"name":"get_secret_number","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"c1","content":"42.69"}]})";
  auto a = parse_chat_request(J(with_null));
  auto b = parse_chat_request(J(without));
  EXPECT_EQ(a.messages, b.messages);
  EXPECT_EQ(a.messages[1]["content"], "");
  EXPECT_TRUE(a.messages[1]["tool_calls"][0]["function"]["arguments"].is_object());  // string parsed
  EXPECT_EQ(a.messages[2]["tool_call_id"], "c1");

  const auto shared = shared_template("qwen3");
  if (!shared) GTEST_SKIP() << "../shared missing";
  const ChatTemplate& tpl = *shared;
  for (const auto* r : {&a, &b}) {
    ChatRequest cr;
    cr.messages = r->messages;
    EXPECT_EQ(
        tpl.apply(cr),
        "<|im_start|>user\nGet the secret number<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": "
        "\"get_secret_number\", \"arguments\": "
        "{}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n42.69\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n");
  }
}

// Qwen3 reads an earlier answer's reasoning_content back into its <think> block (the turn after the
// last user message, here a tool-call round trip).
TEST(ChatRequest, AssistantReasoningContentReachesTheTemplate) {
  auto r = parse_chat_request(J(R"({"messages":[{"role":"user","content":"Get the secret number"},
    {"role":"assistant","reasoning_content":"I should call the tool.","content":null,
     "tool_calls":[{"id":"c1","type":"function","function":{"name":"get_secret_number","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"c1","content":"42.69"}]})"));
  EXPECT_EQ(r.messages[1]["reasoning_content"], "I should call the tool.");
  const auto shared = shared_template("qwen3");
  if (!shared) GTEST_SKIP() << "../shared missing";
  const ChatTemplate& tpl = *shared;
  EXPECT_TRUE(template_has_reasoning(tpl.source()));
  ChatRequest cr;
  cr.messages = r.messages;
  EXPECT_EQ(
      tpl.apply(cr),
      "<|im_start|>user\nGet the secret number<|im_end|>\n<|im_start|>assistant\n<think>\nI should call "
      "the tool.\n</think>\n\n<tool_call>\n{\"name\": \"get_secret_number\", \"arguments\": "
      "{}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n42.69\n"
      "</tool_response><|im_end|>\n<|im_start|>assistant\n");
  cr.enable_thinking = false;  // the generation prompt closes an empty block: the model answers directly
  EXPECT_FALSE(prompt_opens_reasoning(tpl.apply(cr)));
}

TEST(ChatRequest, WrongTypesAndRangesAre400WithParam) {
  struct Case {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"messages":"hi"})", "messages"},
      {R"({"messages":[]})", "messages"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":3})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_p":1.5})", "top_p"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2.5})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"stream":"yes"})", "stream"},
      {R"({"messages":[{"role":"user","content":"x"}],"stop":[1]})", "stop"},
      {R"({"messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]})", "stop"},
      {R"({"messages":[{"role":"user","content":"x"}],"n":2})", "n"},
      {R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}})", "response_format"},
      {R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema"}})",
       "response_format"},
      {R"({"messages":[{"role":"user","content":"x"}],"grammar":"root ::= \"a\" b"})", "grammar"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":3})", "top_logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})", "top_logprobs"},
      {R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":"x"}],"tools":{}})", "tools"},
      {R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"sometimes"})", "tool_choice"},
      {R"({"messages":[{"role":"user","content":"x"}],"cortiq":{"task":3}})", "cortiq.task"},
  };
  for (const auto& c : cases) {
    std::string param;
    EXPECT_EQ(400, status_of([&] { parse_chat_request(J(c.body)); }, &param)) << c.body;
    EXPECT_EQ(param, c.param) << c.body;
  }
  EXPECT_EQ(400, status_of([] { parse_chat_request(J("[1,2]")); }));
}

TEST(ChatRequest, LogitBias) {
  auto r = parse_chat_request(
      J(R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"7":-100,"12":2.5}})"));
  ASSERT_EQ(r.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(r.sampling.logit_bias[0], (std::pair<uint32_t, float>{7, -100.0f}));  // request order
  EXPECT_EQ(r.sampling.logit_bias[1], (std::pair<uint32_t, float>{12, 2.5f}));
  for (const char* bad : {R"({"x":1})", R"({"-3":1})", R"({"7":101})", R"({"7":"a"})", R"([1])"}) {
    const std::string body =
        std::string(R"({"messages":[{"role":"user","content":"x"}],"logit_bias":)") + bad + "}";
    std::string param;
    EXPECT_EQ(400, status_of([&] { parse_chat_request(J(body.c_str())); }, &param)) << bad;
    EXPECT_EQ(param, "logit_bias") << bad;
  }
}

// Range errors print the bounds as a user wrote them ("[0, 2]", not "[0.000000, 2.000000]").
TEST(ChatRequest, RangeMessagesNameTheBounds) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":3})",
       "'temperature' = 3 is out of range [0, 2]"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_p":1.5})", "'top_p' = 1.5 is out of range [0, 1]"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0.0})",
       "'max_tokens' = 0.0 is out of range [1, 2147483647]"},
  };
  for (const auto& [body, want] : cases) try {
      parse_chat_request(J(body));
      ADD_FAILURE() << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(std::string(e.what()), want) << body;
    }
}

TEST(ChatRequest, SamplingFields) {
  auto r = parse_chat_request(J(R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":0.5,
      "top_p":0.8,"top_k":7,"min_p":0.1,"seed":42,"max_completion_tokens":9,"stop":"END","presence_penalty":0.5,
      "frequency_penalty":0.25,"logprobs":true,"top_logprobs":2,"stream":true,"stream_options":{"include_usage":true},
      "cortiq":{"task":"code"},"tool_choice":"none","tools":[{"type":"function","function":{"name":"f"}}]})"));
  EXPECT_EQ(r.model, "m");
  EXPECT_FLOAT_EQ(r.sampling.sampler.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.sampler.top_p, 0.8f);
  EXPECT_EQ(r.sampling.sampler.top_k, 7);
  EXPECT_FLOAT_EQ(r.sampling.sampler.min_p, 0.1f);
  EXPECT_EQ(r.sampling.sampler.seed, 42u);
  EXPECT_FLOAT_EQ(r.sampling.repeat_penalty, 1.0f);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.sampler.presence_penalty, 0.0f);  // the engine applies it, not the sampler
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, 0.25f);
  EXPECT_EQ(r.sampling.max_tokens, 9u);
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r.sampling.logprobs);
  EXPECT_EQ(r.sampling.top_logprobs, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.task, "code");
  EXPECT_TRUE(r.tools.is_null());  // hidden by tool_choice none
  // temperature 0 → the greedy chain (as `cortiq run --greedy`).
  auto g = parse_chat_request(J(R"({"messages":[{"role":"user","content":"x"}],"temperature":0})"));
  EXPECT_LT(g.sampling.sampler.temperature, 1e-6f);
  EXPECT_FLOAT_EQ(g.sampling.repeat_penalty, 1.0f);
  EXPECT_FALSE(g.sampling.max_tokens.has_value());
}

TEST(CompletionRequest, PromptForms) {
  EXPECT_EQ(parse_completion_request(J(R"({"prompt":"hi"})")).prompt_text, "hi");
  EXPECT_EQ(parse_completion_request(J(R"({"prompt":["hi"]})")).prompt_text, "hi");
  EXPECT_EQ(parse_completion_request(J(R"({"prompt":[1,2,3]})")).prompt_ids,
            (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(parse_completion_request(J(R"({"prompt":[[4,5]]})")).prompt_ids, (std::vector<uint32_t>{4, 5}));
  EXPECT_EQ(parse_completion_request(J(R"({"prompt":"x"})")).sampling.max_tokens,
            16u);  // OpenAI legacy default
  auto lp = parse_completion_request(J(R"({"prompt":"x","logprobs":3})"));
  EXPECT_TRUE(lp.sampling.logprobs);
  EXPECT_EQ(lp.sampling.top_logprobs, 3);
  for (const char* b :
       {R"({})", R"({"prompt":5})", R"({"prompt":[1,-1]})", R"({"prompt":[]})", R"({"prompt":["a","b"]})",
        R"({"prompt":"x","logprobs":6})", R"({"prompt":"x","echo":1})",
        // not implemented, so refused rather than ignored; stream_options needs stream (OpenAI)
        R"({"prompt":"x","suffix":" end."})", R"({"prompt":"x","best_of":3})",
        R"({"prompt":"x","stream_options":{"include_usage":true}})",
        R"({"prompt":"x","stream":false,"stream_options":{}})", R"({"prompt":"x","max_tokens":0})",
        R"({"prompt":"x","logprobs":2,"top_logprobs":2})"})
    EXPECT_EQ(400, status_of([&] { parse_completion_request(J(b)); })) << b;
  for (const char* b : {R"({"prompt":"x","suffix":""})", R"({"prompt":"x","suffix":null,"best_of":1})",
                        R"({"prompt":"x","stream":true,"stream_options":{"include_usage":true}})",
                        R"({"prompt":"x","max_tokens":0,"echo":true})"})
    EXPECT_EQ(200, status_of([&] { parse_completion_request(J(b)); })) << b;
  EXPECT_EQ(parse_completion_request(J(R"({"prompt":"x"})")).sampling.repeat_penalty, 1.0f);
  // llama.cpp server's field name and vLLM's; the sampler's own penalty stays neutral
  const auto rp = parse_completion_request(J(R"({"prompt":"x","repeat_penalty":1.3})")).sampling;
  EXPECT_EQ(rp.repeat_penalty, 1.3f);
  EXPECT_EQ(rp.sampler.repeat_penalty, 1.0f);
  EXPECT_EQ(parse_completion_request(J(R"({"prompt":"x","repetition_penalty":1.2})")).sampling.repeat_penalty,
            1.2f);
}

// Mistral's templates raise for ids other than 9 alphanumerics: OpenAI-style "call_…" ids of a
// replayed conversation are mapped (the same id to the same 9 characters in the call and in the tool
// message answering it), and Mistral Nemo's template then renders the round trip.
TEST(ToolCalls, MistralCallIdsAreMappedToNineAlphanumerics) {
  EXPECT_EQ(mistral_call_id("Ab3dE6gh9"), "Ab3dE6gh9");
  const std::string m = mistral_call_id("call_abc123def456");
  EXPECT_EQ(m.size(), 9u);
  for (char c : m) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << m;
  EXPECT_EQ(mistral_call_id("call_abc123def456"), m);
  EXPECT_NE(mistral_call_id("call_abc123def457"), m);
  auto r = parse_chat_request(J(R"({"messages":[{"role":"user","content":"Weather in Paris?"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"call_abc123def456","type":"function",
      "function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},
    {"role":"tool","tool_call_id":"call_abc123def456","content":"18 C"}]})"));
  mistral_call_ids(r.messages);
  EXPECT_EQ(r.messages[1]["tool_calls"][0]["id"], m);
  EXPECT_EQ(r.messages[2]["tool_call_id"], m);
  const auto shared = shared_template("mistral-nemo");
  if (!shared) GTEST_SKIP() << "../shared missing";
  const ChatTemplate& tpl = *shared;
  ChatRequest cr;
  cr.messages = r.messages;
  const std::string out = tpl.apply(cr);
  EXPECT_NE(
      out.find("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"" +
               m + "\"}]"),
      std::string::npos)
      << out;
}

// OpenAI's message rules: a tool message answers a call id, user/system/tool messages have content,
// a replayed call has an id, and tool_choice other than auto/none needs tools (and a declared name).
TEST(ChatRequest, ToolMessagesAndToolChoiceAreChecked) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"messages":[{"role":"user","content":"hi"},{"role":"tool","content":"42"}]})",
       "messages[1].tool_call_id"},
      {R"({"messages":[{"role":"user"}]})", "messages[0].content"},
      {R"({"messages":[{"role":"assistant"}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,
        "tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}]})",
       "messages[1].tool_calls"},
      {R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required"})", "tool_choice"},
      {R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],
        "tool_choice":{"type":"function","function":{"name":"g"}}})",
       "tool_choice"},
  };
  for (const auto& c : cases) {
    const char* body = c.first;  // (a structured binding cannot be captured before clang 16)
    std::string got;
    EXPECT_EQ(400, status_of([&] { parse_chat_request(J(body)); }, &got)) << body;
    EXPECT_EQ(got, c.second) << body;
  }
  auto ok = parse_chat_request(J(R"({"messages":[{"role":"user","content":"x"}],
      "tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}}})"));
  EXPECT_EQ(ok.tool_choice, "f");
}

TEST(Errors, OpenAIShape) {
  auto b = error_body(ApiError(400, "bad thing", "invalid_request_error", "temperature", "invalid_value"));
  EXPECT_EQ(
      b,
      J(R"({"error":{"message":"bad thing","type":"invalid_request_error","param":"temperature","code":"invalid_value"}})"));
  auto n = error_body(404, "no such route");
  EXPECT_EQ(n["error"]["type"], "not_found_error");
  EXPECT_TRUE(n["error"]["param"].is_null());
  EXPECT_EQ(error_body(401, "x")["error"]["type"], "authentication_error");
  EXPECT_EQ(error_body(500, "x")["error"]["type"], "server_error");
  EXPECT_EQ(sse_event(J(R"({"a":1})")), "data: {\"a\":1}\n\n");
}

}  // namespace
}  // namespace cortiq::server

namespace cortiq::server {
namespace {

// A token that holds part of a UTF-8 character is spelled as OpenAI spells it; whole characters
// pass through unchanged.
TEST(Logprobs, PartialCharacterTokenIsSpelledAsBytes) {
  EXPECT_EQ(logprob_token("\xE2\x80"), "bytes:\\xe2\\x80");
  EXPECT_EQ(logprob_token("\xF0"), "bytes:\\xf0");
  EXPECT_EQ(logprob_token(" time"), " time");
  EXPECT_EQ(logprob_token("\xE2\x80\x94"), "\xE2\x80\x94");  // a whole em dash
  EXPECT_EQ(logprob_token(""), "");
}

// An exception escaping a route handler becomes that request's OpenAI error (issue 27 §2): the
// status and a message naming the cause, whatever was thrown.
TEST(HandlerErrors, EveryExceptionMapsToAnOpenAIError) {
  auto of = [](auto thrown) {
    try {
      throw thrown;
    } catch (...) {
      return api_error_of(std::current_exception());
    }
  };
  ApiError e = of(ApiError(404, "no such model", "invalid_request_error", "model", "model_not_found"));
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  e = of(Error(ErrorKind::InvalidArgument, "logit_bias out of range"));
  EXPECT_EQ(e.status, 400);
  EXPECT_STREQ(e.what(), "logit_bias out of range");
  EXPECT_EQ(e.type, "invalid_request_error");
  e = of(Error(ErrorKind::NonFinite, "layer 3 produced NaN"));
  EXPECT_EQ(e.status, 500);
  EXPECT_STREQ(e.what(), "NonFinite: layer 3 produced NaN");
  EXPECT_EQ(e.type, "server_error");
  e = of(std::bad_alloc());
  EXPECT_EQ(e.status, 500);
  EXPECT_STREQ(e.what(), "out of memory while answering the request (std::bad_alloc)");
  e = of(std::out_of_range("vector::at"));
  EXPECT_EQ(e.status, 500);
  EXPECT_STREQ(e.what(), "internal error: vector::at");
  e = of(42);
  EXPECT_EQ(e.status, 500);
  EXPECT_STREQ(e.what(), "internal error: an exception that is not a std::exception");
  // the body is OpenAI's shape
  const ojson body = error_body(e);
  EXPECT_EQ(body["error"]["message"], "internal error: an exception that is not a std::exception");
  EXPECT_EQ(body["error"]["type"], "server_error");
  EXPECT_TRUE(body["error"]["param"].is_null());
}

// Serializing an answer never throws: invalid UTF-8 (a partial character from a byte token)
// becomes U+FFFD, in SSE events too.
TEST(HandlerErrors, DumpJsonReplacesInvalidUtf8) {
  const ojson j = {{"text", std::string("ok \xE2\x82 end")}};
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);
  EXPECT_EQ(dump_json(j), "{\"text\":\"ok \xEF\xBF\xBD end\"}");
  EXPECT_EQ(sse_event(j), "data: {\"text\":\"ok \xEF\xBF\xBD end\"}\n\n");
}

}  // namespace
}  // namespace cortiq::server
