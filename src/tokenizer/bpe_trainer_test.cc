// BPE training: merges worked out by hand, determinism, specials, bad input; the trained file
// through this project's Tokenizer (round trip; HF's ids on real text: tests/bpe_trainer_e2e_test.cc).
#include "tokenizer/bpe_trainer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace cortiq {
namespace {

/// The corpus of the Hugging Face course's BPE chapter: hug×10, pug×5, pun×12, bun×4, hugs×5, one
/// word a line (a newline is its own pre-token, "Ċ", with no pairs).
std::string course_corpus() {
  std::string s;
  auto add = [&](const char* w, int n) {
    for (int i = 0; i < n; ++i) s += std::string(w) + "\n";
  };
  add("hug", 10), add("pug", 5), add("pun", 12), add("bun", 4), add("hugs", 5);
  return s;
}

std::vector<std::string> merges_of(const std::string& tokenizer_json) {
  const auto j = nlohmann::json::parse(tokenizer_json);
  return j["model"]["merges"].get<std::vector<std::string>>();
}

TEST(BpeTrainer, LearnsTheMergesWorkedOutByHand) {
  // Pair counts by hand: u g = 10+5+5 = 20, u n = 12+4 = 16 → merge; then h ug = 15, p un = 12,
  // then p ug = 5 and hug s = 5 tie (p's id is lower than hug's), then b un = 4. Nothing is left
  // above min_frequency 2 after that (g s went with hug s).
  BpeTrainerOptions opt;
  opt.vocab_size = 3 + 256 + 100;
  BpeTrainer t(opt);
  t.add_text(course_corpus(), "course");
  const std::string out = t.train();
  EXPECT_EQ(merges_of(out),
            (std::vector<std::string>{"u g", "u n", "h ug", "p un", "p ug", "hug s", "b un"}));
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["model"]["vocab"].size(), 3u + 256u + 7u);
  EXPECT_EQ(j["model"]["vocab"]["ug"], 259);  // after the 3 specials and the 256 bytes
  EXPECT_EQ(j["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(j["added_tokens"][0]["id"], 0);

  const Tokenizer tok = Tokenizer::from_json(out);
  const uint32_t hugs = j["model"]["vocab"]["hugs"], pug = j["model"]["vocab"]["pug"];
  const uint32_t space = j["model"]["vocab"]["Ġ"], bun = j["model"]["vocab"]["bun"];
  EXPECT_EQ(
      tok.encode("hugs pug<|endoftext|> bun", false),
      (std::vector<uint32_t>{hugs, space, pug, 0, space, bun}));  // Ġ never merged: no space in training
  EXPECT_EQ(tok.decode(tok.encode("hugs pug bun\n", false), false), "hugs pug bun\n");
}

TEST(BpeTrainer, StopsAtTheVocabSizeAndIsDeterministic) {
  BpeTrainerOptions opt;
  opt.vocab_size = 3 + 256 + 3;
  BpeTrainer a(opt), b(opt);
  a.add_text(course_corpus(), "a");
  b.add_text(course_corpus().substr(0, 40), "b1");  // cut on a line boundary: the same words
  b.add_text(course_corpus().substr(40), "b2");
  const std::string ja = a.train();
  EXPECT_EQ(merges_of(ja), (std::vector<std::string>{"u g", "u n", "h ug"}));
  EXPECT_EQ(ja, b.train());
}

TEST(BpeTrainer, SpecialTokensAreCutOutOfTheCorpus) {
  BpeTrainerOptions opt;
  opt.vocab_size = 1 + 256 + 50;
  opt.special_tokens = {"<|endoftext|>"};
  BpeTrainer t(opt);
  // Without the cut, "<|" and "|>" would be the most frequent pairs.
  t.add_text("ab ab ab<|endoftext|><|endoftext|><|endoftext|><|endoftext|>", "s");
  EXPECT_EQ(merges_of(t.train()), (std::vector<std::string>{"a b", "Ġ ab"}));
}

TEST(BpeTrainer, RefusesBadInput) {
  BpeTrainerOptions opt;
  opt.vocab_size = 200;
  EXPECT_THROW(BpeTrainer{opt}, Error);
  opt.vocab_size = 300;
  opt.special_tokens = {"<a>", "<a>"};
  EXPECT_THROW(BpeTrainer{opt}, Error);
  opt.special_tokens = {"<a>"};
  BpeTrainer t(opt);
  try {
    t.add_text(std::string("ok\xff"), "corpus/x.txt");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("corpus/x.txt: not UTF-8 at byte offset 2"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(t.train(), Error);  // nothing was counted
}

}  // namespace
}  // namespace cortiq
