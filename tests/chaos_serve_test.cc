// Chaos test of a live `cortiq serve` (issue 27 §8): tests/clients/chaos.mjs starts the server on a
// loopback port with --parallel 4 and sends it a few hundred random but valid requests (sampling
// settings, logit_bias on byte and special tokens, stop strings, logprobs, echo, streams cut off
// mid-way, /tokenize and /detokenize) from 8 clients at once. Pass: every answer is JSON or SSE ending
// in [DONE] with a status below 500 (or a 500 that names its cause), every sampled completion's text
// is what /detokenize gives for its ids, RSS stays under 2 x warm-up + 50 MB, and the server still
// answers /health and a greedy completion at the end. Run on stories260K and on a random-weight Llama
// with the same byte-fallback tokenizer (tests/tools/gen_checkpoint.py). CHAOS_SEED (default 1) and
// CHAOS_REQUESTS (default 400) change the run; skipped without node, python3 + numpy or the model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "server/server.h"
#include "shell.h"

namespace fs = std::filesystem;

namespace {

using cortiq::test::sh;

class ChaosServe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("cortiq_chaos_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  /// Why the chaos run cannot happen here, or "" when it can.
  static std::string missing() {
    if (!fs::exists(stories() / "model.safetensors")) return "models/stories260K missing";
    if (!cortiq::server::server_available()) return "built without cpp-httplib";
    int rc = 0;
    sh("node --version >/dev/null 2>&1", &rc);
    return rc == 0 ? "" : "node missing";
  }
  static fs::path stories() { return fs::path(CORTIQ_SOURCE_DIR) / "models" / "stories260K"; }

  /// Converts the HF folder `hf` to dir_/<name>.cmf (f32); fails the test with convert's log.
  static std::string convert(const fs::path& hf, const std::string& name) {
    const std::string out = (dir_ / (name + ".cmf")).string();
    int rc = 0;
    const std::string log = sh(
        std::string(CORTIQ_CLI_PATH) + " convert " + hf.string() + " -o " + out + " --quant f32 2>&1", &rc);
    EXPECT_EQ(rc, 0) << log;
    return rc == 0 ? out : "";
  }

  /// Runs chaos.mjs against `cmf` (tokenizer.json beside `hf`); its output goes to stdout. Returns
  /// its exit status (0: every check passed).
  static int chaos(const std::string& cmf, const fs::path& hf, bool no_chat) {
    const char* seed = std::getenv("CHAOS_SEED");
    const char* count = std::getenv("CHAOS_REQUESTS");
    const std::string cmd =
        "cd " + std::string(CORTIQ_SOURCE_DIR) + "/tests/clients && CHAOS_CLI=" + CORTIQ_CLI_PATH +
        " CHAOS_MODEL=" + cmf + " CHAOS_TMP=" + dir_.string() +
        " CHAOS_TOKENIZER=" + (hf / "tokenizer.json").string() +
        " CHAOS_CHAT=" + (no_chat ? "none" : "template") + " CHAOS_SEED=" + (seed ? seed : "1") +
        " CHAOS_REQUESTS=" + (count ? count : "400") + " node chaos.mjs 2>&1";
    int rc = 0;
    const std::string out = sh(cmd, &rc);
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
    return rc;
  }

  static inline fs::path dir_;
};

// stories260K has no chat template: chat answers the documented 400, everything else is served.
TEST_F(ChaosServe, Stories260KSurvivesRandomRequests) {
  if (const std::string why = missing(); !why.empty()) GTEST_SKIP() << why;
  const std::string cmf = convert(stories(), "stories");
  ASSERT_FALSE(cmf.empty());
  EXPECT_EQ(chaos(cmf, stories(), true), 0) << "chaos run failed: see the FAIL lines above";
}

// A random-weight Llama (untied head: near-uniform logits) with the stories260K byte-fallback tokenizer
// writes long runs of byte tokens, most of them invalid UTF-8; it has a chat template, so chat is served.
TEST_F(ChaosServe, RandomByteFallbackLlamaSurvivesRandomRequests) {
  if (const std::string why = missing(); !why.empty()) GTEST_SKIP() << why;
  int rc = 0;
  sh("/usr/bin/python3 -c 'import numpy' 2>/dev/null", &rc);
  if (rc != 0) GTEST_SKIP() << "python3 + numpy missing";
  const fs::path hf = dir_ / "random-llama";
  const std::string log = sh("/usr/bin/python3 " + std::string(CORTIQ_SOURCE_DIR) +
                                 "/tests/tools/gen_checkpoint.py --family llama --out " + hf.string() +
                                 " --hidden 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --vocab 512"
                                 " --seed 7 --chat-template-file --tokenizer-dir " +
                                 stories().string() + " 2>&1",
                             &rc);
  ASSERT_EQ(rc, 0) << log;
  const std::string cmf = convert(hf, "random-llama");
  ASSERT_FALSE(cmf.empty());
  EXPECT_EQ(chaos(cmf, hf, false), 0) << "chaos run failed: see the FAIL lines above";
}

}  // namespace
