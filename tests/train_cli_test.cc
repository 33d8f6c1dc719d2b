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
        "checkpoint/trainer.json", "checkpoint/params.safetensors", "checkpoint/optimizer.safetensors"})
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

}  // namespace
