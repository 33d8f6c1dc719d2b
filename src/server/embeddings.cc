#include "server/embeddings.h"

#include <cstring>

#include "util/base64.h"

namespace cortiq::server {

namespace {

ApiError bad_input(const std::string& why) {
  return ApiError(400, "'input' " + why, "invalid_request_error", "input");
}

/// An array of token ids, or nullopt when `a` is not one (an array holding a non-number).
std::optional<std::vector<uint32_t>> id_array(const ojson& a) {
  std::vector<uint32_t> ids;
  for (const auto& x : a) {
    if (!x.is_number_integer() && !x.is_number_unsigned()) return std::nullopt;
    const int64_t v = x.get<int64_t>();
    if (v < 0 || v > static_cast<int64_t>(UINT32_MAX)) throw bad_input("holds a token id out of range");
    ids.push_back(static_cast<uint32_t>(v));
  }
  return ids;
}

EmbeddingRequest::Input text_input(const ojson& s) {
  if (s.get_ref<const std::string&>().empty()) throw bad_input("holds an empty string");
  return {true, s.get<std::string>(), {}};
}

}  // namespace

EmbeddingRequest parse_embedding_request(const ojson& b) {
  if (!b.is_object()) throw ApiError(400, "the request body must be a JSON object");
  EmbeddingRequest r;
  if (auto m = b.find("model"); m != b.end() && m->is_string()) r.model = m->get<std::string>();
  const auto in = b.find("input");
  if (in == b.end() || in->is_null()) throw bad_input("is required");
  if (in->is_string()) {
    r.inputs.push_back(text_input(*in));
  } else if (in->is_array()) {
    if (in->empty()) throw bad_input("is an empty array");
    if (auto ids = id_array(*in)) {
      r.inputs.push_back({false, {}, std::move(*ids)});
    } else {
      for (const auto& e : *in) {
        if (e.is_string()) {
          r.inputs.push_back(text_input(e));
        } else if (e.is_array()) {
          auto sub = id_array(e);
          if (!sub) throw bad_input("must be a string, an array of strings, or token-id arrays");
          if (sub->empty()) throw bad_input("holds an empty token array");
          r.inputs.push_back({false, {}, std::move(*sub)});
        } else {
          throw bad_input("must be a string, an array of strings, or token-id arrays");
        }
      }
    }
  } else {
    throw bad_input("must be a string, an array of strings, or token-id arrays");
  }
  if (auto f = b.find("encoding_format"); f != b.end() && !f->is_null()) {
    const std::string v = f->is_string() ? f->get<std::string>() : "";
    if (v != "float" && v != "base64")
      throw ApiError(400, "'encoding_format' must be \"float\" or \"base64\"", "invalid_request_error",
                     "encoding_format");
    r.base64 = v == "base64";
  }
  if (auto p = b.find("pooling"); p != b.end() && !p->is_null()) {
    const std::string v = p->is_string() ? p->get<std::string>() : "";
    if (v != "mean" && v != "last")
      throw ApiError(400, "'pooling' must be \"mean\" or \"last\"", "invalid_request_error", "pooling");
    r.pooling = v == "last" ? Pooling::Last : Pooling::Mean;
  }
  if (auto d = b.find("dimensions"); d != b.end() && !d->is_null()) {
    if (!d->is_number_integer() || d->get<int64_t>() <= 0)
      throw ApiError(400, "'dimensions' must be a positive integer", "invalid_request_error", "dimensions");
    r.dimensions = d->get<size_t>();
  }
  return r;
}

std::string floats_base64(std::span<const float> v) {
  std::vector<uint8_t> bytes(v.size() * 4);
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<uint8_t>(u >> (8 * b));
  }
  return base64_encode(bytes);
}

}  // namespace cortiq::server
