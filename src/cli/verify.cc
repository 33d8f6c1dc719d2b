// `cortiq verify <file>` — the whole integrity chain of one file plus its detached signature, or
// for a shard of a signed set every shard's signature (CLI-NOTES §2.1, spec §8).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

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

/// Checks the detached signature of every file in `files` (one file, or every shard of a set: a
/// signature covers one file's SHA-256). Prints one line per file and returns the number of
/// problems. A missing .sig is a problem when --pubkey was given, or, in a set, when another shard is
/// signed (a set signed in part); shards signed by different keys are one too. A valid signature
/// proves only that its signer's key signed these bytes: without --pubkey (`pubkey` empty; else
/// lowercase hex) there is no trust anchor, and the output says so instead of "valid".
size_t check_signatures(const std::vector<std::string>& files, const std::string& pubkey) {
  const auto pin = pubkey.empty() ? std::nullopt : std::optional<std::string>(pubkey);
  std::vector<cmf::SignatureCheck> sigs;
  bool any = false;
  for (const auto& f : files) {
    sigs.push_back(cmf::check_signature(f, pin));
    any = any || sigs.back().present;
  }
  const auto untrusted = [](const std::string& signer) {
    return "signed by " + signer + ", not checked against a trusted key (pass --pubkey)";
  };
  if (files.size() == 1) {  // one file
    const auto& sig = sigs[0];
    if (sig.present && sig.valid && pin) {
      std::printf("signature OK (ed25519, signer %s)\n", sig.pubkey.c_str());
      std::printf("  ✓ detached signature valid, signed by the trusted key (--pubkey)\n");
    } else if (sig.present && sig.valid) {
      std::printf("  ~ detached signature matches the file: %s\n", untrusted(sig.pubkey).c_str());
    } else if (sig.present) {
      std::printf("  ✗ detached signature: %s\n", sig.problem.c_str());
      return 1;
    } else if (pin) {
      std::printf("  ✗ detached signature: %s.sig is missing but --pubkey was given\n", files[0].c_str());
      return 1;
    }
    return 0;
  }
  if (!any && !pin) return 0;  // an unsigned set
  size_t problems = 0;
  std::string signer;
  bool one_signer = true;
  for (size_t i = 0; i < files.size(); ++i) {
    const auto& sig = sigs[i];
    if (sig.present && sig.valid) {
      std::printf("  ✓ shard %zu/%zu: %s.sig matches (signer %s)\n", i + 1, files.size(), files[i].c_str(),
                  sig.pubkey.c_str());
      if (signer.empty()) signer = sig.pubkey;
      one_signer = one_signer && sig.pubkey == signer;
    } else if (sig.present) {
      std::printf("  ✗ shard %zu/%zu: %s.sig: %s\n", i + 1, files.size(), files[i].c_str(),
                  sig.problem.c_str());
      ++problems;
    } else {
      std::printf("  ✗ shard %zu/%zu: %s.sig is missing (%s)\n", i + 1, files.size(), files[i].c_str(),
                  pin ? "--pubkey was given" : "other shards of the set are signed");
      ++problems;
    }
  }
  if (!one_signer) {
    std::printf("  ✗ the shards are signed by different keys (pin one with --pubkey)\n");
    ++problems;
  }
  if (!problems && pin)
    std::printf("signature OK (ed25519, trusted signer %s, all %zu shards)\n", signer.c_str(), files.size());
  else if (!problems)
    std::printf("  ~ all %zu shards' signatures match: %s\n", files.size(), untrusted(signer).c_str());
  return problems;
}

void run_verify(const VerifyOpts& o) {
  std::printf("Verifying %s ...\n", o.file.c_str());
  std::fflush(stdout);
  cmf::Reader r = cmf::Reader::open(o.file, {.open_shard_set = false});
  // The integrity chain is this file's; the signatures are the whole set's when the file is a shard
  // and signatures are asked for (--pubkey) or present: a signature covers one file, so a replaced
  // or missing sibling must not pass. Opening the set fails with its error for a missing shard.
  std::vector<std::string> files{o.file};
  if (cmf::parse_shard_name(o.file) && (!o.pubkey.empty() || std::filesystem::exists(o.file + ".sig"))) {
    const cmf::Reader set = cmf::Reader::open(o.file, {.validate_payloads = false});
    if (set.num_files() > 1) {
      files.clear();
      for (size_t i = 0; i < set.num_files(); ++i) files.push_back(set.path(i));
    }
  }
  std::printf("  ✓ envelope, sections, tensor directory (%zu tensors)\n", r.tensors().size());
  std::vector<std::string> problems;
  {
    Progress bar("verifying", r.verify_total_bytes());
    problems = r.verify([&](uint64_t n) { bar.advance(n); });
  }
  for (const auto& p : problems) std::printf("  ✗ %s\n", p.c_str());
  if (problems.empty()) std::printf("  ✓ all tensor hashes match\n");
  const size_t sig_problems = check_signatures(files, o.pubkey);
  std::fflush(stdout);
  // The error class says what failed: the file's contents (hashes, bounds, padding) or only its
  // detached signature.
  if (!problems.empty())
    fail(ErrorKind::HashMismatch, "{} problem(s) found ({} in the file's contents, {} with its signature)",
         problems.size() + sig_problems, problems.size(), sig_problems);
  if (sig_problems) fail(ErrorKind::Signature, "{} signature problem(s) found", sig_problems);
  std::printf("OK\n");
}

void setup_verify(CLI::App& root) {
  auto o = std::make_shared<VerifyOpts>();
  auto* c = root.add_subcommand("verify",
                                "Check envelope, bounds, header/directory/section/tensor hashes and .sig");
  add_examples(
      c, {"cortiq verify build/stories260K.cmf", "cortiq verify model.cmf --pubkey cortiq-signing.pub"});
  c->add_option("file", o->file,
                "model .cmf (one file; shards are verified one by one, their signatures as a set)")
      ->required();
  c->add_option("--pubkey", o->pubkey,
                "trust only a .sig made by this Ed25519 public key: 64 hex chars, a .pub file holding them "
                "(sign --show-pubkey) or a signing key file")
      ->transform(CLI::Validator(
          [](std::string& v) -> std::string {
            try {
              v = cmf::resolve_public_key(v);  // the option holds the key's lowercase hex from here on
              return {};
            } catch (const Error& e) {
              return "must be 64 hex characters (an Ed25519 public key), a .pub file or a signing key "
                     "file: " +
                     e.message();
            }
          },
          "HEX64|FILE"));
  c->callback([o] { run_verify(*o); });
}

}  // namespace
CORTIQ_COMMAND(21, setup_verify);
}  // namespace cortiq::cli
