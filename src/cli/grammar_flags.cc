// --grammar-file / --json-schema (run, serve, bench): the constrained-output flags.
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "runtime/grammar.h"
#include "runtime/json_schema.h"
#include "util/error.h"

namespace cortiq::cli {

std::shared_ptr<const runtime::Grammar> load_grammar(const std::string& grammar_file,
                                                     const std::string& schema_file) {
  if (grammar_file.empty() && schema_file.empty()) return nullptr;
  if (!grammar_file.empty() && !schema_file.empty())
    fail(ErrorKind::InvalidArgument, "--grammar-file and --json-schema exclude each other");
  const std::string& path = grammar_file.empty() ? schema_file : grammar_file;
  const std::string text = read_input(path);
  try {
    if (!grammar_file.empty()) return runtime::Grammar::parse(text);
    const auto schema = nlohmann::ordered_json::parse(text, nullptr, false);
    if (schema.is_discarded()) fail(ErrorKind::Parse, "not valid JSON");
    return runtime::Grammar::parse(runtime::json_schema_gbnf(schema));
  } catch (const Error& e) {
    throw Error(e.kind(), path + ": " + e.message());
  }
}

}  // namespace cortiq::cli
