// libFuzzer target for the Jinja engine (tokenizer/jinja/jinja.h): the input is a template's
// source; it is parsed and rendered with a fixed chat context (messages of every role, a tool
// call, tools, bos/eos, add_generation_prompt), as the server renders a model's chat template.
// The engine's render budget bounds loops, recursion and output size.
// Build: CC=clang CXX=clang++ cmake -DCORTIQ_FUZZ=ON ... && cmake --build . --target jinja_fuzz
// Run:   ./jinja_fuzz tests/fuzz_corpus/jinja_fuzz -dict=tests/fuzz_corpus/jinja_fuzz.dict
// A cortiq::Error (jinja::TemplateError) is an expected outcome; a crash, a sanitizer report,
// a hang or any other exception is a bug.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "tokenizer/jinja/jinja.h"
#include "util/error.h"

namespace {

bool mutation = false;

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Weather in Paris? ünï €"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"t\": 21.5}"},
      {"role": "assistant", "content": "<think>\nsunny\n</think>\n\nIt is 21.5 C."},
      {"role": "user", "content": [{"type": "text", "text": "thanks"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
      "required": ["city"]}}}],
    "documents": null,
    "add_generation_prompt": true,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "enable_thinking": false
  })");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // CI asks every fuzzer to write its seeds (cmf_fuzz's convention); this one's are committed.
  if (std::getenv("CMF_FUZZ_WRITE_SEEDS")) std::exit(0);
  (void)context();
  mutation = std::getenv("CORTIQ_FUZZ_JINJA_NO_MUTATION") == nullptr;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view src(reinterpret_cast<const char*>(data), size);
  cortiq::jinja::Options opt;
  opt.now = 1700000000;  // strftime_now is deterministic
  // Inputs whose first byte is even render in transformers' immutable sandbox, as the server does;
  // odd ones with the list/dict mutators too (CORTIQ_FUZZ_JINJA_NO_MUTATION=1: never). Budgets a
  // 25th of the defaults keep a run at thousands of inputs per second under the sanitizers while
  // every budget error is still reached (the defaults are tested in budget_test.cc).
  opt.allow_mutation = mutation && size > 0 && (data[0] & 1);
  opt.max_steps = 200'000;
  opt.max_bytes = 4u << 20;
  opt.max_items = 1u << 16;
  try {
    const cortiq::jinja::Template t(src);
    (void)t.render(context(), opt);
  } catch (const cortiq::Error&) {
  }
  return 0;
}
