// `cortiq diff <a> <b>` — compare two CMF files by tensor name, dtype, shape, stored hash64 and the
// payload bytes themselves, then the header field by field and the vocab and masks sections. Exit
// status as diff(1) and cmp(1): 0 when they hold the same tensors, header and sections, 1 when they
// differ, 2 on trouble (a file that cannot be opened, or a tensor whose data does not match its own
// stored hash: a damaged file).
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cmf/hash.h"
#include "cmf/reader.h"
#include "quant/dtype.h"
#include "util/error.h"

namespace cortiq::cli {
namespace {

/// Exit status of `cortiq diff` when a file cannot be read or is damaged (diff(1), cmp(1)).
constexpr int kDiffTrouble = 2;

/// Whether two equally long payloads (spans of the mapped files) hold the same bytes. Compared in
/// 1 MiB steps straight from the mappings: nothing is copied, so memory stays bounded (the pages
/// are file-backed and the kernel can drop them) however large the tensors are.
bool same_bytes(std::span<const uint8_t> x, std::span<const uint8_t> y) {
  if (x.size() != y.size()) return false;
  constexpr size_t kStep = size_t{1} << 20;
  for (size_t i = 0; i < x.size(); i += kStep) {
    const size_t n = std::min(kStep, x.size() - i);
    if (std::memcmp(x.data() + i, y.data() + i, n) != 0) return false;
  }
  return true;
}

/// One line per tensor of `r` named `t` whose payload does not hash to its stored hash64, or "".
std::string damage_of(const cmf::Reader& r, const cmf::TensorInfo& t) {
  const uint64_t h = cmf::hash64(r.payload(t));
  if (h == t.hash) return {};
  return fmt::format(
      "{}: tensor '{}' does not match its stored hash (stored {:016x}, actual {:016x}); the file is damaged "
      "(run `cortiq verify {}`)",
      r.path(t.shard), t.name, t.hash, h, r.path(t.shard));
}

/// `v` as JSON, cut to about 48 bytes (at a UTF-8 character boundary) with "…" when longer.
std::string short_json(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  constexpr size_t kMax = 48;
  if (s.size() <= kMax) return s;
  size_t n = kMax;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n) + "…";
}

/// One line "path: A vs B" per leaf where `x` and `y` differ, as a dotted path (`provenance.source_model`,
/// `arch.layer_types[3]`); a key on one side only reads "(absent)" on the other, arrays of different
/// lengths are one line.
void json_differences(const nlohmann::json& x, const nlohmann::json& y, const std::string& path,
                      std::vector<std::string>& out) {
  if (x == y) return;
  auto key = [&](const std::string& k) { return path.empty() ? k : path + "." + k; };
  if (x.is_object() && y.is_object()) {
    for (const auto& [k, v] : x.items()) {
      if (y.contains(k))
        json_differences(v, y.at(k), key(k), out);
      else
        out.push_back(fmt::format("{}: {} vs (absent)", key(k), short_json(v)));
    }
    for (const auto& [k, v] : y.items())
      if (!x.contains(k)) out.push_back(fmt::format("{}: (absent) vs {}", key(k), short_json(v)));
  } else if (x.is_array() && y.is_array() && x.size() == y.size()) {
    for (size_t i = 0; i < x.size(); ++i) json_differences(x[i], y[i], fmt::format("{}[{}]", path, i), out);
  } else {
    out.push_back(fmt::format("{}: {} vs {}", path.empty() ? "(root)" : path, short_json(x), short_json(y)));
  }
}

/// "~ <what> section differs …" when the raw bytes of a section differ (absent = empty), else "".
std::string section_difference(const char* what, std::span<const uint8_t> x, std::span<const uint8_t> y) {
  if (x.size() == y.size() && same_bytes(x, y)) return {};
  auto size = [](std::span<const uint8_t> s) {
    return s.empty() ? std::string("absent") : fmt::format("{} bytes", s.size());
  };
  return fmt::format("~ {} section differs ({} vs {})", what, size(x), size(y));
}

/// Compares `pa` with `pb` and prints the report; returns the exit status (0 same, 1 different).
/// Throws Error(HashMismatch) after the report when a tensor's data disagrees with its own stored
/// hash, and any Error of Reader::open.
int run_diff(const std::string& pa, const std::string& pb) {
  cmf::Reader a = cmf::Reader::open(pa), b = cmf::Reader::open(pb);
  size_t same = 0, changed = 0, only_a = 0, only_b = 0;
  std::vector<std::string> damaged;
  for (const auto& t : a.tensors()) {
    const cmf::TensorInfo* u = b.find(t.name);
    if (!u) {
      std::printf("- %s\n", t.name.c_str());
      ++only_a;
    } else if (u->hash != t.hash || u->dtype != t.dtype || u->shape != t.shape || u->nbytes != t.nbytes) {
      std::printf("~ %s (%s %s %016llx -> %s %s %016llx)\n", t.name.c_str(),
                  std::string(quant::dtype_name(t.dtype)).c_str(), fmt::format("{}", t.shape).c_str(),
                  static_cast<unsigned long long>(t.hash), std::string(quant::dtype_name(u->dtype)).c_str(),
                  fmt::format("{}", u->shape).c_str(), static_cast<unsigned long long>(u->hash));
      ++changed;
    } else if (same_bytes(a.payload(t), b.payload(*u))) {
      ++same;
    } else {
      // Same stored hash, different bytes: at least one side no longer matches its own hash.
      std::string da = damage_of(a, t), db = damage_of(b, *u);
      std::printf("~ %s (same stored hash %016llx, different data)\n", t.name.c_str(),
                  static_cast<unsigned long long>(t.hash));
      ++changed;
      if (!da.empty()) damaged.push_back(std::move(da));
      if (!db.empty()) damaged.push_back(std::move(db));
    }
  }
  for (const auto& t : b.tensors())
    if (!a.find(t.name)) {
      std::printf("+ %s\n", t.name.c_str());
      ++only_b;
    }
  // the header field by field (dotted JSON paths, both values), at most kMaxHeaderLines lines; then
  // the sections the header only hashes: a different tokenizer or mask catalog is named as such
  constexpr size_t kMaxHeaderLines = 20;
  std::vector<std::string> fields;
  json_differences(cmf::header_to_json(a.header()), cmf::header_to_json(b.header()), "", fields);
  for (size_t i = 0; i < fields.size() && i < kMaxHeaderLines; ++i)
    std::printf("~ header: %s\n", fields[i].c_str());
  if (fields.size() > kMaxHeaderLines) std::printf("~ header: … %zu more\n", fields.size() - kMaxHeaderLines);
  bool hdr = !fields.empty();
  for (const std::string& d : {section_difference("vocab (tokenizer.json)", a.vocab(), b.vocab()),
                               section_difference("masks", a.masks_bytes(), b.masks_bytes())})
    if (!d.empty()) {
      std::printf("%s\n", d.c_str());
      hdr = true;
    }
  std::printf("%zu identical, %zu changed, %zu only in a, %zu only in b\n", same, changed, only_a, only_b);
  std::fflush(stdout);
  if (!damaged.empty()) {
    std::string msg = damaged[0];
    for (size_t i = 1; i < damaged.size(); ++i) msg += "\n  " + damaged[i];
    throw Error(ErrorKind::HashMismatch, msg);
  }
  return hdr || changed || only_a || only_b ? 1 : 0;
}

void setup_diff(CLI::App& root) {
  auto files = std::make_shared<std::pair<std::string, std::string>>();
  auto* c = root.add_subcommand(
      "diff",
      "Compare two CMF files tensor by tensor (name, dtype, shape, hash, data); exit 0 same, 1 different, "
      "2 trouble");
  add_examples(c, {"cortiq diff build/stories260K.cmf /tmp/s_q8.cmf"});
  c->add_option("a", files->first, "first .cmf")->required();
  c->add_option("b", files->second, "second .cmf")->required();
  c->callback([files] {
    int rc = 0;
    try {
      rc = run_diff(files->first, files->second);
    } catch (const std::exception& e) {  // as main.cc prints it, but exit 2 as diff(1) and cmp(1)
      std::fflush(stdout);
      std::fprintf(stderr, "Error: %s\n", e.what());
      rc = kDiffTrouble;
    }
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace
CORTIQ_COMMAND(24, setup_diff);
}  // namespace cortiq::cli
