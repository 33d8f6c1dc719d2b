// `cortiq sign <file> [--key F]` — detached Ed25519 signature over the file's SHA-256
// (FORMAT-NOTES §1.17).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.h"
#include "cmf/reader.h"
#include "cmf/signature.h"

namespace cortiq::cli {
namespace {

struct SignOpts {
  std::string file;
  std::string key = "cortiq-signing.key";
};

void setup_sign(CLI::App& root) {
  auto o = std::make_shared<SignOpts>();
  auto* c = root.add_subcommand("sign", "Write <file>.sig (Ed25519 over the file's SHA-256)");
  c->add_option("file", o->file, "model .cmf")->required();
  c->add_option("--key", o->key,
                "key file: 64 hex chars (32-byte seed); created from OS randomness if missing")
      ->capture_default_str();
  c->callback([o] {
    (void)cmf::Reader::open(o->file);  // a CMF file (its typed error otherwise), not any file
    const auto seed = cmf::load_or_create_signing_key(o->key);
    const std::string pub = cmf::sign_file(o->file, seed);
    std::printf("signed: %s.sig\n", o->file.c_str());
    std::printf("pubkey: %s\n", pub.c_str());
  });
}

}  // namespace
CORTIQ_COMMAND(22, setup_sign);
}  // namespace cortiq::cli
