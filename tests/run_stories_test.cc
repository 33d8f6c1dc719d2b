// The main job end to end: `cortiq convert` the trained stories260K HF checkpoint (--quant f32),
// `cortiq run -p "" --greedy` reproduces the llama2.c golden story token for token (the text of
// greedy_bos.json, 256 tokens, with the near-tie at step 185), and the prompted golden too;
// `cortiq ppl` prints a finite perplexity. Skips when ../shared is absent.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "runtime/session.h"
#include "shell.h"

namespace {

std::string shared_dir() {
  return std::string(CORTIQ_SOURCE_DIR) + "/../shared";
}

using cortiq::test::sh;

class StoriesE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string hf = shared_dir() + "/models/stories260K-hf";
    if (!std::filesystem::exists(hf + "/model.safetensors")) return;
    dir_ = std::filesystem::temp_directory_path() / ("cortiq_run_stories_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    int rc = 0;
    sh(std::string(CORTIQ_CLI_PATH) + " convert " + hf + " -o " + (dir_ / "s.cmf").string() +
           " --quant f32 2>&1",
       &rc);
    ok_ = rc == 0;
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  static nlohmann::json golden(const std::string& name) {
    std::ifstream f(shared_dir() + "/models/stories260K-llama2c/golden/" + name);
    return nlohmann::json::parse(f);
  }
  static inline std::filesystem::path dir_;
  static inline bool ok_ = false;
};

TEST_F(StoriesE2E, GreedyFromBosReproducesGolden) {
  if (dir_.empty()) GTEST_SKIP() << "../shared missing";
  ASSERT_TRUE(ok_) << "convert failed";
  const auto g = golden("greedy_bos.json");
  for (const std::string load : {"", " --no-mmap"}) {  // mmap'ed and loaded into huge-page memory
    int rc = 0;
    std::string out = sh(std::string(CORTIQ_CLI_PATH) + " run " + (dir_ / "s.cmf").string() +
                             " -p '' --greedy -n 256 --threads 2" + load + " 2>/dev/null",
                         &rc);
    ASSERT_EQ(rc, 0) << load;
    ASSERT_FALSE(out.empty()) << load;
    if (out.back() == '\n') out.pop_back();
    EXPECT_EQ(out, g["text"].get<std::string>()) << load;
  }
}

TEST_F(StoriesE2E, GreedyFromPromptReproducesGolden) {
  if (dir_.empty()) GTEST_SKIP() << "../shared missing";
  ASSERT_TRUE(ok_);
  const auto g = golden("greedy_prompt.json");
  const size_t n = g["token_ids"].size() - g["prompt_token_ids"].size();
  int rc = 0;
  std::string out = sh(std::string(CORTIQ_CLI_PATH) + " run " + (dir_ / "s.cmf").string() +
                           " -p 'Once upon a time' --greedy -n " + std::to_string(n) + " 2>/dev/null",
                       &rc);
  ASSERT_EQ(rc, 0);
  if (!out.empty() && out.back() == '\n') out.pop_back();
  EXPECT_EQ("Once upon a time" + out, g["text"].get<std::string>());
}

TEST_F(StoriesE2E, PerplexityOnTinyStoriesSample) {
  if (dir_.empty()) GTEST_SKIP() << "../shared missing";
  ASSERT_TRUE(ok_);
  int rc = 0;
  const std::string out =
      sh(std::string(CORTIQ_CLI_PATH) + " ppl " + (dir_ / "s.cmf").string() + " -f " + shared_dir() +
             "/data/tinystories-sample/tinystories_sample.txt --ctx 256 2>&1",
         &rc);
  ASSERT_EQ(rc, 0) << out;
  // Measured with this runtime on f32 weights (see the report / README): 7 chunks, 889 tokens.
  EXPECT_NE(out.find("PPL = 6.8979 +/- 0.77027 over 889 tokens"), std::string::npos) << out;
}

// The chunks as parallel engine slots (batched steps), and in forward calls of 64 positions: the
// same perplexity to the last printed digit as one chunk at a time (bit for bit: perplexity_test).
TEST_F(StoriesE2E, PerplexityIsTheSameWithParallelSlots) {
  if (dir_.empty()) GTEST_SKIP() << "../shared missing";
  ASSERT_TRUE(ok_);
  for (const char* flags : {"--parallel 1", "--parallel 4", "--parallel 4 --batch 64", "--parallel 7"}) {
    int rc = 0;
    const std::string out =
        sh(std::string(CORTIQ_CLI_PATH) + " ppl " + (dir_ / "s.cmf").string() + " -f " + shared_dir() +
               "/data/tinystories-sample/tinystories_sample.txt --ctx 256 " + flags + " 2>&1",
           &rc);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("PPL = 6.8979 +/- 0.77027 over 889 tokens"), std::string::npos) << flags << "\n"
                                                                                       << out;
  }
}

TEST_F(StoriesE2E, PromptLongerThanContextIsAnError) {
  if (dir_.empty()) GTEST_SKIP() << "../shared missing";
  ASSERT_TRUE(ok_);
  int rc = 0;
  const std::string out = sh(std::string(CORTIQ_CLI_PATH) + " run " + (dir_ / "s.cmf").string() +
                                 " -p 'Once upon a time there was a girl' --ctx 4 --greedy -n 2 2>&1",
                             &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("context"), std::string::npos) << out;
}

TEST_F(StoriesE2E, UnknownTaskListsAvailable) {
  if (dir_.empty()) GTEST_SKIP() << "../shared missing";
  ASSERT_TRUE(ok_);
  int rc = 0;
  const std::string out =
      sh(std::string(CORTIQ_CLI_PATH) + " run " + (dir_ / "s.cmf").string() + " -p '' -n 1 --task nope 2>&1",
         &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("unknown task 'nope'"), std::string::npos) << out;
}

}  // namespace

// GenerateParams::cancel (what `run`'s Ctrl-C sets) ends the answer before the next token with
// finish "cancelled", keeping the text so far; the session then answers the next prompt as usual.
TEST_F(StoriesE2E, CancelEndsTheAnswerAndTheSessionGoesOn) {
  if (dir_.empty()) GTEST_SKIP() << "../shared missing";
  ASSERT_TRUE(ok_);
  cortiq::runtime::LoadOptions opt;
  opt.threads = 1;
  auto lm = cortiq::runtime::load_model((dir_ / "s.cmf").string(), opt);
  cortiq::runtime::Session session(lm);
  cortiq::runtime::GenerateParams gp;
  gp.max_tokens = 64;
  gp.sampler = cortiq::runtime::SamplerParams::greedy();
  std::atomic<bool> cancel{false};
  gp.cancel = &cancel;
  const auto prompt = lm.encode_raw("Once upon a time");
  const auto full = session.generate(prompt, gp);
  ASSERT_EQ(full.finish, "max_tokens");
  ASSERT_EQ(full.ids.size(), 64u);

  session.reset();
  std::string streamed;
  size_t pieces = 0;
  const auto cut = session.generate(prompt, gp, [&](std::string_view s) {
    streamed += s;
    if (++pieces == 5) cancel.store(true);  // as if Ctrl-C came while the 5th piece was printed
  });
  EXPECT_EQ(cut.finish, "cancelled");
  ASSERT_GE(cut.ids.size(), 5u);
  ASSERT_LT(cut.ids.size(), 64u);
  EXPECT_TRUE(std::equal(cut.ids.begin(), cut.ids.end(), full.ids.begin()));  // the same greedy prefix
  EXPECT_EQ(streamed, cut.text);
  EXPECT_EQ(full.text.substr(0, cut.text.size()), cut.text);

  cancel.store(false);  // the next answer runs to its end again
  session.reset();
  const auto again = session.generate(prompt, gp);
  EXPECT_EQ(again.finish, "max_tokens");
  EXPECT_EQ(again.ids, full.ids);
}

// Ctrl-C at the interactive prompt ends `run` with the shell's status for SIGINT (130), after the
// prompt was shown; stdin stays open (a FIFO), so only the signal can end it.
TEST_F(StoriesE2E, CtrlCAtThePromptEndsTheChat) {
  if (dir_.empty()) GTEST_SKIP() << "../shared missing";
  ASSERT_TRUE(ok_);
  const auto err = dir_ / "sigint.err", script = dir_ / "sigint.sh", fifo = dir_ / "sigint.fifo";
  // stdin is a FIFO this script also holds open for writing: it never reaches end of file
  std::ofstream(script) << "rm -f " << fifo.string() << "; mkfifo " << fifo.string() << "; exec 3<>"
                        << fifo.string() << "\n"
                        << CORTIQ_CLI_PATH << " run " << (dir_ / "s.cmf").string() << " --threads 1 <"
                        << fifo.string() << " 2>" << err.string() << " &\nP=$!\n"
                        << "for i in $(seq 1 200); do grep -q '^> ' " << err.string()
                        << " 2>/dev/null && break; sleep 0.1; done\n"
                        << "kill -INT $P; wait $P; echo rc=$?\n";
  const std::string out = sh("bash " + script.string());
  EXPECT_NE(out.find("rc=130"), std::string::npos) << out;
  std::ifstream f(err);
  const std::string e((std::istreambuf_iterator<char>(f)), {});
  EXPECT_NE(e.find("Ctrl+C stops an answer"), std::string::npos) << e;
  EXPECT_EQ(e.substr(e.size() >= 3 ? e.size() - 3 : 0), "> \n") << e;  // the handler's newline
}
