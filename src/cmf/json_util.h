// Internal helpers for strict JSON field access (not part of the public API).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.h"

namespace cortiq::cmf::detail {

using json = nlohmann::json;

/// Reads the keys of one JSON object; remembers which were consumed so the rest can be kept as
/// `extra`. Every error is Error(Parse) naming "<path>.<key>".
class Obj {
 public:
  Obj(const json& j, std::string path) : j_(j), path_(std::move(path)) {
    if (!j_.is_object()) fail(ErrorKind::Parse, "{}: expected a JSON object, got {}", path_, j_.type_name());
  }
  std::string key_path(std::string_view k) const { return path_ + "." + std::string(k); }
  /// The value of key k, or nullptr when absent or null.
  const json* get(std::string_view k) {
    used_.insert(std::string(k));
    auto it = j_.find(std::string(k));
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  const json& req(std::string_view k) {
    const json* v = get(k);
    if (!v) fail(ErrorKind::Parse, "{}: missing required key", key_path(k));
    return *v;
  }
  uint64_t u64(const json& v, std::string_view k) const {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer()) {
      int64_t x = v.get<int64_t>();
      if (x >= 0) return static_cast<uint64_t>(x);
    }
    fail(ErrorKind::Parse, "{}: expected a non-negative integer, got {}", key_path(k), v.dump());
  }
  uint32_t u32(const json& v, std::string_view k) const {
    uint64_t x = u64(v, k);
    if (x > std::numeric_limits<uint32_t>::max())
      fail(ErrorKind::Parse, "{}: value {} does not fit in u32", key_path(k), x);
    return static_cast<uint32_t>(x);
  }
  double f64(const json& v, std::string_view k) const {
    if (!v.is_number()) fail(ErrorKind::Parse, "{}: expected a number, got {}", key_path(k), v.dump());
    return v.get<double>();
  }
  bool boolean(const json& v, std::string_view k) const {
    if (!v.is_boolean()) fail(ErrorKind::Parse, "{}: expected a boolean, got {}", key_path(k), v.dump());
    return v.get<bool>();
  }
  std::string str(const json& v, std::string_view k) const {
    if (!v.is_string()) fail(ErrorKind::Parse, "{}: expected a string, got {}", key_path(k), v.dump());
    return v.get<std::string>();
  }

  uint32_t req_u32(std::string_view k) { return u32(req(k), k); }
  uint64_t req_u64(std::string_view k) { return u64(req(k), k); }
  double req_f64(std::string_view k) { return f64(req(k), k); }
  std::string req_str(std::string_view k) { return str(req(k), k); }

  std::optional<uint32_t> opt_u32(std::string_view k) {
    const json* v = get(k);
    if (!v) return std::nullopt;
    return u32(*v, k);
  }
  std::optional<double> opt_f64(std::string_view k) {
    const json* v = get(k);
    if (!v) return std::nullopt;
    return f64(*v, k);
  }
  std::optional<std::string> opt_str(std::string_view k) {
    const json* v = get(k);
    if (!v) return std::nullopt;
    return str(*v, k);
  }
  std::optional<json> opt_json(std::string_view k) {
    const json* v = get(k);
    if (!v) return std::nullopt;
    return *v;
  }
  uint32_t u32_or(std::string_view k, uint32_t d) { return opt_u32(k).value_or(d); }
  double f64_or(std::string_view k, double d) { return opt_f64(k).value_or(d); }
  bool bool_or(std::string_view k, bool d) {
    const json* v = get(k);
    return v ? boolean(*v, k) : d;
  }
  std::vector<uint32_t> u32_array(const json& v, std::string_view k) const {
    if (!v.is_array()) fail(ErrorKind::Parse, "{}: expected an array, got {}", key_path(k), v.type_name());
    std::vector<uint32_t> out;
    out.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) out.push_back(u32(v[i], fmt::format("{}[{}]", k, i)));
    return out;
  }
  std::vector<double> f64_array(const json& v, std::string_view k) const {
    if (!v.is_array()) fail(ErrorKind::Parse, "{}: expected an array, got {}", key_path(k), v.type_name());
    std::vector<double> out;
    out.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) out.push_back(f64(v[i], fmt::format("{}[{}]", k, i)));
    return out;
  }
  /// The keys not consumed, as an object.
  json rest() const {
    json r = json::object();
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!used_.count(it.key())) r[it.key()] = it.value();
    return r;
  }
  const std::string& path() const { return path_; }

 private:
  const json& j_;
  std::string path_;
  std::set<std::string> used_;
};

/// Merges `extra` keys into `out` (known keys already in `out` win).
inline void merge_extra(json& out, const json& extra) {
  if (!extra.is_object()) return;
  for (auto it = extra.begin(); it != extra.end(); ++it)
    if (!out.contains(it.key())) out[it.key()] = it.value();
}

}  // namespace cortiq::cmf::detail
