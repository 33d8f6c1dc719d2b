#include "convert/gguf_tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "convert/gguf.h"
#include "convert/sentencepiece.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace cortiq::convert {
namespace {

using nlohmann::json;
using Ids = std::vector<uint32_t>;

std::string shared_dir() {
  return std::string(CORTIQ_SOURCE_DIR) + "/../shared";
}
std::string vocab_dir() {
  return shared_dir() + "/models/ggml-vocab";
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

json gguf_metadata(const std::string& path) {
  return GgufFile(path).metadata();
}

#define SKIP_WITHOUT_SHARED()                               \
  if (!std::filesystem::exists(shared_dir() + "/models")) { \
    GTEST_SKIP() << "no shared models at " << shared_dir(); \
  }

// llama.cpp tests/test-tokenizer-0.cpp: inputs separated by "\n__ggml_vocab_test__\n" (the file
// ends with one, which yields no extra case), one output line per input, ids space separated,
// encoded with add_special = false, parse_special = false.
struct Case {
  std::string text;
  Ids ids;
};
std::vector<Case> read_vectors(const std::string& base) {
  const std::string raw = read_text(base + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::ifstream out(base + ".out");
  std::vector<Case> cases;
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    EXPECT_LT(i, inputs.size());
    if (i >= inputs.size()) break;
    Case c{inputs[i], {}};
    std::istringstream ls(line);
    for (uint32_t id; ls >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(cases.size(), inputs.size());
  return cases;
}

/// Runs every case; returns the number that match, reporting the others.
size_t run_vectors(const Tokenizer& tok, const std::string& base) {
  auto cases = read_vectors(base);
  size_t ok = 0;
  for (const auto& c : cases) {
    Ids got = tok.encode(c.text, false);
    if (got == c.ids) {
      ++ok;
    } else {
      ADD_FAILURE() << base << ": '" << c.text << "' gives " << testing::PrintToString(got) << ", llama.cpp "
                    << testing::PrintToString(c.ids);
    }
  }
  EXPECT_GT(cases.size(), 40u);
  std::cout << base << ": " << ok << "/" << cases.size() << " cases match\n";
  return ok;
}

class GgmlVocab : public testing::TestWithParam<const char*> {};

TEST_P(GgmlVocab, MatchesLlamaCppTestVectors) {
  SKIP_WITHOUT_SHARED();
  const std::string base = vocab_dir() + "/" + GetParam();
  GgufTokenizer g = tokenizer_from_gguf(gguf_metadata(base));
  Tokenizer tok = Tokenizer::from_json(g.tokenizer_json);
  auto n = read_vectors(base).size();
  EXPECT_EQ(run_vectors(tok, base), n);
}

INSTANTIATE_TEST_SUITE_P(Gguf, GgmlVocab,
                         testing::Values("ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf",
                                         "ggml-vocab-gpt-2.gguf"));

json parse_file(const std::string& path) {
  return json::parse(read_text(path));
}

// stories260K-gguf was converted by llama.cpp from stories260K-hf, whose tokenizer.json was written
// by transformers' LlamaConverter: rebuilding it from the GGUF must give the same document.
TEST(GgufTokenizer, StoriesMatchesTransformersLlamaConverter) {
  SKIP_WITHOUT_SHARED();
  GgufTokenizer g =
      tokenizer_from_gguf(gguf_metadata(shared_dir() + "/models/stories260K-gguf/stories260K-f32.gguf"));
  EXPECT_EQ(g.bos_id, 1u);
  EXPECT_EQ(g.eos_ids, (Ids{2}));
  EXPECT_EQ(g.pad_id, std::nullopt);
  EXPECT_TRUE(g.add_bos);
  EXPECT_FALSE(g.add_eos);
  EXPECT_EQ(g.chat_template, std::nullopt);

  const std::string hf_path = shared_dir() + "/models/stories260K-hf/tokenizer.json";
  json ours = json::parse(g.tokenizer_json), hf = parse_file(hf_path);
  for (const char* key :
       {"added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder", "model"})
    EXPECT_EQ(ours[key], hf[key]) << key;

  Tokenizer a = Tokenizer::from_json(g.tokenizer_json);
  Tokenizer b = Tokenizer::from_file(hf_path);
  for (std::string s : {"Once upon a time, there was a little girl named Lily.",
                        " She loved to play outside in the park.\nOne day, she saw a big dog!",
                        "  Tom and Sue  went to the  store… and bought 3 apples, 12 pears — café ☕",
                        "<s>Hi</s> <unk>", "", " ", "\n\n"}) {
    for (bool special : {false, true}) EXPECT_EQ(a.encode(s, special), b.encode(s, special)) << s;
    if (s.find('<') != std::string::npos) continue;  // after "<s>", "Hi" is "▁Hi": decodes " Hi"
    Ids ids = a.encode(s, false);
    EXPECT_EQ(a.decode(ids, false), s) << s;
    EXPECT_EQ(b.decode(ids, false), s) << s;
  }
  EXPECT_EQ(a.encode("Hello", true).front(), 1u);
}

TEST(GgufTokenizer, Phi3SpecialTokensStripWhitespaceToTheirRightAsLlamaCpp) {
  SKIP_WITHOUT_SHARED();
  GgufTokenizer g = tokenizer_from_gguf(gguf_metadata(vocab_dir() + "/ggml-vocab-phi-3.gguf"));
  EXPECT_EQ(g.bos_id, 1u);
  EXPECT_EQ(g.pad_id, 32000u);
  EXPECT_EQ(g.eos_ids, (Ids{32000}));
  ASSERT_TRUE(g.chat_template.has_value());
  EXPECT_NE(g.chat_template->find("<|assistant|>"), std::string::npos);
  Tokenizer tok = Tokenizer::from_json(g.tokenizer_json);
  // llama.cpp (llama-vocab.cpp's Phi-3 RSTRIP rule) on a rendered chat turn, BOS added.
  EXPECT_EQ(tok.encode("<|user|>\nSYS\nHI<|end|>\n<|assistant|>\n", true),
            (Ids{1, 32010, 317, 21554, 13, 17628, 32007, 32001}));
  EXPECT_TRUE(tok.is_special(32007));
  EXPECT_FALSE(tok.is_special(2));  // "</s>" is user-defined (type 4) in this vocabulary
  EXPECT_TRUE(tok.is_added(2));
}

TEST(GgufTokenizer, Gpt2Facts) {
  SKIP_WITHOUT_SHARED();
  GgufTokenizer g = tokenizer_from_gguf(gguf_metadata(vocab_dir() + "/ggml-vocab-gpt-2.gguf"));
  EXPECT_EQ(g.bos_id, 50256u);
  EXPECT_EQ(g.eos_ids, (Ids{50256}));
  EXPECT_FALSE(g.add_bos);
  Tokenizer tok = Tokenizer::from_json(g.tokenizer_json);
  EXPECT_TRUE(tok.prefix_special_ids().empty());
  EXPECT_TRUE(tok.is_special(50256));
  const std::string s = "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～\n\t x";
  EXPECT_EQ(tok.decode(tok.encode(s, false), false), s);
}

// GGUF-style metadata of a byte-level HF tokenizer.json, as convert_hf_to_gguf writes it: every
// id's token string, added special tokens as CONTROL, merges as "left right".
json metadata_from_hf(const json& hf, const std::string& pre, uint32_t bos, uint32_t eos) {
  size_t n = 0;
  for (auto& [tok, id] : hf["model"]["vocab"].items()) n = std::max<size_t>(n, id.get<size_t>() + 1);
  for (auto& a : hf["added_tokens"]) n = std::max<size_t>(n, a["id"].get<size_t>() + 1);
  std::vector<std::string> tokens(n);
  std::vector<int32_t> types(n, 1);
  for (auto& [tok, id] : hf["model"]["vocab"].items()) tokens[id.get<size_t>()] = tok;
  for (auto& a : hf["added_tokens"]) {
    tokens[a["id"].get<size_t>()] = a["content"].get<std::string>();
    types[a["id"].get<size_t>()] = a["special"].get<bool>() ? 3 : 4;
  }
  json merges = json::array();
  for (auto& m : hf["model"]["merges"])
    merges.push_back(m.is_string() ? m.get<std::string>()
                                   : m[0].get<std::string>() + " " + m[1].get<std::string>());
  return json{{"tokenizer.ggml.model", "gpt2"},    {"tokenizer.ggml.pre", pre},
              {"tokenizer.ggml.tokens", tokens},   {"tokenizer.ggml.token_type", types},
              {"tokenizer.ggml.merges", merges},   {"tokenizer.ggml.bos_token_id", bos},
              {"tokenizer.ggml.eos_token_id", eos}};
}

// No llama-bpe / qwen2 GGUF is at hand, but their test vectors are: the metadata is rebuilt from
// the HF tokenizer.json of the same vocabulary.
TEST(GgufTokenizer, Llama3PreTokenizerMatchesHfAndLlamaCppVectors) {
  SKIP_WITHOUT_SHARED();
  json hf = parse_file(shared_dir() + "/models/tokenizer-llama3.2/tokenizer.json");
  GgufTokenizer g = tokenizer_from_gguf(metadata_from_hf(hf, "llama-bpe", 128000, 128009));
  json ours = json::parse(g.tokenizer_json);
  EXPECT_EQ(ours["pre_tokenizer"], hf["pre_tokenizer"]);
  EXPECT_TRUE(ours["model"]["ignore_merges"].get<bool>());
  EXPECT_TRUE(g.add_bos);  // llama.cpp's default for the Llama-3 pre-tokenizer
  Tokenizer tok = Tokenizer::from_json(g.tokenizer_json);
  EXPECT_EQ(tok.prefix_special_ids(), (Ids{128000}));
  const std::string base = vocab_dir() + "/ggml-vocab-llama-bpe.gguf";
  EXPECT_EQ(run_vectors(tok, base), read_vectors(base).size());
}

TEST(GgufTokenizer, Qwen2PreTokenizerMatchesHfAndLlamaCppVectors) {
  SKIP_WITHOUT_SHARED();
  json hf = parse_file(shared_dir() + "/models/tokenizer-qwen2.5/tokenizer.json");
  GgufTokenizer g = tokenizer_from_gguf(metadata_from_hf(hf, "qwen2", 151643, 151645));
  json ours = json::parse(g.tokenizer_json);
  EXPECT_EQ(ours["pre_tokenizer"], hf["pre_tokenizer"]);
  EXPECT_FALSE(g.add_bos);
  Tokenizer tok = Tokenizer::from_json(g.tokenizer_json);
  EXPECT_TRUE(tok.prefix_special_ids().empty());
  const std::string base = vocab_dir() + "/ggml-vocab-qwen2.gguf";
  EXPECT_EQ(run_vectors(tok, base), read_vectors(base).size());
}

json tiny_spm() {
  return json{{"tokenizer.ggml.model", "llama"},
              {"tokenizer.ggml.tokens",
               {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b", "ab",
                "\xe2\x96\x81"
                "ab"}},
              {"tokenizer.ggml.scores", {0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0}},
              {"tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1, 1}}};
}

ErrorKind error_kind(const json& md, std::string* msg = nullptr) {
  try {
    tokenizer_from_gguf(md);
  } catch (const Error& e) {
    if (msg) *msg = e.message();
    return e.kind();
  }
  return ErrorKind::Signature;  // "no error"
}

TEST(GgufTokenizer, TinySpmMergesFollowScores) {
  GgufTokenizer g = tokenizer_from_gguf(tiny_spm());
  json j = json::parse(g.tokenizer_json);
  // "ab" (score -4) before "▁ab" (score -5); "▁ab" splits as ("▁","ab") only ("▁a" is no token).
  EXPECT_EQ(j["model"]["merges"], json::parse(R"([["a","b"],["\u2581","ab"]])"));
  Tokenizer tok = Tokenizer::from_json(g.tokenizer_json);
  EXPECT_EQ(tok.encode("ab", true), (Ids{1, 7}));
  EXPECT_EQ(tok.encode("ab ab", false), (Ids{7, 7}));
  EXPECT_EQ(tok.decode(Ids{7, 7}, false), "ab ab");

  json md = tiny_spm();
  md["tokenizer.ggml.add_space_prefix"] = false;
  md["tokenizer.ggml.add_bos_token"] = false;
  md["tokenizer.ggml.add_eos_token"] = true;
  g = tokenizer_from_gguf(md);
  EXPECT_FALSE(g.add_bos);
  EXPECT_TRUE(g.add_eos);
  Tokenizer raw = Tokenizer::from_json(g.tokenizer_json);
  EXPECT_EQ(raw.encode("ab ab", true), (Ids{6, 7, 2}));
  EXPECT_EQ(raw.decode(Ids{6, 7}, false), "ab ab");
}

TEST(GgufTokenizer, Errors) {
  std::string msg;
  json md = tiny_spm();
  md["tokenizer.ggml.model"] = "bert";
  EXPECT_EQ(error_kind(md, &msg), ErrorKind::Unsupported);
  EXPECT_NE(msg.find("tokenizer.ggml.model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bert"), std::string::npos) << msg;

  md = tiny_spm();
  md["tokenizer.ggml.scores"].erase(md["tokenizer.ggml.scores"].size() - 1);
  EXPECT_EQ(error_kind(md, &msg), ErrorKind::Parse);
  EXPECT_NE(msg.find("tokenizer.ggml.scores"), std::string::npos) << msg;

  md = tiny_spm();
  md["tokenizer.ggml.token_type"].push_back(1);
  EXPECT_EQ(error_kind(md, &msg), ErrorKind::Parse);
  EXPECT_NE(msg.find("tokenizer.ggml.token_type"), std::string::npos) << msg;

  md = tiny_spm();
  md.erase("tokenizer.ggml.scores");
  EXPECT_EQ(error_kind(md, &msg), ErrorKind::Parse);
  EXPECT_NE(msg.find("tokenizer.ggml.scores"), std::string::npos) << msg;

  md = tiny_spm();
  md["tokenizer.ggml.tokens"][4] = 5;
  EXPECT_EQ(error_kind(md, &msg), ErrorKind::Parse);
  EXPECT_NE(msg.find("tokenizer.ggml.tokens"), std::string::npos) << msg;

  md = tiny_spm();
  md["tokenizer.ggml.tokens"][5] = "a";
  EXPECT_EQ(error_kind(md, &msg), ErrorKind::Parse);  // duplicate token

  md = tiny_spm();
  md.erase("tokenizer.ggml.model");
  EXPECT_EQ(error_kind(md, &msg), ErrorKind::Parse);
  EXPECT_NE(msg.find("tokenizer.ggml.model"), std::string::npos) << msg;

  json bpe{{"tokenizer.ggml.model", "gpt2"},
           {"tokenizer.ggml.pre", "deepseek-coder"},
           {"tokenizer.ggml.tokens", {"a", "b", "ab"}},
           {"tokenizer.ggml.merges", {"a b"}}};
  EXPECT_EQ(error_kind(bpe, &msg), ErrorKind::Unsupported);
  EXPECT_NE(msg.find("tokenizer.ggml.pre"), std::string::npos) << msg;
  EXPECT_NE(msg.find("deepseek-coder"), std::string::npos) << msg;

  bpe["tokenizer.ggml.pre"] = "gpt-2";
  EXPECT_NO_THROW(tokenizer_from_gguf(bpe));
  bpe["tokenizer.ggml.merges"] = {"a c"};
  EXPECT_EQ(error_kind(bpe, &msg), ErrorKind::Parse);
  EXPECT_NE(msg.find("tokenizer.ggml.merges"), std::string::npos) << msg;
  bpe.erase("tokenizer.ggml.merges");
  EXPECT_EQ(error_kind(bpe, &msg), ErrorKind::Parse);
  EXPECT_NE(msg.find("tokenizer.ggml.merges"), std::string::npos) << msg;
}

}  // namespace
}  // namespace cortiq::convert

namespace cortiq::convert {
namespace {

/// GGUF metadata (as GgufFile::metadata() gives it) of the keys tokenizer_to_gguf writes.
json metadata_of(const std::vector<GgufKv>& kvs) {
  json md = json::object();
  for (const auto& kv : kvs) md[kv.key] = kv.value;
  return md;
}

// Export oracle: tokenizer.json → tokenizer.ggml.* (tokenizer_to_gguf) → tokenizer.json
// (tokenizer_from_gguf, itself checked against llama.cpp's ids above) gives the same ids as the
// original on text with spaces, newlines, digits, accents, CJK, emoji and special tokens, for the
// SentencePiece (stories260K, Mistral-7B) and byte-level (Qwen2.5, Llama 3.2) tokenizers.
TEST(TokenizerToGguf, RoundTripsThroughTheImporterToTheSameIds) {
  SKIP_WITHOUT_SHARED();
  const std::vector<std::string> texts = {
      "Once upon a time, there was a little girl named Lily.",
      "  two  spaces\nand a newline\n\n123456 + 7.89 = ?",
      "Ünïcödé café naïve — 東京 タワー 🙂👍",
      "<s>inline special</s> <|im_start|>user\nhi<|im_end|> <|begin_of_text|>",
      "a",
      ""};
  struct Case {
    std::string dir, model, pre;
  };
  for (const Case& c :
       {Case{"stories260K-hf", "llama", "default"}, Case{"tokenizer-mistral-7b-v0.1", "llama", "default"},
        Case{"tokenizer-qwen2.5", "gpt2", "qwen2"}, Case{"tokenizer-llama3.2", "gpt2", "llama-bpe"}}) {
    SCOPED_TRACE(c.dir);
    const std::string tj = read_text(shared_dir() + "/models/" + c.dir + "/tokenizer.json");
    ASSERT_FALSE(tj.empty());
    const json md = metadata_of(tokenizer_to_gguf(tj, nullptr, 0));
    EXPECT_EQ(md["tokenizer.ggml.model"], c.model);
    EXPECT_EQ(md["tokenizer.ggml.pre"], c.pre);
    const GgufTokenizer back = tokenizer_from_gguf(md);
    const Tokenizer a = Tokenizer::from_json(tj), b = Tokenizer::from_json(back.tokenizer_json);
    EXPECT_EQ(a.vocab_size(), b.vocab_size());
    for (const auto& t : texts)
      for (bool special : {false, true})
        EXPECT_EQ(a.encode(t, special), b.encode(t, special)) << t << " " << special;
  }
}

TEST(TokenizerToGguf, RefusesWhatLlamaCppCannotName) {
  json wp = {{"model", {{"type", "WordPiece"}, {"vocab", {{"a", 0}}}}}};
  EXPECT_THROW(
      {
        try {
          tokenizer_to_gguf(wp.dump(), nullptr, 0);
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
          EXPECT_NE(std::string(e.what()).find("WordPiece"), std::string::npos);
          throw;
        }
      },
      Error);
  json odd = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}}},
              {"pre_tokenizer",
               {{"type", "Sequence"},
                {"pretokenizers",
                 {{{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}}, {{"type", "ByteLevel"}}}}}}};
  EXPECT_THROW(tokenizer_to_gguf(odd.dump(), nullptr, 0), Error);
}

}  // namespace
}  // namespace cortiq::convert

namespace cortiq::convert {
namespace {

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Item 6 oracle: llama2.c's tok512.model (a SentencePiece BPE ModelProto) gives the tokenizer.json
// transformers' LlamaConverter made of it (shared/models/stories260K-hf/tokenizer.json): the same
// vocabulary, the same merges in the same order, the same ids on text.
TEST(SentencePieceModel, Tok512GivesLlamaConvertersTokenizerJson) {
  SKIP_WITHOUT_SHARED();
  const std::string proto = read_text(shared_dir() + "/models/stories260K-llama2c/tok512.model");
  const std::string hf = read_text(shared_dir() + "/models/stories260K-hf/tokenizer.json");
  ASSERT_FALSE(proto.empty());
  const json md = sentencepiece_metadata(as_bytes(proto), "tok512.model");
  EXPECT_EQ(md["tokenizer.ggml.tokens"].size(), 512u);
  EXPECT_EQ(md["tokenizer.ggml.tokens"][0], "<unk>");
  EXPECT_EQ(md["tokenizer.ggml.token_type"][3], 6);  // <0x00>: byte
  const json mine = json::parse(tokenizer_json_from_sentencepiece(as_bytes(proto), "tok512.model"));
  const json want = json::parse(hf);
  EXPECT_EQ(mine["model"]["vocab"], want["model"]["vocab"]);
  ASSERT_EQ(mine["model"]["merges"].size(), want["model"]["merges"].size());
  for (size_t i = 0; i < want["model"]["merges"].size(); ++i) {
    const json& w = want["model"]["merges"][i];
    const json m = mine["model"]["merges"][i];
    const std::string ws =
        w.is_string() ? w.get<std::string>() : w[0].get<std::string>() + " " + w[1].get<std::string>();
    ASSERT_EQ(m[0].get<std::string>() + " " + m[1].get<std::string>(), ws) << i;
  }
  const Tokenizer a = Tokenizer::from_json(hf), b = Tokenizer::from_json(mine.dump());
  for (const std::string t : {"Once upon a time, Lily saw a big red ball.", "  x\n\ny 42 é 🙂", ""})
    for (bool special : {false, true}) EXPECT_EQ(a.encode(t, special), b.encode(t, special)) << t;
}

TEST(SentencePieceModel, MalformedOrUnigramIsRefused) {
  // one piece "a" (field 1: {1: "a", 2: 0.0f}) and trainer_spec.model_type = 1 (unigram)
  const std::string unigram = std::string(
                                  "\x0a\x08\x0a\x01"
                                  "a"
                                  "\x15\x00\x00\x00\x00",
                                  10) +
                              std::string("\x12\x02\x18\x01", 4);
  try {
    sentencepiece_metadata(as_bytes(unigram), "u.model");
    ADD_FAILURE() << "unigram accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("unigram"), std::string::npos) << e.what();
  }
  const std::string truncated = unigram.substr(0, 6);
  try {
    sentencepiece_metadata(as_bytes(truncated), "t.model");
    ADD_FAILURE() << "truncated proto accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Parse);
    EXPECT_NE(std::string(e.what()).find("t.model"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cortiq::convert
