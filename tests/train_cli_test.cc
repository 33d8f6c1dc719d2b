// `cortiq train` end to end on the embedded model's tokenizer: a tiny llama trained for 30 steps on
// a short repeated text lowers its loss, writes an HF folder that `convert` → `verify` → `run`
// take (and `train --init` fine-tunes from), and bad input (text that is not UTF-8, heads that do not divide
// hidden_size) is refused by name with nothing written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "convert/safetensors.h"
#include "shell.h"

namespace {

namespace fs = std::filesystem;

std::string cli(const std::string& args, int* rc) {
  return cortiq::test::sh(std::string(CORTIQ_CLI_PATH) + " " + args + " 2>&1", rc);
}

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cortiq_train_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream f(dir_ / "text.txt");
    for (int i = 0; i < 60; ++i)
      f << "Once upon a time there was a little cat. The cat liked to play in the sun.\n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string tok() const { return std::string(CORTIQ_SOURCE_DIR) + "/models/stories260K/tokenizer.json"; }
  std::string tiny() const {
    return " --hidden-size 32 --layers 2 --heads 4 --kv-heads 2 --intermediate-size 64 --context 32 --batch "
           "2 "
           "--seq-len 16 --lr 1e-2 --min-lr 1e-3 --warmup 3 ";
  }
  fs::path dir_;
};

TEST_F(TrainCli, TrainsConvertsAndRuns) {
  const fs::path out = dir_ / "model", log = dir_ / "log.jsonl", text = dir_ / "text.txt";
  int rc = -1;
  std::string o =
      cli("train -o " + out.string() + " --tokenizer " + tok() + " --data " + text.string() + " --val " +
              text.string() + tiny() + "--steps 30 --eval-every 10 --log " + log.string(),
          &rc);
  ASSERT_EQ(rc, 0) << o;
  EXPECT_NE(o.find("validation loss"), std::string::npos) << o;
  std::ifstream lf(log);
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(lf, line);) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 30u);
  EXPECT_LT(rows.back()["loss"].get<double>(), 0.6 * rows.front()["loss"].get<double>());
  EXPECT_TRUE(rows[9].contains("val_loss"));
  EXPECT_FALSE(rows[8].contains("val_loss"));
  for (const char* f :
       {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
        "checkpoint/trainer.json", "checkpoint/params-30.safetensors", "checkpoint/optimizer-30.safetensors"})
    EXPECT_TRUE(fs::exists(out / f)) << f;
  const fs::path cmf = dir_ / "model.cmf";
  o = cli("convert " + out.string() + " --quant f32 -o " + cmf.string(), &rc);
  ASSERT_EQ(rc, 0) << o;
  o = cli("verify " + cmf.string(), &rc);
  EXPECT_EQ(rc, 0) << o;
  o = cli("run " + cmf.string() + " -p 'Once upon a' -n 6 --greedy", &rc);
  EXPECT_EQ(rc, 0) << o;

  // Fine-tuning from the converted file starts where the first run ended, not from scratch.
  const fs::path out2 = dir_ / "tuned", log2 = dir_ / "log2.jsonl";
  o = cli("train -o " + out2.string() + " --init " + cmf.string() + " --tokenizer " + tok() + " --data " +
              text.string() + " --batch 2 --seq-len 16 --steps 3 --lr 1e-3 --warmup 1 --log " + log2.string(),
          &rc);
  ASSERT_EQ(rc, 0) << o;
  std::ifstream lf2(log2);
  std::string first;
  std::getline(lf2, first);
  EXPECT_LT(nlohmann::json::parse(first)["loss"].get<double>(), 0.6 * rows.front()["loss"].get<double>());
}

// --init from an HF folder with --trainable: the frozen tensors of the output folder are byte for
// byte the init's, the trainable ones changed, and every tensor is still written.
TEST_F(TrainCli, TrainableSubsetOfAnHfFolder) {
  const fs::path base = dir_ / "base", tuned = dir_ / "tuned", text = dir_ / "text.txt";
  int rc = -1;
  std::string o = cli("train -o " + base.string() + " --tokenizer " + tok() + " --data " + text.string() +
                          tiny() + "--steps 2",
                      &rc);
  ASSERT_EQ(rc, 0) << o;
  o = cli("train -o " + tuned.string() + " --init " + base.string() + " --tokenizer " + tok() + " --data " +
              text.string() +
              " --batch 2 --seq-len 16 --steps 3 --lr 1e-2 --warmup 1 "
              "--trainable 'model.layers.1.mlp.*,model.layers.1.post_attention_layernorm.weight'",
          &rc);
  ASSERT_EQ(rc, 0) << o;
  EXPECT_NE(o.find("backward from layer 1"), std::string::npos) << o;
  const cortiq::convert::SafetensorsFile a((base / "model.safetensors").string()),
      b((tuned / "model.safetensors").string());
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  size_t changed = 0;
  for (const auto& ta : a.tensors()) {
    const auto it = std::find_if(b.tensors().begin(), b.tensors().end(),
                                 [&](const auto& tb) { return tb.name == ta.name; });
    ASSERT_NE(it, b.tensors().end()) << ta.name;
    const bool same = std::equal(ta.data.begin(), ta.data.end(), it->data.begin(), it->data.end());
    const bool trainable = ta.name.rfind("model.layers.1.mlp.", 0) == 0 ||
                           ta.name == "model.layers.1.post_attention_layernorm.weight";
    EXPECT_EQ(same, !trainable) << ta.name;
    changed += !same;
  }
  EXPECT_EQ(changed, 4u);
  o = cli("train -o " + (dir_ / "x").string() + " --init " + base.string() + " --tokenizer " + tok() +
              " --data " + text.string() + " --batch 2 --seq-len 16 --steps 1 --trainable 'model.layer.1.*'",
          &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("'model.layer.1.*' matches no parameter"), std::string::npos) << o;
}

std::vector<double> losses(const fs::path& log, const char* key) {
  std::vector<double> v;
  std::ifstream f(log);
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains(key)) v.push_back(j[key].get<double>());
  }
  return v;
}

// `tokenize --bin` then `train --data x.bin --val y.bin` draws the same windows and gets the same
// losses, bit for bit, as training from the text files.
TEST_F(TrainCli, TokenFileTrainsLikeText) {
  const fs::path text = dir_ / "text.txt", other = dir_ / "other.txt", bin = dir_ / "train.bin",
                 vbin = dir_ / "val.bin";
  {
    std::ofstream f(other);
    for (int i = 0; i < 20; ++i) f << "The sun was warm and the little dog ran to the park.\n";
  }
  int rc = -1;
  std::string o = cli(
      "tokenize " + tok() + " -f " + text.string() + " " + other.string() + " --bin " + bin.string(), &rc);
  ASSERT_EQ(rc, 0) << o;
  EXPECT_NE(o.find("from 2 files"), std::string::npos) << o;
  o = cli("tokenize " + tok() + " -f " + other.string() + " --bin " + vbin.string(), &rc);
  ASSERT_EQ(rc, 0) << o;
  const std::string common = " --tokenizer " + tok() + tiny() + "--steps 4 --eval-every 2 ";
  o = cli("train -o " + (dir_ / "a").string() + " --data " + text.string() + " --data " + other.string() +
              " --val " + other.string() + common + "--log " + (dir_ / "a.jsonl").string(),
          &rc);
  ASSERT_EQ(rc, 0) << o;
  o = cli("train -o " + (dir_ / "b").string() + " --data " + bin.string() + " --val " + vbin.string() +
              common + "--log " + (dir_ / "b.jsonl").string(),
          &rc);
  ASSERT_EQ(rc, 0) << o;
  const auto la = losses(dir_ / "a.jsonl", "loss"), lb = losses(dir_ / "b.jsonl", "loss");
  ASSERT_EQ(la.size(), 4u);
  EXPECT_EQ(la, lb);
  const auto va = losses(dir_ / "a.jsonl", "val_loss"), vb = losses(dir_ / "b.jsonl", "val_loss");
  ASSERT_EQ(va.size(), 2u);
  EXPECT_EQ(va, vb);
  // a token file given with other files is refused
  o = cli(
      "train -o " + (dir_ / "c").string() + " --data " + bin.string() + " --data " + text.string() + common,
      &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("mixes the token file"), std::string::npos) << o;
}

TEST_F(TrainCli, BadInputIsNamed) {
  const fs::path bad = dir_ / "bad.txt", out = dir_ / "m";
  {
    std::ofstream f(bad, std::ios::binary);
    f << "fine text, then \xff\xfe bytes";
  }
  int rc = -1;
  std::string o = cli(
      "train -o " + out.string() + " --tokenizer " + tok() + " --data " + bad.string() + tiny() + "--steps 2",
      &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("bad.txt"), std::string::npos) << o;
  EXPECT_NE(o.find("offset 16"), std::string::npos) << o;
  o = cli("train -o " + out.string() + " --tokenizer " + tok() + " --data " + (dir_ / "text.txt").string() +
              tiny() + "--steps 2 --heads 5",
          &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("does not divide hidden_size"), std::string::npos) << o;
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));
}

// An empty or whitespace-only split, a context longer than the data, and a full disk while saving a
// checkpoint: each a named error, and nothing half-written left behind.
TEST_F(TrainCli, BadSplitsAndAFullDiskAreNamed) {
  const fs::path out = dir_ / "m", empty = dir_ / "empty.txt", blank = dir_ / "blank.txt",
                 shortf = dir_ / "short.txt", text = dir_ / "text.txt";
  std::ofstream(empty).flush();
  std::ofstream(blank) << "  \n\t\n   ";
  std::ofstream(shortf) << "Once upon a time.";
  const std::string base = "train -o " + out.string() + " --tokenizer " + tok() + tiny() + "--steps 2 ";
  int rc = -1;
  std::string o = cli(base + "--data " + text.string() + " --val " + empty.string(), &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("validation file '" + empty.string() + "' is empty"), std::string::npos) << o;
  o = cli(base + "--data " + blank.string(), &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("train file '" + blank.string() + "' is only whitespace"), std::string::npos) << o;
  o = cli(base + "--data " + shortf.string(), &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("shorter than a window of 17"), std::string::npos) << o;
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));

  // Full disk: RLIMIT_FSIZE (ulimit -f, 1 KiB blocks) with SIGXFSZ ignored makes write() fail with
  // EFBIG past 8 KiB — the tiny model's checkpoint is ~90 KiB. (train.Trainer.FullDiskKeepsThe
  // PreviousCheckpoint shows that an earlier checkpoint survives and resumes bit-identically.)
  o = cortiq::test::sh("trap '' XFSZ; ulimit -f 8; exec " + std::string(CORTIQ_CLI_PATH) + " " + base +
                           "--data " + text.string() + " --save-every 1 2>&1",
                       &rc);
  EXPECT_NE(rc, 0) << o;
  EXPECT_NE(o.find("checkpoint of step 1 not saved"), std::string::npos) << o;
  EXPECT_NE(o.find("params-1.safetensors"), std::string::npos) << o;
  EXPECT_NE(o.find("File too large"), std::string::npos) << o;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(out / "checkpoint"))
    left.push_back(e.path().filename().string());
  EXPECT_TRUE(left.empty()) << left.front();
}

}  // namespace
