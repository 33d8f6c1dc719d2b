// Issue 27 end to end: `verify` says whether a signature was checked against a trusted key
// (`--pubkey` as hex, a .pub file or a key file), `sign --show-pubkey` prints a key file's public
// key, and `convert` refuses a chat template that does not parse (naming where) unless
// --no-chat-template. Uses the embedded models/stories260K (converted once to a temporary f32 file).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cmf/reader.h"
#include "shell.h"

namespace {

namespace fs = std::filesystem;
using cortiq::test::sh;

class SignVerify : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("cortiq_sign_verify_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    model_ = (dir_ / "s.cmf").string();
    int rc = 0;
    sh(std::string(CORTIQ_CLI_PATH) + " convert " + hf().string() + " -o " + model_ + " --quant f32 2>&1",
       &rc);
    ok_ = rc == 0;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static fs::path hf() { return fs::path(CORTIQ_SOURCE_DIR) / "models" / "stories260K"; }

  /// Runs `cortiq ARGS`; returns stdout + stderr and the exit status in `rc`.
  static std::string cli(const std::string& args, int& rc) {
    const std::string out = sh("timeout 60 " + std::string(CORTIQ_CLI_PATH) + " " + args + " 2>&1", &rc);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
    return out;
  }
  /// Runs `cortiq ARGS`, expects exit status `want_rc` and returns the output.
  static std::string expect_rc(const std::string& args, int want_rc) {
    int rc = 0;
    const std::string out = cli(args, rc);
    EXPECT_EQ(rc, want_rc) << args << "\n" << out;
    return out;
  }
  static bool has(const std::string& out, const std::string& s) { return out.find(s) != std::string::npos; }

  static inline fs::path dir_;
  static inline std::string model_;
  static inline bool ok_ = false;
};

TEST_F(SignVerify, VerifyNamesTheTrustAnchor) {
  ASSERT_TRUE(ok_);
  const std::string key = (dir_ / "k.key").string(), key2 = (dir_ / "k2.key").string();
  // --show-pubkey reads an existing key only, and signs nothing
  EXPECT_TRUE(has(expect_rc("sign --show-pubkey --key " + key, 2), "key file " + key + " does not exist"));
  EXPECT_FALSE(fs::exists(key));
  const std::string signed_out = expect_rc("sign " + model_ + " --key " + key + " --new-key", 0);
  const size_t p = signed_out.find("pubkey: ");
  ASSERT_NE(p, std::string::npos) << signed_out;
  const std::string pub = signed_out.substr(p + 8, 64);
  ASSERT_EQ(pub.find_first_not_of("0123456789abcdef"), std::string::npos) << pub;
  std::ifstream sig_in(model_ + ".sig");
  EXPECT_EQ(nlohmann::json::parse(sig_in).at("pubkey"), pub);
  EXPECT_EQ(expect_rc("sign --show-pubkey --key " + key, 0), pub + "\n");
  EXPECT_TRUE(has(expect_rc("sign --show-pubkey " + model_ + " --key " + key, 2), "signs nothing"));
  EXPECT_TRUE(has(expect_rc("sign", 2), "file is required"));

  // no --pubkey: the signature matches, but nothing says whose key should have made it
  std::string v = expect_rc("verify " + model_, 0);
  EXPECT_TRUE(has(v, "signed by " + pub + ", not checked against a trusted key (pass --pubkey)")) << v;
  EXPECT_FALSE(has(v, "signature valid")) << v;
  EXPECT_FALSE(has(v, "signature OK")) << v;
  EXPECT_TRUE(has(v, "\nOK\n")) << v;

  // --pubkey as hex (any case), as a .pub file, as the key file itself: valid and trusted
  std::string upper = pub;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  const fs::path pubfile = dir_ / "k.pub";
  sh(std::string(CORTIQ_CLI_PATH) + " sign --show-pubkey --key " + key + " > " + pubfile.string());
  for (const std::string& anchor : {pub, upper, pubfile.string(), key}) {
    v = expect_rc("verify " + model_ + " --pubkey " + anchor, 0);
    EXPECT_TRUE(has(v, "signature OK (ed25519, signer " + pub + ")")) << anchor << "\n" << v;
    EXPECT_TRUE(has(v, "✓ detached signature valid, signed by the trusted key (--pubkey)")) << anchor << "\n"
                                                                                            << v;
    EXPECT_FALSE(has(v, "not checked")) << v;
  }
  // "pubkey: <hex>" as `sign` prints it is a .pub too
  std::ofstream(dir_ / "signout.pub") << "pubkey: " << pub << "\n";
  expect_rc("verify " + model_ + " --pubkey " + (dir_ / "signout.pub").string(), 0);

  // another key (RFC 8032 §7.1 test 1: its seed and public key): not the signer, so verify fails
  // and names both keys
  std::ofstream(key2) << "9d61b19deffd5a60ba844af492ec2cc4\n4449c5697b326919703bac031cae7f60\n";
  const std::string pub2 = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
  EXPECT_EQ(expect_rc("sign --show-pubkey --key " + key2, 0), pub2 + "\n");
  for (const std::string& anchor : {pub2, key2}) {
    v = expect_rc("verify " + model_ + " --pubkey " + anchor, 1);
    EXPECT_TRUE(has(v, "✗ detached signature: signer " + pub + " is not the pinned key " + pub2)) << v;
    EXPECT_TRUE(has(v, "Error: Signature: 1 signature problem(s) found")) << v;
    EXPECT_FALSE(has(v, "\nOK\n")) << v;
  }
  // a --pubkey that is none of the three is a usage error naming what it is not
  std::ofstream(dir_ / "bad.pub") << "not a key\n";
  v = expect_rc("verify " + model_ + " --pubkey " + (dir_ / "bad.pub").string(), 2);
  EXPECT_TRUE(has(v, "a .pub file must hold 64 hex characters")) << v;
  v = expect_rc("verify " + model_ + " --pubkey " + (dir_ / "nothing").string(), 2);
  EXPECT_TRUE(has(v, "is neither 64 hex characters (an Ed25519 public key) nor a key or .pub file")) << v;
  fs::remove(model_ + ".sig");
  // unsigned: fine without --pubkey, a failure with it
  v = expect_rc("verify " + model_, 0);
  EXPECT_FALSE(has(v, "signed by")) << v;
  EXPECT_TRUE(
      has(expect_rc("verify " + model_ + " --pubkey " + pub, 1), ".sig is missing but --pubkey was given"));
}

// A chat template that does not parse is refused at convert time, naming its file, line and
// column, and no output is left; --no-chat-template stores none; a good one is stored verbatim.
TEST_F(SignVerify, ConvertRefusesAChatTemplateThatDoesNotParse) {
  const fs::path d = dir_ / "badtpl-hf";
  fs::create_directories(d);
  for (const auto& e : fs::directory_iterator(hf())) fs::copy_file(e.path(), d / e.path().filename());
  nlohmann::ordered_json cfg;
  {
    std::ifstream in(hf() / "tokenizer_config.json");
    cfg = nlohmann::ordered_json::parse(in);
  }
  const auto write_template = [&](const std::string& t) {
    cfg["chat_template"] = t;
    std::ofstream(d / "tokenizer_config.json") << cfg.dump(2);
  };
  write_template("{% for m in messages %}\n{{ m.role }}: {{ m.content }\n{% endfor %}");
  const std::string out = (dir_ / "badtpl.cmf").string();
  std::string o = expect_rc("convert " + d.string() + " -o " + out + " --quant f32", 1);
  EXPECT_TRUE(has(o, "Error: Parse: " + (d / "tokenizer_config.json").string() +
                         ": chat template line 2 column 28: unexpected '}' (fix it"))
      << o;
  EXPECT_TRUE(has(o, "--no-chat-template to store none")) << o;
  EXPECT_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find("badtpl.cmf."), std::string::npos) << e.path();

  o = expect_rc("convert " + d.string() + " -o " + out + " --quant f32 --no-chat-template", 0);
  {
    const auto r = cortiq::cmf::Reader::open(out);
    ASSERT_TRUE(r.header().tokenizer_config.has_value());
    EXPECT_FALSE(r.header().tokenizer_config->chat_template.has_value());
  }
  const std::string good = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}";
  write_template(good);
  fs::remove(out);
  expect_rc("convert " + d.string() + " -o " + out + " --quant f32", 0);
  const auto r = cortiq::cmf::Reader::open(out);
  ASSERT_TRUE(r.header().tokenizer_config.has_value());
  EXPECT_EQ(r.header().tokenizer_config->chat_template.value_or(""), good);
}

}  // namespace
