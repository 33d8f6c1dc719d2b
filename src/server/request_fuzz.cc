// libFuzzer target for the server's request parsing (server/api.h), without HTTP: an input that
// is JSON goes through parse_chat_request and parse_completion_request (messages, content parts,
// tools, tool_choice, logit_bias, stop, sampling fields); any input is also read as generated
// text by the tool-call, reasoning and logprob helpers the handlers run on model output.
// Build: CC=clang CXX=clang++ cmake -DCORTIQ_FUZZ=ON ... && cmake --build . --target request_fuzz
// Run:   ./request_fuzz tests/fuzz_corpus/request_fuzz -max_total_time=60
// ApiError is the documented outcome of a bad body; any other exception, a crash or a sanitizer
// report is a bug. ReasoningStream's documented property (its deltas join up to split_reasoning
// of the whole text) is checked and a mismatch aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/api.h"

namespace {

using namespace cortiq::server;

void parse_body(const ojson& body) {
  try {
    ChatCompletionRequest r = parse_chat_request(body);
    mistral_call_ids(r.messages);
    (void)r.messages.dump();
  } catch (const ApiError& e) {
    (void)error_body(e).dump();
  }
  try {
    (void)parse_completion_request(body);
  } catch (const ApiError& e) {
    (void)error_body(e).dump();
  }
}

void check_reasoning(std::string_view text, bool starts_inside, size_t piece) {
  const ReasoningSplit whole = split_reasoning(text, starts_inside);
  ReasoningStream rs(true, starts_inside);
  std::string reasoning, content;
  for (size_t i = 0; i < text.size(); i += piece) {
    const auto d = rs.feed(text.substr(i, piece));
    reasoning += d.reasoning;
    content += d.content;
  }
  const auto d = rs.finish();
  reasoning += d.reasoning;
  content += d.content;
  if (reasoning != whole.reasoning || content != whole.content) {
    std::fprintf(stderr, "ReasoningStream deltas differ from split_reasoning (piece %zu)\n", piece);
    std::abort();
  }
}

void model_output(std::string_view text, uint8_t flags) {
  const ToolFormat formats[] = {ToolFormat::Any, ToolFormat::Hermes, ToolFormat::Mistral,
                                ToolFormat::BareJson};
  ToolContext ctx;
  ctx.format = formats[flags & 3];
  if (flags & 4) ctx.names = {"get_weather", "f"};
  (void)parse_tool_calls(text, (flags & 8) != 0, ctx);
  (void)tool_markup_start(text, (flags & 8) != 0, ctx.format);
  (void)tool_format_of(text);
  (void)template_supports_tools(text);
  (void)template_has_reasoning(text);
  (void)prompt_opens_reasoning(text);
  check_reasoning(text, (flags & 16) != 0, 1 + (flags >> 5));
  (void)logprob_token(text);
  (void)partial_tag_suffix(text, "<tool_call>");
  (void)mistral_call_id(std::string(text.substr(0, 32)));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // CI asks every fuzzer to write its seeds (cmf_fuzz's convention); this one's are committed.
  if (std::getenv("CMF_FUZZ_WRITE_SEEDS")) std::exit(0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const ojson body = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!body.is_discarded()) parse_body(body);
  model_output(text, size ? data[0] : 0);
  return 0;
}
