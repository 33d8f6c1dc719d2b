// `cortiq diff <a> <b>` — compare two CMF files by tensor name, dtype, shape, stored hash64 and the
// payload bytes themselves. Exit status as diff(1) and cmp(1): 0 when they hold the same tensors
// and header, 1 when they differ, 2 on trouble (a file that cannot be opened, or a tensor whose
// data does not match its own stored hash: a damaged file).
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
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
  const bool hdr = cmf::serialize_header(a.header()) != cmf::serialize_header(b.header());
  if (hdr) std::printf("~ header differs\n");
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
