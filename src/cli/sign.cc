// `cortiq sign <file> [--key F]` — detached Ed25519 signature over the file's SHA-256
// (FORMAT-NOTES §1.17); for a shard of a set, one <shard>.sig for every file of the set.
// `cortiq sign --show-pubkey [--key F]` prints the key file's public key (hex) and signs nothing:
// the trust anchor to hand to `verify --pubkey` (as is, or saved as a .pub file).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cmf/reader.h"
#include "cmf/signature.h"

namespace cortiq::cli {
namespace {

struct SignOpts {
  std::string file;
  std::string key = "cortiq-signing.key";
  bool new_key = false;
  bool show_pubkey = false;
};

void setup_sign(CLI::App& root) {
  auto o = std::make_shared<SignOpts>();
  auto* c =
      root.add_subcommand("sign", "Write <file>.sig (Ed25519 over the file's SHA-256; every shard of a set)");
  add_examples(
      c, {"cortiq sign model.cmf   # writes model.cmf.sig (key: cortiq-signing.key, created if missing)",
          "cortiq verify model.cmf --pubkey \"$(cortiq sign --show-pubkey)\""});
  c->add_option("file", o->file, "model .cmf (a shard's name signs every file of the set)");
  auto* key = c->add_option("--key", o->key,
                            "key file: 64 hex chars (32-byte seed); the default one is created from OS "
                            "randomness if missing, a --key path only with --new-key")
                  ->capture_default_str();
  c->add_flag("--new-key", o->new_key, "create the --key file from OS randomness if it does not exist");
  c->add_flag("--show-pubkey", o->show_pubkey,
              "print the public key (64 hex chars) of the --key file and sign nothing (for verify --pubkey)");
  c->callback([o, key] {
    if (o->show_pubkey) {
      if (!o->file.empty())
        throw CLI::ValidationError("--show-pubkey", "signs nothing: drop the file " + o->file);
      if (!std::filesystem::exists(o->key))
        throw CLI::ValidationError("--key", "key file " + o->key + " does not exist");
      std::printf("%s\n", cmf::public_key_hex(cmf::load_signing_key(o->key)).c_str());
      return;
    }
    if (o->file.empty()) throw CLI::RequiredError("file");
    // a CMF file (its typed error otherwise), not any file; a shard's name opens the whole set
    // (a missing shard is an error), and every file of it is signed: a signature covers one file
    std::vector<std::string> files;
    {
      const cmf::Reader r = cmf::Reader::open(o->file);
      for (size_t i = 0; i < r.num_files(); ++i) files.push_back(r.path(i));
    }
    std::error_code ec;
    const bool created = !std::filesystem::exists(o->key, ec);
    // a mistyped --key must not sign with a fresh, unrelated key (replacing a good .sig)
    if (created && key->count() > 0 && !o->new_key)
      throw CLI::ValidationError(
          "--key",
          "key file " + o->key + " does not exist (add --new-key to create a new signing key there)");
    const auto seed = cmf::load_or_create_signing_key(o->key);
    if (created)  // a new private key in the working folder should not go unnoticed
      std::fprintf(stderr,
                   "created signing key %s (private: keep it safe; its public half is printed below)\n",
                   o->key.c_str());
    std::string pub;
    for (const auto& f : files) {
      const auto before = cmf::signature_pubkey(f);  // reads the .sig only, not the file again
      pub = cmf::sign_file(f, seed);
      std::printf("signed: %s.sig\n", f.c_str());
      if (before && *before != pub)
        std::fprintf(stderr, "note: %s.sig was signed by another key (pubkey %s); it is replaced\n",
                     f.c_str(), before->c_str());
    }
    std::printf("pubkey: %s\n", pub.c_str());
  });
}

}  // namespace
CORTIQ_COMMAND(22, setup_sign);
}  // namespace cortiq::cli
