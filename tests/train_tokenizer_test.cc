// `cortiq train-tokenizer` on the testbed corpus's four train splits (vocab 8192) reproduces the very
// tokenizer.json that Hugging Face `tokenizers` encoded for tests/golden/bpe/testbed-8192.json
// (tests/oracles/bpe_goldens.js), and this project's Tokenizer encodes the four test splits to HF's
// ids (count and FNV-1a-64 of the u32 LE ids). Skips when ../shared is absent.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "shell.h"
#include "tokenizer/tokenizer.h"
#include "util/atomic_file.h"

namespace {

std::string fnv64(const void* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(data)[i]) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

TEST(TrainTokenizer, TestbedCorpusTokenizerEncodesLikeHuggingFace) {
  const std::string corpus = std::string(CORTIQ_SOURCE_DIR) + "/../shared/data/testbed-corpus";
  if (!std::filesystem::exists(corpus + "/code/train.txt")) GTEST_SKIP() << "no " << corpus;
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("cortiq_bpe_" + std::to_string(::getpid()) + ".json");
  std::string cmd = std::string(CORTIQ_CLI_PATH) + " train-tokenizer --vocab-size 8192 -o " + out.string();
  for (const char* d : {"code", "scripture", "dictionary", "manuals"})
    cmd += " " + corpus + "/" + d + "/train.txt";
  int rc = -1;
  cortiq::test::sh(cmd + " 2>&1", &rc);
  ASSERT_EQ(rc, 0) << cmd;
  const std::string json = cortiq::read_file(out.string());
  std::filesystem::remove(out);

  std::ifstream gf(std::string(CORTIQ_SOURCE_DIR) + "/tests/golden/bpe/testbed-8192.json");
  const auto golden = nlohmann::json::parse(gf);
  EXPECT_EQ(fnv64(json.data(), json.size()), golden["tokenizer_fnv"].get<std::string>())
      << "the trainer's output changed: regenerate the golden with tests/oracles/bpe_goldens.js";
  const cortiq::Tokenizer tok = cortiq::Tokenizer::from_json(json);
  EXPECT_EQ(tok.vocab_size(), golden["vocab_size"].get<size_t>());
  for (const auto& [domain, g] : golden["splits"].items()) {
    const std::vector<uint32_t> ids =
        tok.encode(cortiq::read_file(corpus + "/" + domain + "/test.txt"), false);
    EXPECT_EQ(ids.size(), g["count"].get<size_t>()) << domain;
    EXPECT_EQ(fnv64(ids.data(), ids.size() * 4), g["ids_fnv"].get<std::string>()) << domain;
  }
}

}  // namespace
