// `cortiq verify <file>` — the whole integrity chain of one file plus its detached signature
// (CLI-NOTES §2.1, spec §8).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cmf/reader.h"
#include "cmf/signature.h"
#include "util/error.h"
#include "util/progress.h"

namespace cortiq::cli {
namespace {

struct VerifyOpts {
  std::string file;
  std::string pubkey;
};

void run_verify(const VerifyOpts& o) {
  std::printf("Verifying %s ...\n", o.file.c_str());
  std::fflush(stdout);
  cmf::Reader r = cmf::Reader::open(o.file, {.open_shard_set = false});
  std::printf("  ✓ envelope, sections, tensor directory (%zu tensors)\n", r.tensors().size());
  std::vector<std::string> problems;
  {
    Progress bar("verifying", r.verify_total_bytes());
    problems = r.verify([&](uint64_t n) { bar.advance(n); });
  }
  for (const auto& p : problems) std::printf("  ✗ %s\n", p.c_str());
  if (problems.empty()) std::printf("  ✓ all tensor hashes match\n");
  size_t sig_problems = 0;
  auto sig =
      cmf::check_signature(o.file, o.pubkey.empty() ? std::nullopt : std::optional<std::string>(o.pubkey));
  if (sig.present) {
    if (sig.valid) {
      std::printf("signature OK (ed25519, signer %s)\n", sig.pubkey.c_str());
      std::printf("  ✓ detached signature valid\n");
    } else {
      std::printf("  ✗ detached signature: %s\n", sig.problem.c_str());
      ++sig_problems;
    }
  } else if (!o.pubkey.empty()) {
    std::printf("  ✗ detached signature: %s.sig is missing but --pubkey was given\n", o.file.c_str());
    ++sig_problems;
  }
  std::fflush(stdout);
  if (!problems.empty() || sig_problems)
    fail(ErrorKind::HashMismatch, "{} problem(s) found", problems.size() + sig_problems);
  std::printf("OK\n");
}

void setup_verify(CLI::App& root) {
  auto o = std::make_shared<VerifyOpts>();
  auto* c = root.add_subcommand("verify",
                                "Check envelope, bounds, header/directory/section/tensor hashes and .sig");
  c->add_option("file", o->file, "model .cmf (one file; shards are verified one by one)")->required();
  c->add_option("--pubkey", o->pubkey,
                "require the .sig to be made by this Ed25519 public key (64 hex chars)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            const bool hex =
                v.size() == 64 && v.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
            return hex ? std::string() : "must be 64 hex characters (an Ed25519 public key), got '" + v + "'";
          },
          "HEX64"));
  c->callback([o] { run_verify(*o); });
}

}  // namespace
CORTIQ_COMMAND(21, setup_verify);
}  // namespace cortiq::cli
