// JSON Schema → GBNF (runtime/grammar.h) for structured output (response_format json_schema,
// constrained tool arguments).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace cortiq::runtime {

/// GBNF for any JSON object (response_format {"type": "json_object"}): root is an object whose
/// values are any JSON value; whitespace between tokens is at most one space or a newline plus
/// up to 20 spaces/tabs.
std::string json_object_gbnf();

/// GBNF whose language is the JSON texts valid under `schema` (root rule `root`; further rules are
/// prefixed so the result can be embedded: prefix "" for a standalone grammar). Supported: `type`
/// (a name or a list), object `properties` (emitted in the schema's order, each optional one
/// optional), `required`, `additionalProperties` (false, true/absent = any further keys after the
/// declared ones, or a schema), array `items`, `minItems`, `maxItems`, `enum`, `const`, string
/// `minLength`, `maxLength`, `pattern` (a regex subset: literals, `.`, classes, escapes \d \w \s
/// \D \W \S, groups, `|`, `* + ? {m,n}`; unanchored ends match any text), number, integer,
/// boolean, null, `anyOf`, `oneOf` (as anyOf: alternatives are not made exclusive), `$ref` to
/// `#/$defs/NAME` or `#/definitions/NAME` (recursion allowed), `true` / `{}` (any value).
/// Annotations (title, description, default, examples, $schema, $id, $comment, deprecated,
/// readOnly, writeOnly) are ignored.
/// Throws Error(Unsupported) naming any other keyword, format or pattern feature and its JSON
/// pointer ("JSON schema: 'minimum' at /properties/age is not supported"), never ignoring one, and
/// Error(InvalidArgument) for a malformed schema (a non-object, `false`, a bad $ref, ...).
std::string json_schema_gbnf(const nlohmann::ordered_json& schema, const std::string& prefix = "");

/// GBNF for what a model writes after tokenizer::forced_tool_prefix(tool_choice, …) when
/// `tool_choice` is "required" or a function name: one call of that function (or, for "required",
/// of any function of `tools`, its name first) whose arguments follow the function's `parameters`
/// schema (absent: any object), closed in the template's syntax: Hermes `}` + `</tool_call>`,
/// Mistral `[ARGS]` form the arguments alone (required: NAME `[ARGS]` first), Mistral v3 `}]`,
/// BareJson `}`. `format` is a tokenizer::ToolFormat value (not Any); `tools` the request's
/// OpenAI tools array. Throws as json_schema_gbnf, the message naming the function.
std::string tool_call_gbnf(const nlohmann::ordered_json& tools, const std::string& tool_choice, int format,
                           bool mistral_args);

}  // namespace cortiq::runtime
