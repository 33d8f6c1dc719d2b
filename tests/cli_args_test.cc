// `cortiq` argument errors end to end: each bad value is refused at parse time with a message that
// names the flag and the rule (CLI11 2.1 alone would wrap "-5" into 2^64 − 5 for an unsigned flag,
// and its PositiveNumber prints the whole double range), and the model-level refusals name the
// limit. Uses the embedded models/stories260K (converted once to a temporary f32 file).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cmf/reader.h"
#include "shell.h"

namespace {

namespace fs = std::filesystem;
using cortiq::test::sh;

class CliArgs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path hf = fs::path(CORTIQ_SOURCE_DIR) / "models" / "stories260K";
    dir_ = fs::temp_directory_path() / ("cortiq_cli_args_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    model_ = (dir_ / "s.cmf").string();
    int rc = 0;
    sh(std::string(CORTIQ_CLI_PATH) + " convert " + hf.string() + " -o " + model_ + " --quant f32 2>&1", &rc);
    ok_ = rc == 0;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  /// The embedded model with a minimal chat template (it has none), converted once.
  static std::string chat_model() {
    const fs::path hf = fs::path(CORTIQ_SOURCE_DIR) / "models" / "stories260K", d = dir_ / "chat-hf";
    const std::string out = (dir_ / "chat.cmf").string();
    if (fs::exists(out)) return out;
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(hf)) fs::create_symlink(e.path(), d / e.path().filename());
    std::ofstream(d / "chat_template.jinja")
        << "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt "
           "%}assistant:{% endif %}";
    sh(std::string(CORTIQ_CLI_PATH) + " convert " + d.string() + " -o " + out + " --quant f32 2>&1");
    return out;
  }

  /// Runs `cortiq ARGS` (shell syntax allowed, e.g. a `<` redirection); returns its output (stdout
  /// + stderr) and its exit status in `rc`.
  static std::string cli(const std::string& args, int& rc) {
    return sh("timeout 60 " + std::string(CORTIQ_CLI_PATH) + " " + args + " 2>&1", &rc);
  }
  /// Runs `cortiq ARGS`; expects a non-zero exit and `want` in its output (stdout + stderr).
  static void refused(const std::string& args, const std::string& want) {
    int rc = 0;
    const std::string out = cli(args, rc);
    EXPECT_NE(rc, 0) << args << "\n" << out;
    EXPECT_NE(out.find(want), std::string::npos) << args << "\n" << out;
  }
  /// Runs `cortiq ARGS`; expects exit status 0 and returns its output (stdout + stderr).
  static std::string ran(const std::string& args) {
    int rc = 0;
    const std::string out = cli(args, rc);
    EXPECT_EQ(rc, 0) << args << "\n" << out;
    return out;
  }

  static inline fs::path dir_;
  static inline std::string model_;
  static inline bool ok_ = false;
};

TEST_F(CliArgs, NegativeCountsAreRefused) {
  ASSERT_TRUE(ok_);
  refused("run " + model_ + " -p x -n -5 --greedy",
          "--max-tokens: must be ≥ 0 or -1 (until the context is full), got -5");
  refused("bench " + model_ + " -p -1 -n 4 -r 1 -t 1", "--n-prompt: must be ≥ 0, got -1");
  refused("ppl " + model_ + " -f README.md --chunks 0", "--chunks: must be ≥ 1 or -1 (all chunks), got 0");
  refused("ppl " + model_ + " -f README.md --chunks -2", "--chunks: must be ≥ 1 or -1 (all chunks), got -2");
  refused("bench " + model_ + " -p 4 -n 4 -r 1 -t 1,-2", "-t/--threads '1,-2': entry '-2' is not a count");
  refused("run " + model_ + " -p x --threads -1", "--threads: must be ≥ 0, got -1");
  refused("serve " + model_ + " --parallel -3", "--parallel: must be ≥ 0, got -3");
}

TEST_F(CliArgs, OutOfRangeValuesNameTheRule) {
  ASSERT_TRUE(ok_);
  refused("bench " + model_ + " -p 4 -n 4 -r 0 -t 1", "--repetitions: must be > 0, got 0");
  refused("serve " + model_ + " --port 99999", "--port: Value 99999 not in range 0 to 65535");
  refused("run " + model_ + " -p x --top-p 5", "--top-p: must be in [0, 1], got 5");
  refused("run " + model_ + " -p x --min-p -0.5", "--min-p: must be in [0, 1], got -0.5");
  refused("run " + model_ + " -p x --temperature -1", "--temperature: must be ≥ 0, got -1");
  refused("run " + model_ + " -p x --repeat-penalty 0", "--repeat-penalty: must be > 0, got 0");
  refused("run " + model_ + " -p x --ctx 100000",
          "--ctx 100000 exceeds this model's max_position_embeddings (512)");
}

TEST_F(CliArgs, ConvertOfAFileSaysItIsNotAFolder) {
  ASSERT_TRUE(ok_);
  refused("convert " + model_ + " -o " + (dir_ / "x.cmf").string(), "is a file, not a model directory");
  EXPECT_FALSE(fs::exists(dir_ / "x.cmf"));
}

// The other way round: `run` / `serve` on a Hugging Face folder say to convert it first.
TEST_F(CliArgs, RunOfACheckpointFolderSaysConvertFirst) {
  ASSERT_TRUE(ok_);
  const std::string hf = (fs::path(CORTIQ_SOURCE_DIR) / "models" / "stories260K").string();
  refused("run " + hf + " -p x", "is a folder; cortiq runs .cmf files (convert this checkpoint first");
  refused("serve " + hf + " --port 0", "is a folder; cortiq runs .cmf files");
}

// The checks refuse only what is wrong: the same flags with valid values run.
TEST_F(CliArgs, ValidValuesStillRun) {
  ASSERT_TRUE(ok_);
  const std::string out =
      ran("run " + model_ +
          " -p 'Once upon a time' -n 4 --top-p 1 --min-p 0 --temperature 0 --repeat-penalty 1 --ctx 512 "
          "--threads 1");
  EXPECT_NE(out.find("[4 tokens"), std::string::npos) << out;
  EXPECT_EQ(out.find("--system is ignored"), std::string::npos) << out;
}

// bench --json-file: a path that cannot be written fails before the benchmark runs (no table, the
// output path named, not its temporary); a good one gets the same JSON records as --json prints,
// after the table.
TEST_F(CliArgs, BenchJsonFileIsCheckedBeforeTheRun) {
  ASSERT_TRUE(ok_);
  const std::string bad = (dir_ / "no_such_dir" / "b.json").string();
  int rc = 0;
  std::string out = cli("bench " + model_ + " -p 4 -n 2 -r 1 -t 1 --json-file " + bad, rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("Error: Io: cannot create '" + bad + "' ("), std::string::npos) << out;
  EXPECT_EQ(out.find("| model"), std::string::npos) << out;  // it did not run
  const fs::path good = dir_ / "b.json";
  out = ran("bench " + model_ + " -p 4 -n 2 -r 1 -t 1 --json-file " + good.string());
  EXPECT_NE(out.find("| model"), std::string::npos) << out;
  std::ifstream f(good);
  const auto j = nlohmann::json::parse(f);
  ASSERT_TRUE(j.is_array());
  EXPECT_EQ(j.size(), 2u);  // pp4 and tg2
  // an empty entry of a count list is a typo, refused before the run (CLI11's split dropped it)
  refused("bench " + model_ + " -p 4 -n 2 -r 1 -t 1,,2", "-t/--threads '1,,2': entry '' is not a count");
  refused("bench " + model_ + " -p 4 -n 2 -r 1 --parallel 1,x", "--parallel '1,x': entry 'x' is not a count");
}

// `template FILE.cmf` gives the template bos_token / eos_token as the checkpoint folder does (the
// texts of the file's bos and eos ids), so both render the same (a newcomer's trial found them
// missing from the .cmf rendering).
TEST_F(CliArgs, TemplateOfACmfKnowsBosAndEos) {
  ASSERT_TRUE(ok_);
  const fs::path hf = fs::path(CORTIQ_SOURCE_DIR) / "models" / "stories260K", d = dir_ / "bos-hf";
  fs::create_directories(d);
  for (const auto& e : fs::directory_iterator(hf))
    if (!fs::exists(d / e.path().filename())) fs::create_symlink(e.path(), d / e.path().filename());
  std::ofstream(d / "chat_template.jinja")
      << "{% for m in messages %}{% if m['role'] == 'user' %}{{ bos_token }}[INST] {{ m['content'] }} [/INST]"
         "{% else %} {{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}";
  const std::string cmf = (dir_ / "bos.cmf").string();
  ran("convert " + d.string() + " -o " + cmf + " --quant f32");
  const fs::path msgs = dir_ / "bos_msgs.json";
  std::ofstream(msgs) << R"([{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},)"
                      << R"({"role":"user","content":"ok"}])";
  const std::string from_dir = ran("template " + d.string() + " --messages " + msgs.string());
  EXPECT_EQ(from_dir, "<s>[INST] hi [/INST] yo</s><s>[INST] ok [/INST]");
  EXPECT_EQ(ran("template " + cmf + " --messages " + msgs.string()), from_dir);
  // tools are a list, as transformers' apply_chat_template takes them: an object is refused, not dropped
  const fs::path tools = dir_ / "bos_tools.json";
  std::ofstream(tools) << R"({"type":"function"})";
  refused("template " + cmf + " --messages " + msgs.string() + " --tools " + tools.string(),
          tools.string() + ": \"tools\" must be a JSON array of tool schemas, not object");
}

// `run` reads the answer with the template's output protocol (tokenizer/output_protocol.h): a
// generation prompt that opens a <think> block (DeepSeek-R1's, or Qwen3's without
// enable_thinking=false) makes the answer reasoning, which goes to stderr between [thinking] lines
// (stories260K never writes </think>, so all of it); --no-think renders the closed block instead and
// the same model's text is the answer on stdout.
TEST_F(CliArgs, RunShowsReasoningApartFromTheAnswer) {
  ASSERT_TRUE(ok_);
  const fs::path hf = fs::path(CORTIQ_SOURCE_DIR) / "models" / "stories260K", d = dir_ / "think-hf";
  fs::create_directories(d);
  for (const auto& e : fs::directory_iterator(hf))
    if (!fs::exists(d / e.path().filename())) fs::create_symlink(e.path(), d / e.path().filename());
  std::ofstream(d / "chat_template.jinja")
      << "{% for m in messages %}{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}"
         "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
         "{% else %}<think>\n{% endif %}{% endif %}";
  const std::string cmf = (dir_ / "think.cmf").string();
  ran("convert " + d.string() + " -o " + cmf + " --quant f32");
  const std::string cmd =
      std::string(CORTIQ_CLI_PATH) + " run " + cmf + " -p 'Once upon a time' -n 12 --greedy --threads 1";
  int rc = 0;
  const std::string out = sh(cmd + " 2>/dev/null", &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(out, "\n");  // nothing but the final newline: the answer is all reasoning
  const std::string err = sh(cmd + " 2>&1 >/dev/null", &rc);
  const size_t open = err.find("[thinking]\n"), close = err.find("\n[/thinking]\n");
  ASSERT_NE(open, std::string::npos) << err;
  ASSERT_NE(close, std::string::npos) << err;
  EXPECT_GT(close, open + 11) << err;  // some reasoning text between the markers
  const std::string answer = sh(cmd + " --no-think 2>/dev/null", &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_GT(answer.size(), 1u);
  EXPECT_EQ(sh(cmd + " --no-think 2>&1 >/dev/null").find("[thinking]"), std::string::npos);
}

// A repeatable flag takes one value per use, so the model path after it stays the positional (CLI11
// vector options otherwise swallow it: "model is required").
TEST_F(CliArgs, RepeatableFlagBeforeTheModel) {
  ASSERT_TRUE(ok_);
  const std::string out =
      ran("run --stop XYZ " + model_ + " -p 'Once upon a time' -n 2 --greedy --threads 1");
  EXPECT_NE(out.find("[2 tokens"), std::string::npos) << out;
}

// `tokenize --text ""` is the empty string (the stories tokenizer adds BOS = 1), not a missing flag.
TEST_F(CliArgs, TokenizeEmptyText) {
  ASSERT_TRUE(ok_);
  EXPECT_EQ(ran("tokenize " + model_ + " --text '' --ids-only"), "[1]\n");
  EXPECT_EQ(ran("tokenize " + model_ + " --text '' --ids-only --no-special"), "[]\n");
  refused("tokenize " + model_ + " --ids-only", "give --text or -f/--file");
  refused("tokenize " + std::string(CORTIQ_SOURCE_DIR) + "/models/stories260K/tokenizer_config.json --text x",
          "holds the chat template and special-token settings, not the vocabulary: give the tokenizer.json");
  // -f - reads standard input, as template --messages - does
  const fs::path text = dir_ / "tok_stdin.txt";
  std::ofstream(text) << "Once upon a time";
  const std::string from_file = ran("tokenize " + model_ + " -f " + text.string() + " --ids-only");
  EXPECT_EQ(from_file, ran("tokenize " + model_ + " --text 'Once upon a time' --ids-only"));
  EXPECT_EQ(ran("tokenize " + model_ + " -f - --ids-only < " + text.string()), from_file);
}

// `tokenize` shows a byte-fallback token by its byte (HF's <0xE6> piece, id 233 in the stories
// vocab), so the three bytes of 日 are told apart instead of three U+FFFD.
TEST_F(CliArgs, TokenizeShowsByteTokensAsBytes) {
  ASSERT_TRUE(ok_);
  EXPECT_EQ(ran("tokenize " + model_ + " --text '日' --no-special"),
            "   410 -> ' '\n   233 -> '\\xe6'\n   154 -> '\\x97'\n   168 -> '\\xa5'\n");
}

// `run` prints the continuation of the prompt: the stories tokenizer (SentencePiece) writes the
// space before "time" into the token, and it stays (transformers' TextStreamer, llama.cpp).
TEST_F(CliArgs, RunKeepsTheLeadingSpaceOfTheContinuation) {
  ASSERT_TRUE(ok_);
  const std::string out = ran("run " + model_ + " -p 'Once upon a' -n 1 --greedy --threads 1");
  EXPECT_NE(out.find("\n time\n[1 tokens"), std::string::npos) << out;
}

// ppl --mode prefix: the default --tokens (1024) above the model's 512 positions reads 512 tokens
// and scores 511 without a note (the user set nothing); an explicit --tokens above it gets the note,
// in the same terms as the result line. --ctx, a chunked-mode flag, is refused there instead of
// ignored.
TEST_F(CliArgs, PplPrefixModeDefaultsFitTheModel) {
  ASSERT_TRUE(ok_);
  const fs::path text = dir_ / "ppl.txt";
  {
    std::ofstream f(text);
    for (int i = 0; i < 120; ++i) f << "Once upon a time there was a little girl named Lily. ";
  }
  std::string out = ran("ppl " + model_ + " -f " + text.string() + " --mode prefix --threads 1");
  EXPECT_EQ(out.find("note:"), std::string::npos) << out;
  EXPECT_NE(out.find("over 511 tokens"), std::string::npos) << out;
  out = ran("ppl " + model_ + " -f " + text.string() + " --mode prefix --tokens 1024 --threads 1");
  EXPECT_NE(
      out.find("note: --tokens 1024 exceeds this model's max_position_embeddings (512): using the first "
               "512 tokens (511 scored)"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("over 511 tokens"), std::string::npos) << out;
  // --parallel cannot spread one prefix over slots: said, not silently ignored
  out = ran("ppl " + model_ + " -f " + text.string() + " --mode prefix --tokens 64 --parallel 4 --threads 1");
  EXPECT_NE(out.find("note: --parallel 4 has no effect in prefix mode"), std::string::npos) << out;
  EXPECT_NE(out.find("over 63 tokens"), std::string::npos) << out;
  refused("ppl " + model_ + " -f " + text.string() + " --mode prefix --ctx 64", "prefix mode takes --tokens");
  refused("ppl " + model_ + " -f " + text.string() + " --tokens 100",
          "chunked mode takes --ctx and --chunks");
  // the chunk length's floor is told at parse time, for 0 as for a negative value
  refused("ppl " + model_ + " -f " + text.string() + " -c 0", "--ctx: must be ≥ 4, got 0");
  refused("ppl " + model_ + " -f " + text.string() + " -c -3", "--ctx: must be ≥ 4, got -3");
  refused("ppl " + model_ + " -f " + dir_.string(), "it is a folder");
  const fs::path bin = dir_ / "ppl_bin.txt";
  std::ofstream(bin, std::ios::binary) << "ok \xff\xfe more";
  refused("ppl " + model_ + " -f " + bin.string(),
          "is not UTF-8 text: byte 3 (0xFF) starts no valid sequence");
}

// A prompt longer than the context: the hint offers --ctx only while the model allows more, and
// NaN or a negative top-k is refused like any other out-of-range sampling value.
TEST_F(CliArgs, LongPromptHintAndSamplingValues) {
  ASSERT_TRUE(ok_);
  std::string words;
  for (int i = 0; i < 300; ++i) words += "Once upon a time ";
  refused("run " + model_ + " --ctx 64 -n 1 --threads 1 -p '" + words + "'",
          "(raise --ctx, up to 512, or shorten it)");
  refused("run " + model_ + " -n 1 --threads 1 -p '" + words + "'",
          "the context is 512, this model's max_position_embeddings: shorten it");
  refused("run " + model_ + " -p x -n 1 --temperature nan", "--temperature: must be ≥ 0, got nan");
  refused("run " + model_ + " -p x -n 1 --top-k -5", "--top-k: must be ≥ 0, got -5");
  refused("verify " + model_ + " --pubkey zz", "--pubkey: must be 64 hex characters");
  // a single-value flag given twice takes the last value, as getopt tools and llama.cpp do
  EXPECT_NE(ran("run " + model_ + " -p 'Once upon a' -n 5 -n 2 --greedy --threads 1").find("[2 tokens"),
            std::string::npos);
  refused("bench " + model_ + " -p 600 -n 0 -r 1 -t 1", "this model has 512 positions");
  // info counts every tensor's elements, as bench and transformers' num_parameters() do (an integer)
  EXPECT_NE(ran("info " + model_ + " --json").find("\"params\": 260032"), std::string::npos);
}

// Usage errors exit 2 (CLI11's own codes are 105–114); an unknown command is named as such.
TEST_F(CliArgs, UsageErrorsExitTwo) {
  int rc = 0;
  std::string out = cli("frobnicate", rc);
  EXPECT_EQ(WEXITSTATUS(rc), 2) << out;
  EXPECT_NE(out.find("unknown command 'frobnicate'; commands: "), std::string::npos) << out;
  out = cli("run -p x", rc);  // no model
  EXPECT_EQ(WEXITSTATUS(rc), 2) << out;
  out = cli("--help", rc);
  EXPECT_EQ(rc, 0) << out;
}

// diff exits 1 when the files differ (as diff(1)) and prints both shapes of a changed tensor; sign
// refuses a file that is not CMF.
TEST_F(CliArgs, DiffExitStatusAndSignChecksTheFile) {
  ASSERT_TRUE(ok_);
  int rc = 0;
  std::string out = cli("diff " + model_ + " " + model_, rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find(" 0 changed, 0 only in a, 0 only in b"), std::string::npos) << out;
  const fs::path q8 = dir_ / "diff_q8.cmf";
  ran("requant " + model_ + " --quant q8 -o " + q8.string());
  out = cli("diff " + model_ + " " + q8.string(), rc);
  EXPECT_EQ(WEXITSTATUS(rc), 1) << out;
  EXPECT_NE(out.find("~ model.layers.0.mlp.up_proj.weight (f32 [172, 64] "), std::string::npos) << out;
  EXPECT_NE(out.find("-> q8_row [172, 64] "), std::string::npos) << out;
  const fs::path txt = dir_ / "not.cmf";
  std::ofstream(txt) << "hello";
  refused("sign " + txt.string() + " --key " + (dir_ / "k.key").string(), "InvalidMagic");
  EXPECT_FALSE(fs::exists(txt.string() + ".sig"));
}

// A --quant-rule that matches nothing, or whose tensors take another dtype, is reported (stories'
// down_proj has 172 inputs: q4tp needs a multiple of 32, so it falls back to q8_2f).
TEST_F(CliArgs, QuantRulesThatDoNotApplyAreReported) {
  ASSERT_TRUE(ok_);
  const std::string out = ran("convert " + std::string(CORTIQ_SOURCE_DIR) + "/models/stories260K -o " +
                              (dir_ / "rules.cmf").string() +
                              " --quant q8 --quant-rule 'nomatch*=q8' --quant-rule '*down_proj*=q4tp'");
  EXPECT_NE(out.find("warning: --quant-rule 'nomatch*=q8' matches no tensor"), std::string::npos) << out;
  EXPECT_NE(out.find("warning: --quant-rule '*down_proj*=q4tp': 5 of its 5 tensors are not q4tp"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("→ q8_2f"), std::string::npos) << out;
}

// A damaged vocab section is named as such (with the file), not as an invalid tokenizer.json.
TEST_F(CliArgs, DamagedVocabSectionIsNamed) {
  ASSERT_TRUE(ok_);
  const fs::path bad = dir_ / "badvocab.cmf";
  fs::copy_file(model_, bad, fs::copy_options::overwrite_existing);
  const uint64_t off = cortiq::cmf::Reader::open(model_).envelope(0).vocab.off;
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(off));
    f.put('#');  // the JSON's opening brace
  }
  // run checks the section hashes on open (issue 27) before it builds the tokenizer
  refused("run " + bad.string() + " -p x -n 1", bad.string() + ": section 'vocab': hash mismatch");
  refused("tokenize " + bad.string() + " --text x", bad.string() + ": the vocab section: ");
}

// Each token's text is printed on one line: a newline, tab, quote or backslash in it is escaped.
TEST_F(CliArgs, TokenizeEscapesPieces) {
  ASSERT_TRUE(ok_);
  const fs::path in = dir_ / "pieces.txt";
  std::ofstream(in) << "a\nb\t'\\";
  const std::string out = ran("tokenize " + model_ + " --no-special -f " + in.string());
  // an HF folder takes its tokenizer.json; a GGUF file is named as such, not "invalid JSON"
  EXPECT_EQ(ran("tokenize " + std::string(CORTIQ_SOURCE_DIR) + "/models/stories260K --text hi --ids-only"),
            "[1, 270, 417]\n");
  const fs::path gguf = dir_ / "x.gguf";
  std::ofstream(gguf) << "GGUF\x03";
  refused("tokenize " + gguf.string() + " --text hi", "is a GGUF file");
  // SentencePiece word starts show as a space, as llama-tokenize prints them (" He", not "He")
  EXPECT_NE(ran("tokenize " + model_ + " --no-special --text ' Hello'").find("-> ' He'"), std::string::npos);
  for (const char* piece : {"'\\n'", "'\\t'", "'\\''", "'\\\\'"})
    EXPECT_NE(out.find(piece), std::string::npos) << out;
  // one line per token
  const std::string ids = ran("tokenize " + model_ + " --no-special --ids-only -f " + in.string());
  EXPECT_EQ(static_cast<size_t>(std::count(out.begin(), out.end(), '\n')),
            static_cast<size_t>(std::count(ids.begin(), ids.end(), ',')) + 1)
      << out << ids;
}

// Interactive chat keeps going when the conversation outgrows the context (the oldest exchanges are
// dropped, with a note) and when one message alone is too long (an error line, then the next turn).
TEST_F(CliArgs, InteractiveChatSurvivesAFullContext) {
  ASSERT_TRUE(ok_);
  const std::string m = chat_model();
  ASSERT_TRUE(fs::exists(m));
  std::string lines;
  for (int i = 0; i < 3; ++i) lines += "Once upon a time there was a little girl\n";
  std::string huge;
  for (int i = 0; i < 40; ++i) huge += "and then the dog ran ";
  lines += huge + "\nHi\n";
  std::ofstream(dir_ / "turns.txt") << lines;
  const std::string out =
      ran("run " + m + " -n 16 --greedy --ctx 64 --threads 1 < " + (dir_ / "turns.txt").string());
  EXPECT_NE(out.find("note: dropped the 2 oldest messages to fit the context (64 tokens)"), std::string::npos)
      << out;
  EXPECT_NE(out.find("Error: InvalidArgument: the prompt is"), std::string::npos) << out;
  size_t footers = 0;
  for (size_t p = out.find(" tokens · "); p != std::string::npos; p = out.find(" tokens · ", p + 1))
    ++footers;
  EXPECT_EQ(footers, 4u) << out;  // turns 1-3 and the last one; the huge one had none
}

// Interactive chat commands (llama-cli's): /help lists them, /clear forgets the conversation, /exit
// ends the chat before the lines after it.
TEST_F(CliArgs, InteractiveChatCommands) {
  ASSERT_TRUE(ok_);
  const std::string m = chat_model();
  ASSERT_TRUE(fs::exists(m));
  std::ofstream(dir_ / "cmds.txt") << "Hi\n/help\nHi\n/clear\nHi\n/exit\nHi\n";
  const std::string out = ran("run " + m + " -n 8 --greedy --threads 1 < " + (dir_ / "cmds.txt").string());
  EXPECT_NE(out.find("/clear                 forget the conversation so far"), std::string::npos) << out;
  EXPECT_NE(out.find("/set KEY VALUE"), std::string::npos) << out;
  EXPECT_NE(out.find("(conversation cleared)"), std::string::npos) << out;
  size_t footers = 0;
  for (size_t p = out.find(" tokens · "); p != std::string::npos; p = out.find(" tokens · ", p + 1))
    ++footers;
  EXPECT_EQ(footers, 3u) << out;  // three "Hi" before /exit, none after
}

/// `cortiq ARGS` on a pseudo-terminal (forkpty), as a person at a terminal runs it: keys are
/// typed in, the screen's bytes are read back.
class Pty {
 public:
  Pty(const std::vector<std::string>& args, const std::vector<std::string>& env) {
    struct winsize ws {};
    ws.ws_row = 40;
    ws.ws_col = 200;
    pid_ = ::forkpty(&fd_, nullptr, nullptr, &ws);
    if (pid_ == 0) {
      for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> argv{const_cast<char*>(CORTIQ_CLI_PATH)};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~Pty() {
    if (fd_ >= 0) ::close(fd_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool started() const { return pid_ > 0; }
  /// Reads until the output from `from` on holds `want`; false when the child ends first or
  /// 60 s pass without it (a hang fails the test, it does not block the suite).
  bool wait_for(const std::string& want, size_t from) {
    for (int waited = 0; out.find(want, from) == std::string::npos;) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) {
        if ((waited += 100) > 60000) return false;
        continue;
      }
      char buf[4096];
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) return false;
      out.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  void type(const std::string& keys) {
    ASSERT_EQ(::write(fd_, keys.data(), keys.size()), ssize_t(keys.size()));
  }
  /// Waits for the child to end; its exit status (-1 when it did not exit normally).
  int finish() {
    char buf[4096];
    while (::read(fd_, buf, sizeof buf) > 0) out.append(buf);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  std::string out;

 private:
  int fd_ = -1;
  pid_t pid_ = -1;
};

// The interactive chat on a terminal (libedit): Up recalls the last line, /set changes the sampler
// (the answer after `/set temp 1.5` and `/set seed 7` is the one-shot answer of --temp 1.5 --seed 7),
// a """ block is one message, /save writes the conversation as JSON, the history file is written.
TEST_F(CliArgs, InteractiveChatOnATerminal) {
  ASSERT_TRUE(ok_);
  const std::string m = chat_model();
  const std::string hist = (dir_ / "history").string(), saved = (dir_ / "conv.json").string();
  Pty t({"run", m, "-n", "8", "--threads", "1"}, {"CORTIQ_HISTORY=" + hist, "TERM=xterm"});
  ASSERT_TRUE(t.started());
  ASSERT_TRUE(t.wait_for("Type your message", 0)) << t.out;
  size_t at = t.out.size();
  auto say = [&](const std::string& keys, const std::string& want) {
    at = t.out.size();
    t.type(keys);
    EXPECT_TRUE(t.wait_for(want, at)) << "after " << keys << ":\n" << t.out.substr(at);
  };
  say("/set temp 1.5\r", "temp 1.5 ·");
  say("/set seed 7\r", "seed 7 ·");
  say("Once upon a time\r", "[8 tokens");
  at = t.out.size();
  t.type("\x1b[A");  // Up: the line comes back
  EXPECT_TRUE(t.wait_for("Once upon a time", at)) << t.out.substr(at);
  say("\r", "[8 tokens");
  say("\"\"\"\r", "... ");
  say("line one\r", "... ");
  say("line two\"\"\"\r", "[8 tokens");
  say("/save " + saved + "\r", "(saved 6 messages to");
  say("/load " + saved + "\r", "(loaded 6 messages from");
  t.type("/exit\r");
  EXPECT_EQ(t.finish(), 0) << t.out;
  std::ifstream f(saved);
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  const auto& msgs = j["messages"];
  ASSERT_EQ(msgs.size(), 6u) << j.dump();
  EXPECT_EQ(msgs[0]["content"], "Once upon a time");
  EXPECT_EQ(msgs[2]["content"], "Once upon a time");  // recalled with Up
  EXPECT_EQ(msgs[4]["content"], "line one\nline two");
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(msgs[i]["role"], i % 2 ? "assistant" : "user");
  // the first answer is what the flags give: the /set values reached the sampler
  int rc = 0;
  std::string one = sh(std::string(CORTIQ_CLI_PATH) + " run " + m +
                           " -p 'Once upon a time' -n 8 --threads 1 --temp 1.5 --seed 7 2>/dev/null",
                       &rc);
  ASSERT_EQ(rc, 0);
  if (!one.empty() && one.back() == '\n') one.pop_back();
  EXPECT_EQ(msgs[1]["content"].get<std::string>(), one);
  const std::string greedy = sh(std::string(CORTIQ_CLI_PATH) + " run " + m +
                                " -p 'Once upon a time' -n 8 --threads 1 --greedy 2>/dev/null");
  EXPECT_NE(greedy, one + "\n");  // the settings made a difference the check can see
  std::ifstream h(hist);
  const std::string history((std::istreambuf_iterator<char>(h)), std::istreambuf_iterator<char>());
  EXPECT_NE(history.find("Once"), std::string::npos) << history;
  // what /save wrote is what `cortiq template --messages` reads
  const std::string rendered = ran("template " + m + " --messages " + saved);
  EXPECT_NE(rendered.find("user: line one\nline two\n"), std::string::npos) << rendered;
}

// Without a chat template each line is a raw completion, said at the start; /clear does not claim a
// conversation, /save refuses, /set works; piped input (no terminal) reads plain lines, \ continues.
TEST_F(CliArgs, RawChatSaysEachLineIsACompletion) {
  ASSERT_TRUE(ok_);
  std::ofstream(dir_ / "raw.txt") << "/clear\n/save x.json\n/set top_k 1\n/set bogus 1\n/set\n/task "
                                     "nope\n/skill none\n/task off\nOnce upon \\\na time\n";
  const std::string out =
      ran("run " + model_ + " -n 4 --threads 1 --verbose-prompt < " + (dir_ / "raw.txt").string());
  EXPECT_NE(out.find("note: this model has no chat template: each line is a raw completion"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("(no conversation to clear: each line is a raw completion)"), std::string::npos) << out;
  EXPECT_EQ(out.find("(conversation cleared)"), std::string::npos) << out;
  EXPECT_NE(out.find("Error: InvalidArgument: /save: no conversation"), std::string::npos) << out;
  EXPECT_NE(out.find("top_k 1 ·"), std::string::npos) << out;
  EXPECT_NE(out.find("/set: unknown key 'bogus'"), std::string::npos) << out;
  EXPECT_NE(out.find("Error: InvalidArgument: unknown task 'nope'"), std::string::npos) << out;
  EXPECT_NE(out.find("skill: none (the backbone)"), std::string::npos) << out;
  EXPECT_NE(out.find("Task: off | Sparsity: 0%"), std::string::npos) << out;
  // the token count is what `tokenize` gives the same text (BOS included, as a prompt gets it)
  const std::string ids =
      ran("tokenize " + model_ + " --ids-only --text \"$(printf 'Once upon \\na time')\" 2>/dev/null");
  const size_t n = static_cast<size_t>(std::count(ids.begin(), ids.end(), ',')) + 1;
  EXPECT_NE(out.find(fmt::format("[prompt: {} tokens]\nOnce upon \na time\n[/prompt]", n)), std::string::npos)
      << out << ids;
}

// `info --sections` lists the envelope's sections as the Reader sees them: offsets, lengths, the
// stored hashes, absent ones named, and the file's size in the last line.
TEST_F(CliArgs, InfoListsSections) {
  ASSERT_TRUE(ok_);
  const auto r = cortiq::cmf::Reader::open(model_);
  const auto& e = r.envelope();
  const std::string out = ran("info " + model_ + " --sections");
  EXPECT_NE(
      out.find(fmt::format("1\theader\t128\t{}\t{}\n", e.header.len, cortiq::cmf::hex16(e.header_hash))),
      std::string::npos)
      << out;
  EXPECT_NE(out.find(fmt::format("1\tdir\t{}\t{}\t{}\n", 128 + e.header.len, e.dir.len,
                                 cortiq::cmf::hex16(e.dir_hash))),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(fmt::format("1\tdata\t{}\t{}\t-\n", e.data.off, e.data.len)), std::string::npos) << out;
  EXPECT_NE(out.find("1\tmasks\tabsent\n"), std::string::npos) << out;
  EXPECT_NE(out.find(fmt::format("1\tvocab\t{}\t{}\t{}\n", e.vocab.off, e.vocab.len,
                                 *r.header().section_hashes.vocab)),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(fmt::format("# 1 file(s), {} bytes", fs::file_size(model_))), std::string::npos) << out;
  const std::string j = ran("info " + model_ + " --sections --json");
  EXPECT_NE(j.find("\"section\": \"index\""), std::string::npos) << j;
}

// `info` says whether the file can chat and which ids start and end a sequence.
TEST_F(CliArgs, InfoShowsTheChatBundle) {
  ASSERT_TRUE(ok_);
  std::string out = ran("info " + model_);
  EXPECT_NE(out.find("  Chat:        no template, BOS 1, EOS 2 1\n"), std::string::npos) << out;
  out = ran("info " + chat_model());
  EXPECT_NE(out.find("  Chat:        template (116 chars), BOS 1, EOS 2 1\n"), std::string::npos) << out;
}

// A flag that cannot apply is said to be ignored (stories260K has no chat template), not dropped.
TEST_F(CliArgs, SystemMessageWithoutTemplateIsNoted) {
  ASSERT_TRUE(ok_);
  const std::string out =
      ran("run " + model_ + " -p 'Once upon a time' -n 2 --greedy --system 'be brief' --threads 1");
  EXPECT_NE(out.find("note: --system is ignored: this model has no chat template"), std::string::npos) << out;
}

// `-t` is the thread count, as in llama.cpp; a number given to --task is hinted at -t/--threads.
TEST_F(CliArgs, IntegerTaskHintsAtThreads) {
  ASSERT_TRUE(ok_);
  const std::string hint = "(--task selects a task mask; the thread count is -t/--threads)";
  refused("run " + model_ + " --task 2 -p hi -n 1",
          "unknown task '2': this file has no task masks (available: general, off) " + hint);
  const std::string text = std::string(CORTIQ_SOURCE_DIR) + "/README.md";
  refused("ppl " + model_ + " -f " + text + " --task 4", "unknown task '4'");
  refused("ppl " + model_ + " -f " + text + " --task 4", hint);
  int rc = 0;
  const std::string out = cli("run " + model_ + " --task nope -p hi -n 1", rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("unknown task 'nope'"), std::string::npos) << out;
  EXPECT_EQ(out.find("--threads"), std::string::npos) << out;  // a name, not a number: no hint
  // -t 1 is one thread: the same greedy text as --threads 1
  const std::string t = ran("run " + model_ + " -t 1 -p 'Once upon a time' -n 8 --greedy");
  const std::string threads = ran("run " + model_ + " --threads 1 -p 'Once upon a time' -n 8 --greedy");
  EXPECT_EQ(t.substr(0, t.find("[8 tokens")), threads.substr(0, threads.find("[8 tokens"))) << t << threads;
  refused("run " + model_ + " -t x -p hi -n 1", "-t");
}

// run -f FILE reads the prompt from a file (less one trailing newline, as llama-cli), refuses -p
// with it, and names a file it cannot read.
TEST_F(CliArgs, RunPromptFromFile) {
  ASSERT_TRUE(ok_);
  const fs::path p = dir_ / "prompt.txt";
  std::ofstream(p) << "Once upon a\n";
  const std::string out = ran("run " + model_ + " -f " + p.string() + " -n 1 --greedy --threads 1");
  EXPECT_NE(out.find("\n time\n[1 tokens"), std::string::npos) << out;
  refused("run " + model_ + " -p x -f " + p.string() + " -n 1", "--prompt excludes --file");
  refused("run " + model_ + " -f " + (dir_ / "missing.txt").string() + " -n 1",
          "Io: -f/--file: cannot read '" + (dir_ / "missing.txt").string() + "': No such file or directory");
  refused("run " + model_ + " -f " + dir_.string() + " -n 1", "it is a folder");
}

// --temp is --temperature (llama-cli's spelling), and with run's default repetition penalty (1, as
// llama.cpp) temperature 0 is exactly --greedy; the old default 1.1 changed the text.
TEST_F(CliArgs, TempZeroMatchesGreedy) {
  ASSERT_TRUE(ok_);
  const std::string base = "run " + model_ + " -p 'Once upon a time' -n 60 --threads 1 --seed 1 ";
  auto text = [](const std::string& out) { return out.substr(0, out.find("\n[")); };  // less the footer
  const std::string greedy = text(ran(base + "--greedy"));
  EXPECT_NE(greedy.find(", there was a little girl named Lily."), std::string::npos) << greedy;
  EXPECT_EQ(text(ran(base + "--temp 0")), greedy);
  EXPECT_EQ(text(ran(base + "--temperature 0")), greedy);
  EXPECT_NE(text(ran(base + "--temp 0 --repeat-penalty 1.1")), greedy);
  refused(base + "--temp -1", "--temperature: must be ≥ 0, got -1");
}

// -n -1 generates until end of text or a full context (llama-cli); other negatives stay errors. The
// prompt is 5 tokens with BOS: 27 more fill the 32 positions, and the last one's logits give a 28th.
TEST_F(CliArgs, MaxTokensMinusOneFillsTheContext) {
  ASSERT_TRUE(ok_);
  const std::string out = ran("run " + model_ + " -p 'Once upon a time' -n -1 --greedy --ctx 32 --threads 1");
  EXPECT_NE(out.find("[28 tokens"), std::string::npos) << out;
  EXPECT_NE(out.find("finish: length]"), std::string::npos) << out;
  refused("run " + model_ + " -p x -n -2",
          "--max-tokens: must be ≥ 0 or -1 (until the context is full), got -2");
}

// --seed -1 is a random seed (llama-cli); a fixed seed repeats; other negatives stay errors.
TEST_F(CliArgs, SeedMinusOneIsRandom) {
  ASSERT_TRUE(ok_);
  const std::string base =
      "run " + model_ +
      " -p 'Once upon a time' -n 32 --temperature 1.5 --top-k 0 --top-p 1 --min-p 0 --threads 1 ";
  auto text = [](const std::string& out) { return out.substr(0, out.find("\n[")); };
  EXPECT_EQ(text(ran(base + "--seed 7")), text(ran(base + "--seed 7")));
  const std::string a = text(ran(base + "--seed -1")), b = text(ran(base + "--seed -1")),
                    c = text(ran(base + "--seed -1"));
  EXPECT_FALSE(a == b && b == c) << a;
  refused(base + "--seed -2", "--seed: must be an integer ≥ 0 or -1 (random), got -2");
  refused(base + "--seed x", "--seed: must be an integer ≥ 0 or -1 (random), got x");
}

// ppl takes llama-perplexity's -c and --chunks, and ends with its "Final estimate" line.
TEST_F(CliArgs, PplLlamaSpellings) {
  ASSERT_TRUE(ok_);
  const fs::path text = dir_ / "ppl_chunks.txt";
  {
    std::ofstream f(text);
    for (int i = 0; i < 60; ++i) f << "Once upon a time there was a little girl named Lily. ";
  }
  const std::string all = ran("ppl " + model_ + " -f " + text.string() + " -c 64 --threads 1");
  EXPECT_NE(all.find("chunks: 13 x 64 tokens (text: 842 tokens)"), std::string::npos) << all;
  const std::string two = ran("ppl " + model_ + " -f " + text.string() + " -c 64 --chunks 2 --threads 1");
  EXPECT_NE(two.find("chunks: 2 x 64 tokens"), std::string::npos) << two;
  EXPECT_NE(two.find("over 62 tokens"), std::string::npos) << two;  // 2 × (64/2 − 1)
  const size_t p = two.find("PPL = ");
  ASSERT_NE(p, std::string::npos) << two;
  const std::string value = two.substr(p, two.find(" over", p) - p);  // "PPL = x +/- y"
  EXPECT_NE(two.find("\nFinal estimate: " + value + "\n"), std::string::npos) << two;
  refused("ppl " + model_ + " -f " + text.string() + " --mode prefix --chunks 2",
          "--chunks applies to chunked mode");
  refused("ppl " + model_ + " -f " + text.string() + " --chunks -3", "--chunks: must be ≥ 1 or -1");
  // piped: no progress bar
  EXPECT_EQ(all.find('\r'), std::string::npos) << all;
}

// ppl's KL-divergence mode (llama-perplexity's): a base file of log-probabilities; a model against
// its own base has KL 0 and 100 % top-1 agreement; q8 against the f32 base a small positive KL that
// an independent numpy computation over the two files' log-probabilities gives too; piped, the
// running estimates end at the final PPL.
TEST_F(CliArgs, PplKlDivergence) {
  ASSERT_TRUE(ok_);
  const fs::path text = dir_ / "kl.txt";
  {
    std::ofstream f(text);
    for (int i = 0; i < 12; ++i)
      f << "Once upon a time there was a little girl named Lily. She loved to play in the park with her "
           "dog. ";
  }
  const std::string base = (dir_ / "f32.kld").string(), qbase = (dir_ / "q8.kld").string();
  const std::string q8 = (dir_ / "q8.cmf").string();
  ran("convert " + std::string(CORTIQ_SOURCE_DIR) + "/models/stories260K --quant q8 -o " + q8);
  const std::string flags = " --ctx 64 --threads 1 --exact -f " + text.string();
  std::string out = ran("ppl " + model_ + flags + " --kl-divergence-base " + base);
  // running estimates "[1]x,[2]y,…" (piped): the last one is the final PPL
  const size_t fin = out.find("Final estimate: PPL = ");
  ASSERT_NE(fin, std::string::npos) << out;
  const std::string ppl = out.substr(fin + 22, out.find(' ', fin + 22) - fin - 22);
  EXPECT_NE(out.find("[1]"), std::string::npos) << out;
  EXPECT_NE(out.find("]" + ppl + ",\n"), std::string::npos) << out;
  ASSERT_TRUE(fs::exists(base)) << out;
  // a model against its own base: exactly 0 and 100 %
  out = ran("ppl " + model_ + " --kl-divergence-base " + base + " --kl-divergence --threads 1 --exact");
  EXPECT_NE(out.find("Mean    KLD:   0.000000 ±   0.000000"), std::string::npos) << out;
  EXPECT_NE(out.find("Maximum KLD:   0.000000"), std::string::npos) << out;
  EXPECT_NE(out.find("Same top p: 100.000 ±  0.000 %"), std::string::npos) << out;
  const size_t pq = out.find("Mean PPL(Q)                   : ");
  ASSERT_NE(pq, std::string::npos) << out;
  EXPECT_NEAR(std::stod(out.substr(pq + 32, 11)), std::stod(ppl), 1e-3) << out;
  // q8 against the f32 base, and the same numbers from the two base files in numpy
  out = ran("ppl " + q8 + " --kl-divergence-base " + base + " --kl-divergence --threads 1 --exact -f " +
            text.string());
  const size_t k = out.find("Mean    KLD: ");
  ASSERT_NE(k, std::string::npos) << out;
  const double kld = std::stod(out.substr(k + 13, 11));
  EXPECT_GT(kld, 0.0) << out;
  EXPECT_LT(kld, 0.05) << out;
  const size_t tp = out.find("Same top p: ");
  ASSERT_NE(tp, std::string::npos) << out;
  const double top = std::stod(out.substr(tp + 12, 8));
  ran("ppl " + q8 + flags + " --kl-divergence-base " + qbase);
  int rc = 0;
  sh("/usr/bin/python3 -c 'import numpy' 2>/dev/null", &rc);
  if (rc != 0) GTEST_SKIP() << "python3 + numpy missing for the independent KL";
  const std::string py =
      "import numpy as np, sys\n"
      "def rd(p):\n"
      "  b = open(p, 'rb').read(); assert b[:8] == b'CORTIQKL'\n"
      "  v, nv, nc, nk, first, _ = np.frombuffer(b[8:32], '<u4')\n"
      "  off = 32 + 4 * nk * nc\n"
      "  return np.frombuffer(b[off:], '<f4').reshape(-1, nv).astype(np.float64)\n"
      "a, q = rd(sys.argv[1]), rd(sys.argv[2])\n"
      "kl = (np.exp(a) * (a - q)).sum(1)\n"
      "print('%.6f %.3f' % (kl.mean(), 100 * (a.argmax(1) == q.argmax(1)).mean()))\n";
  std::ofstream(dir_ / "kl.py") << py;
  const std::string ref = sh("/usr/bin/python3 " + (dir_ / "kl.py").string() + " " + base + " " + qbase, &rc);
  ASSERT_EQ(rc, 0) << ref;
  double ref_kld = 0, ref_top = 0;
  ASSERT_EQ(std::sscanf(ref.c_str(), "%lf %lf", &ref_kld, &ref_top), 2) << ref;
  EXPECT_NEAR(kld, ref_kld, 2e-6) << out << ref;
  EXPECT_NEAR(top, ref_top, 1e-3) << out << ref;
  refused("ppl " + model_ + " --kl-divergence --threads 1",
          "--kl-divergence compares against --kl-divergence-base");
  refused("ppl " + model_ + " --kl-divergence-base " + text.string() + " --kl-divergence",
          "is not a cortiq KL-divergence base file");
}

// On a terminal ppl draws the shared progress bar on stderr (convert and verify do too).
TEST_F(CliArgs, PplShowsProgressOnATerminal) {
  ASSERT_TRUE(ok_);
  if (sh("command -v script").empty()) GTEST_SKIP() << "script(1) missing";
  const fs::path text = dir_ / "ppl_long.txt";
  {
    std::ofstream f(text);
    for (int i = 0; i < 4000; ++i) f << "Once upon a time there was a little girl named Lily. ";
  }
  // CORTIQ_NO_PROGRESS (set by .ci/run for logs) would turn the bar off: this test is about the bar
  const std::string out =
      sh("timeout 120 script -qec 'env -u CORTIQ_NO_PROGRESS " + std::string(CORTIQ_CLI_PATH) + " ppl " +
         model_ + " -f " + text.string() + " --threads 1 --batch 16 >/dev/null' /dev/null 2>&1");
  EXPECT_NE(out.find("\r  perplexity ["), std::string::npos) << out;
}

// An empty or too-short file is named as such, counting the file's own tokens (not the BOS).
TEST_F(CliArgs, PplEmptyOrShortFile) {
  ASSERT_TRUE(ok_);
  const fs::path empty = dir_ / "empty.txt", shortf = dir_ / "short.txt";
  std::ofstream(empty) << "";
  std::ofstream(shortf) << "hi";
  refused("ppl " + model_ + " -f " + empty.string(),
          "'" + empty.string() + "' is empty: it has no tokens to score");
  refused("ppl " + model_ + " -f " + empty.string() + " --mode prefix", "is empty");
  refused("ppl " + model_ + " -f " + shortf.string(),
          "'" + shortf.string() +
              "' is too short: it has 2 tokens (plus BOS), fewer than one chunk of --ctx 512");
}

// diff names the header fields that differ (dotted paths, both values) and the vocab section apart:
// the same checkpoint from a folder of another name differs only in provenance.source_model.
TEST_F(CliArgs, DiffNamesHeaderFieldsAndSections) {
  ASSERT_TRUE(ok_);
  const fs::path hf = fs::path(CORTIQ_SOURCE_DIR) / "models" / "stories260K";
  const fs::path renamed = dir_ / "renamed-hf", retok = dir_ / "retok-hf";
  fs::create_directories(renamed);
  fs::create_directories(retok);
  for (const auto& e : fs::directory_iterator(hf)) {
    fs::create_symlink(e.path(), renamed / e.path().filename());
    if (e.path().filename() != "tokenizer.json") fs::create_symlink(e.path(), retok / e.path().filename());
  }
  {  // the same tokenizer, other bytes (a trailing newline)
    std::ifstream in(hf / "tokenizer.json", std::ios::binary);
    std::ofstream out(retok / "tokenizer.json", std::ios::binary);
    out << in.rdbuf() << "\n";
  }
  const std::string a = (dir_ / "renamed.cmf").string(), b = (dir_ / "retok.cmf").string();
  ran("convert " + renamed.string() + " -o " + a + " --quant f32");
  ran("convert " + retok.string() + " -o " + b + " --quant f32");
  int rc = 0;
  std::string out = cli("diff " + model_ + " " + a, rc);
  EXPECT_EQ(WEXITSTATUS(rc), 1) << out;
  EXPECT_NE(out.find("~ header: provenance.source_model: \"stories260K\" vs \"renamed-hf\"\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("section differs"), std::string::npos) << out;
  EXPECT_NE(out.find(" 0 changed, 0 only in a, 0 only in b"), std::string::npos) << out;
  out = cli("diff " + a + " " + b, rc);
  EXPECT_EQ(WEXITSTATUS(rc), 1) << out;
  EXPECT_NE(out.find("~ vocab (tokenizer.json) section differs ("), std::string::npos) << out;
  EXPECT_NE(out.find("~ header: provenance.source_model: \"renamed-hf\" vs \"retok-hf\"\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("masks section differs"), std::string::npos) << out;
  EXPECT_EQ(out.find("~ header differs"), std::string::npos) << out;
}

// info shows the stored dtypes' shares of the parameters (the header's quant_type is only the
// format's informational enum), in text and in --json.
TEST_F(CliArgs, InfoShowsTheDtypeMix) {
  ASSERT_TRUE(ok_);
  const fs::path q8 = dir_ / "info_q8.cmf";
  if (!fs::exists(q8)) ran("requant " + model_ + " --quant q8 -o " + q8.string());
  EXPECT_NE(ran("info " + model_).find("\n  Dtypes:      f32 100.0%\n"), std::string::npos);
  const auto r = cortiq::cmf::Reader::open(q8.string());
  uint64_t all = 0, f16 = 0;  // the norms stay f16
  for (const auto& t : r.tensors()) {
    all += t.numel();
    if (t.dtype == cortiq::quant::DType::F16) f16 += t.numel();
  }
  ASSERT_GT(f16, 0u);
  const double pct = 100.0 * static_cast<double>(f16) / static_cast<double>(all);
  const std::string out = ran("info " + q8.string());
  EXPECT_NE(out.find(fmt::format("\n  Dtypes:      q8_row {:.1f}%, f16 {:.1f}%\n", 100.0 - pct, pct)),
            std::string::npos)
      << out;
  EXPECT_LT(out.find("  Quant:"), out.find("  Dtypes:")) << out;
  const std::string j = ran("info " + q8.string() + " --json");
  EXPECT_NE(j.find(fmt::format("\"f16\": {{\n      \"bytes\": {},\n      \"params\": {},", f16 * 2, f16)),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"q8_row\": {"), std::string::npos) << j;
}

// sign signs every shard of a set; verify --pubkey checks every shard's signature and fails, naming
// the shard, when one is replaced, unsigned or missing.
TEST_F(CliArgs, SignAndVerifyAShardSet) {
  ASSERT_TRUE(ok_);
  const fs::path d = dir_ / "shards";
  fs::create_directories(d);
  const std::string out = ran("convert " + std::string(CORTIQ_SOURCE_DIR) + "/models/stories260K -o " +
                              (d / "shs.cmf").string() + " --quant f32 --shard-max-gb 0.002");
  const std::string s1 = (d / "shs-00001-of-00002.cmf").string(),
                    s2 = (d / "shs-00002-of-00002.cmf").string();
  ASSERT_TRUE(fs::exists(s1) && fs::exists(s2)) << out;
  const std::string key = (d / "k.key").string();
  // a --key path that does not exist is refused unless --new-key asks for it (a mistyped path
  // would otherwise sign with a fresh key and replace good signatures)
  refused("sign " + s1 + " --key " + key, "does not exist (add --new-key");
  EXPECT_FALSE(fs::exists(key));
  EXPECT_FALSE(fs::exists(s1 + ".sig"));
  const std::string signed_out = ran("sign " + s1 + " --key " + key + " --new-key");
  EXPECT_NE(signed_out.find("created signing key " + key + " (private"), std::string::npos) << signed_out;
  EXPECT_NE(signed_out.find("signed: " + s1 + ".sig\n"), std::string::npos) << signed_out;
  EXPECT_NE(signed_out.find("signed: " + s2 + ".sig\n"), std::string::npos) << signed_out;
  const size_t p = signed_out.find("pubkey: ");
  ASSERT_NE(p, std::string::npos) << signed_out;
  const std::string pub = signed_out.substr(p + 8, 64);
  // signing again with another key replaces the signatures, and says whose they were
  const std::string resigned = ran("sign " + s1 + " --key " + (d / "k2.key").string() + " --new-key");
  EXPECT_NE(
      resigned.find("note: " + s2 + ".sig was signed by another key (pubkey " + pub + "); it is replaced"),
      std::string::npos)
      << resigned;
  const std::string back = ran("sign " + s1 + " --key " + key);  // the first key's signatures again
  EXPECT_NE(back.find("pubkey: " + pub), std::string::npos) << back;
  std::string v = ran("verify " + s1 + " --pubkey " + pub);
  EXPECT_NE(v.find("all 2 shards"), std::string::npos) << v;
  EXPECT_NE(v.find("\nOK\n"), std::string::npos) << v;
  // shard 2 changed (one byte of a weight): its signature no longer matches
  const fs::path keep = d / "keep.cmf";
  fs::copy_file(s2, keep);
  {
    const auto r = cortiq::cmf::Reader::open(s2, {.open_shard_set = false});
    const auto& t = r.tensors().at(0);
    std::fstream f(s2, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(r.envelope().data.off + t.off));
    f.put('\x7f');
  }
  refused("verify " + s1 + " --pubkey " + pub, "✗ shard 2/2: " + s2 + ".sig: ");
  // the file itself back, its signature gone
  fs::copy_file(keep, s2, fs::copy_options::overwrite_existing);
  fs::rename(s2 + ".sig", d / "keep.sig");
  refused("verify " + s1 + " --pubkey " + pub, "✗ shard 2/2: " + s2 + ".sig is missing");
  refused("verify " + s1, "✗ shard 2/2: " + s2 + ".sig is missing");          // a set signed in part
  refused("verify " + s1, "Error: Signature: 1 signature problem(s) found");  // not a hash mismatch
  fs::rename(d / "keep.sig", s2 + ".sig");
  ran("verify " + s2 + " --pubkey " + pub);
  // shard 2 missing: the set cannot be opened, and verify says so
  fs::rename(s2, keep);
  int rc = 0;
  v = cli("verify " + s1 + " --pubkey " + pub, rc);
  EXPECT_NE(rc, 0) << v;
  EXPECT_NE(v.find("shard 2 of 2 is missing"), std::string::npos) << v;
  EXPECT_EQ(v.find("\nOK\n"), std::string::npos) << v;
  fs::rename(keep, s2);
}

// llama.cpp flags get a plain answer instead of CLI11's "-n gl" reading; -c is --ctx.
TEST_F(CliArgs, LlamaCppFlags) {
  ASSERT_TRUE(ok_);
  const std::string gpu = "GPU offload is not supported: cortiq runs on the CPU (drop -ngl)";
  int rc = 0;
  const std::string out = cli("run " + model_ + " -p hi -ngl 99", rc);
  EXPECT_EQ(WEXITSTATUS(rc), 2) << out;
  EXPECT_NE(out.find("Error: " + gpu), std::string::npos) << out;
  refused("ppl " + model_ + " -f x.txt -ngl 99", gpu);
  refused("serve " + model_ + " -ngl 99", gpu);
  refused("bench " + model_ + " -ngl 99", gpu);
  refused("run " + model_ + " --n-gpu-layers 99 -p hi",
          "GPU offload is not supported: cortiq runs on the CPU");
  refused("run " + model_ + " --gpu-layers=99 -p hi", "(drop --gpu-layers)");
  refused("run -m " + model_ + " -p hi", "the model is the first argument: cortiq run MODEL.cmf");
  refused("bench --model " + model_, "the model is the first argument: cortiq bench MODEL.cmf");
  // -c is --ctx in run (and serve), as in llama-cli
  refused("run " + model_ + " -p x -c 100000", "--ctx 100000 exceeds this model's max_position_embeddings");
  EXPECT_NE(
      ran("run " + model_ + " -p 'Once upon a time' -n -1 --greedy -c 32 --threads 1").find("[28 tokens"),
      std::string::npos);
  refused("serve " + model_ + " -c 100000 --port 0", "100000 exceeds this model's max_position_embeddings");
}

}  // namespace
