#include "convert/gguf_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "util/error.h"

namespace cortiq::convert {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// Pre-tokenizer regexes, verbatim from the Hugging Face tokenizer.json of Llama 3.x
// (meta-llama/Llama-3.2-1B) and Qwen2.5 (Qwen/Qwen2.5-*): pre_tokenizer.pretokenizers[0].pattern.
constexpr std::string_view kLlama3Regex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kQwen2Regex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

const std::string kSpmSpace = "\xe2\x96\x81";  // U+2581 "▁"

// llama.cpp's llama_token_type (gguf-py TokenType).
enum TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

const json* find(const json& md, const char* key) {
  auto it = md.find(key);
  return it == md.end() ? nullptr : &*it;
}

const json& require(const json& md, const char* key) {
  const json* v = find(md, key);
  if (!v) fail(ErrorKind::Parse, "GGUF tokenizer: missing key {}", key);
  return *v;
}

std::string get_string(const json& v, const char* key) {
  if (!v.is_string()) fail(ErrorKind::Parse, "GGUF tokenizer: {} is not a string", key);
  return v.get<std::string>();
}

std::optional<bool> opt_bool(const json& md, const char* key) {
  const json* v = find(md, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) fail(ErrorKind::Parse, "GGUF tokenizer: {} is not a bool", key);
  return v->get<bool>();
}

/// An id key; absent, or outside [0, n_tokens) (llama.cpp: "bad special token", ignored) → nullopt.
std::optional<uint32_t> opt_id(const json& md, const char* key, size_t n_tokens) {
  const json* v = find(md, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) fail(ErrorKind::Parse, "GGUF tokenizer: {} is not an integer", key);
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u >= n_tokens) return std::nullopt;
    return static_cast<uint32_t>(u);
  }
  int64_t i = v->get<int64_t>();
  if (i < 0 || static_cast<uint64_t>(i) >= n_tokens) return std::nullopt;
  return static_cast<uint32_t>(i);
}

const json& require_array(const json& md, const char* key, std::optional<size_t> size) {
  const json& v = require(md, key);
  if (!v.is_array()) fail(ErrorKind::Parse, "GGUF tokenizer: {} is not an array", key);
  if (size && v.size() != *size)
    fail(ErrorKind::Parse, "GGUF tokenizer: {} has {} elements, tokenizer.ggml.tokens has {}", key, v.size(),
         *size);
  return v;
}

std::vector<std::string> read_tokens(const json& md) {
  const json& arr = require_array(md, "tokenizer.ggml.tokens", std::nullopt);
  if (arr.empty()) fail(ErrorKind::Parse, "GGUF tokenizer: tokenizer.ggml.tokens is empty");
  std::vector<std::string> tokens;
  tokens.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    if (!arr[i].is_string())
      fail(ErrorKind::Parse, "GGUF tokenizer: tokenizer.ggml.tokens[{}] is not a string", i);
    std::string t = arr[i].get<std::string>();
    // llama-vocab.cpp: an empty token is renamed so that it stays addressable.
    if (t.empty()) t = "[EMPTY_" + std::to_string(i) + "]";
    tokens.push_back(std::move(t));
  }
  return tokens;
}

std::vector<double> read_scores(const json& md, size_t n) {
  const json& arr = require_array(md, "tokenizer.ggml.scores", n);
  std::vector<double> scores(n);
  for (size_t i = 0; i < n; ++i) {
    if (!arr[i].is_number())
      fail(ErrorKind::Parse, "GGUF tokenizer: tokenizer.ggml.scores[{}] is not a number", i);
    scores[i] = arr[i].get<double>();
  }
  return scores;
}

/// token_type, all kNormal when the key is absent.
std::vector<int32_t> read_types(const json& md, size_t n) {
  std::vector<int32_t> types(n, kNormal);
  if (!find(md, "tokenizer.ggml.token_type")) return types;
  const json& arr = require_array(md, "tokenizer.ggml.token_type", n);
  for (size_t i = 0; i < n; ++i) {
    if (!arr[i].is_number_integer())
      fail(ErrorKind::Parse, "GGUF tokenizer: tokenizer.ggml.token_type[{}] is not an integer", i);
    types[i] = arr[i].get<int32_t>();
  }
  return types;
}

std::unordered_map<std::string_view, uint32_t> index_tokens(const std::vector<std::string>& tokens) {
  std::unordered_map<std::string_view, uint32_t> ids;
  ids.reserve(tokens.size() * 2);
  for (uint32_t i = 0; i < tokens.size(); ++i) {
    auto [it, fresh] = ids.emplace(tokens[i], i);
    if (!fresh)
      fail(ErrorKind::Parse, "GGUF tokenizer: tokenizer.ggml.tokens has '{}' at ids {} and {}", tokens[i],
           it->second, i);
  }
  return ids;
}

size_t count_code_points(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

/// transformers' generate_merges(vocab, vocab_scores) (tokenization_utils_base /
/// convert_slow_tokenizer.py), as LlamaConverter uses it: for each piece in id order, its splits
/// into two vocabulary pieces sorted by (id(left), id(right)); then the whole list stably sorted by
/// (score of the piece, code points of left, code points of right), descending.
std::vector<std::pair<uint32_t, uint32_t>> spm_merges(
    const std::vector<std::string>& tokens, const std::vector<double>& scores,
    const std::unordered_map<std::string_view, uint32_t>& ids) {
  struct Merge {
    uint32_t left, right, piece;
    uint32_t left_cps, right_cps;
  };
  std::vector<Merge> merges;
  std::vector<Merge> local;
  for (uint32_t p = 0; p < tokens.size(); ++p) {
    std::string_view piece = tokens[p];
    local.clear();
    for (size_t cut = 1; cut < piece.size(); ++cut) {
      if ((static_cast<unsigned char>(piece[cut]) & 0xC0) == 0x80) continue;  // inside a char
      auto l = ids.find(piece.substr(0, cut));
      if (l == ids.end()) continue;
      auto r = ids.find(piece.substr(cut));
      if (r == ids.end()) continue;
      local.push_back({l->second, r->second, p, 0, 0});
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return std::pair(a.left, a.right) < std::pair(b.left, b.right);
    });
    for (Merge& m : local) {
      m.left_cps = static_cast<uint32_t>(count_code_points(tokens[m.left]));
      m.right_cps = static_cast<uint32_t>(count_code_points(tokens[m.right]));
      merges.push_back(m);
    }
  }
  // Python's sorted(..., reverse=True) keeps equal elements in their original order.
  std::stable_sort(merges.begin(), merges.end(), [&](const Merge& a, const Merge& b) {
    double sa = scores[a.piece], sb = scores[b.piece];
    if (sa != sb) return sa > sb;
    if (a.left_cps != b.left_cps) return a.left_cps > b.left_cps;
    return a.right_cps > b.right_cps;
  });
  std::vector<std::pair<uint32_t, uint32_t>> out;
  out.reserve(merges.size());
  for (const Merge& m : merges) out.emplace_back(m.left, m.right);
  return out;
}

/// tokenizer.ggml.merges ("left right" strings, split at the first space after the first byte
/// as llama-vocab.cpp does) → pairs of token strings, checked against the vocabulary.
ordered_json bpe_merges(const json& md, const std::unordered_map<std::string_view, uint32_t>& ids) {
  const json& arr = require_array(md, "tokenizer.ggml.merges", std::nullopt);
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < arr.size(); ++i) {
    if (!arr[i].is_string())
      fail(ErrorKind::Parse, "GGUF tokenizer: tokenizer.ggml.merges[{}] is not a string", i);
    const std::string& m = arr[i].get_ref<const std::string&>();
    size_t sp = m.find(' ', 1);
    if (sp == std::string::npos)
      fail(ErrorKind::Parse, "GGUF tokenizer: tokenizer.ggml.merges[{}] '{}' is not 'left right'", i, m);
    std::string left = m.substr(0, sp), right = m.substr(sp + 1);
    if (!ids.count(left) || !ids.count(right))
      fail(ErrorKind::Parse,
           "GGUF tokenizer: tokenizer.ggml.merges[{}] '{}' names a token not in "
           "tokenizer.ggml.tokens",
           i, m);
    out.push_back(ordered_json::array({std::move(left), std::move(right)}));
  }
  return out;
}

ordered_json added_token(uint32_t id, const std::string& content, bool special, bool rstrip) {
  ordered_json t;
  t["id"] = id;
  t["content"] = content;
  t["single_word"] = false;
  t["lstrip"] = false;
  t["rstrip"] = rstrip;
  t["normalized"] = false;
  t["special"] = special;
  return t;
}

/// Control, unknown and user-defined tokens, matched on the raw text before the normalizer, as
/// llama.cpp's tokenizer_st_partition matches them; control and unknown ones are special.
ordered_json added_tokens(const std::vector<std::string>& tokens, const std::vector<int32_t>& types,
                          bool phi3) {
  ordered_json out = ordered_json::array();
  for (uint32_t i = 0; i < tokens.size(); ++i) {
    int32_t t = types[i];
    if (t != kControl && t != kUnknown && t != kUserDefined) continue;
    // llama-vocab.cpp, model name "phi-3"/"phi3": RSTRIP on every special token but these three.
    bool rstrip = phi3 && tokens[i] != "<unk>" && tokens[i] != "<s>" && tokens[i] != "<|endoftext|>";
    out.push_back(added_token(i, tokens[i], t != kUserDefined, rstrip));
  }
  return out;
}

/// LlamaTokenizerFast.update_post_processor's template: "[bos:0] $A:0 [eos:0]" and
/// "[bos:0] $A:0 [eos:0] [bos:1] $B:1 [eos:1]".
ordered_json template_processing(const std::vector<std::string>& tokens, std::optional<uint32_t> bos,
                                 std::optional<uint32_t> eos) {
  auto special = [&](uint32_t id, int type_id) {
    return ordered_json{{"SpecialToken", {{"id", tokens[id]}, {"type_id", type_id}}}};
  };
  auto sequence = [](const char* name, int type_id) {
    return ordered_json{{"Sequence", {{"id", name}, {"type_id", type_id}}}};
  };
  ordered_json single = ordered_json::array(), pair = ordered_json::array();
  ordered_json specials = ordered_json::object();
  if (bos) {
    single.push_back(special(*bos, 0));
    specials[tokens[*bos]] = {{"id", tokens[*bos]},
                              {"ids", ordered_json::array({*bos})},
                              {"tokens", ordered_json::array({tokens[*bos]})}};
  }
  single.push_back(sequence("A", 0));
  if (eos) {
    single.push_back(special(*eos, 0));
    specials[tokens[*eos]] = {{"id", tokens[*eos]},
                              {"ids", ordered_json::array({*eos})},
                              {"tokens", ordered_json::array({tokens[*eos]})}};
  }
  pair = single;
  if (bos) pair.push_back(special(*bos, 1));
  pair.push_back(sequence("B", 1));
  if (eos) pair.push_back(special(*eos, 1));
  return ordered_json{{"type", "TemplateProcessing"},
                      {"single", std::move(single)},
                      {"pair", std::move(pair)},
                      {"special_tokens", std::move(specials)}};
}

ordered_json byte_level(bool add_prefix_space, bool trim_offsets, bool use_regex) {
  return ordered_json{{"type", "ByteLevel"},
                      {"add_prefix_space", add_prefix_space},
                      {"trim_offsets", trim_offsets},
                      {"use_regex", use_regex}};
}

ordered_json bpe_model(ordered_json vocab, ordered_json merges, ordered_json unk, bool spm,
                       bool ignore_merges) {
  ordered_json m;
  m["type"] = "BPE";
  m["dropout"] = nullptr;
  m["unk_token"] = std::move(unk);
  m["continuing_subword_prefix"] = spm ? ordered_json(nullptr) : ordered_json("");
  m["end_of_word_suffix"] = spm ? ordered_json(nullptr) : ordered_json("");
  m["fuse_unk"] = spm;
  m["byte_fallback"] = spm;
  m["ignore_merges"] = ignore_merges;
  m["vocab"] = std::move(vocab);
  m["merges"] = std::move(merges);
  return m;
}

/// token → id, in id order. The tokens are known to be distinct, so the entries are appended to
/// ordered_map's underlying vector directly (its operator[] searches linearly: quadratic).
ordered_json vocab_object(const std::vector<std::string>& tokens) {
  ordered_json v = ordered_json::object();
  auto& entries = static_cast<std::vector<std::pair<const std::string, ordered_json>>&>(
      v.get_ref<ordered_json::object_t&>());
  entries.reserve(tokens.size());
  for (uint32_t i = 0; i < tokens.size(); ++i) entries.emplace_back(tokens[i], i);
  return v;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

GgufTokenizer tokenizer_from_gguf(const json& metadata) {
  if (!metadata.is_object()) fail(ErrorKind::Parse, "GGUF tokenizer: metadata is not an object");
  const std::string model = get_string(require(metadata, "tokenizer.ggml.model"), "tokenizer.ggml.model");
  const bool spm = model == "llama";
  if (!spm && model != "gpt2")
    fail(ErrorKind::Unsupported, "GGUF tokenizer: tokenizer.ggml.model '{}' (only llama, gpt2)", model);

  const std::vector<std::string> tokens = read_tokens(metadata);
  const size_t n = tokens.size();
  const std::vector<int32_t> types = read_types(metadata, n);
  const auto ids = index_tokens(tokens);

  GgufTokenizer out;
  if (const json* ct = find(metadata, "tokenizer.chat_template"))
    out.chat_template = get_string(*ct, "tokenizer.chat_template");

  std::string name;
  if (const json* nm = find(metadata, "general.name"); nm && nm->is_string())
    name = lower(nm->get<std::string>());
  const bool phi3 = name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos;

  ordered_json tj;
  tj["version"] = "1.0";
  tj["truncation"] = nullptr;
  tj["padding"] = nullptr;
  tj["added_tokens"] = added_tokens(tokens, types, phi3);

  // llama-vocab.cpp defaults: SPM has BOS 1, EOS 2, UNK 0 and adds BOS; BPE's default ids are
  // not meaningful (11) and only the Llama-3 family adds BOS.
  std::optional<uint32_t> bos = opt_id(metadata, "tokenizer.ggml.bos_token_id", n);
  std::optional<uint32_t> eos = opt_id(metadata, "tokenizer.ggml.eos_token_id", n);
  std::optional<uint32_t> unk = opt_id(metadata, "tokenizer.ggml.unknown_token_id", n);
  bool add_bos_default = spm;

  if (spm) {
    if (!bos && !find(metadata, "tokenizer.ggml.bos_token_id") && n > 1) bos = 1;
    if (!eos && !find(metadata, "tokenizer.ggml.eos_token_id") && n > 2) eos = 2;
    if (!unk && !find(metadata, "tokenizer.ggml.unknown_token_id")) unk = 0;
    const std::vector<double> scores = read_scores(metadata, n);
    const bool prefix = opt_bool(metadata, "tokenizer.ggml.add_space_prefix").value_or(true);

    ordered_json merges = ordered_json::array();
    for (auto [l, r] : spm_merges(tokens, scores, ids))
      merges.push_back(ordered_json::array({tokens[l], tokens[r]}));
    ordered_json norms = ordered_json::array();
    if (prefix) norms.push_back({{"type", "Prepend"}, {"prepend", kSpmSpace}});
    norms.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpmSpace}});
    tj["normalizer"] = {{"type", "Sequence"}, {"normalizers", std::move(norms)}};
    tj["pre_tokenizer"] = nullptr;
    ordered_json decs = ordered_json::array();
    decs.push_back({{"type", "Replace"}, {"pattern", {{"String", kSpmSpace}}}, {"content", " "}});
    decs.push_back({{"type", "ByteFallback"}});
    decs.push_back({{"type", "Fuse"}});
    if (prefix) decs.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    tj["post_processor"] = nullptr;  // set below
    tj["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(decs)}};
    tj["model"] = bpe_model(vocab_object(tokens), std::move(merges),
                            unk ? ordered_json(tokens[*unk]) : ordered_json(nullptr), true, false);
  } else {
    const json* pre_v = find(metadata, "tokenizer.ggml.pre");
    const std::string pre = pre_v ? get_string(*pre_v, "tokenizer.ggml.pre") : "default";
    ordered_json pre_tok;
    bool ignore_merges = false;
    if (pre == "gpt-2" || pre == "default" || pre == "phi-2") {
      pre_tok = byte_level(false, true, true);
    } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
      pre_tok = {{"type", "Sequence"},
                 {"pretokenizers", ordered_json::array({{{"type", "Split"},
                                                         {"pattern", {{"Regex", std::string(kLlama3Regex)}}},
                                                         {"behavior", "Isolated"},
                                                         {"invert", false}},
                                                        byte_level(false, true, false)})}};
      ignore_merges = true;
      add_bos_default = true;
    } else if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
      pre_tok = {{"type", "Sequence"},
                 {"pretokenizers", ordered_json::array({{{"type", "Split"},
                                                         {"pattern", {{"Regex", std::string(kQwen2Regex)}}},
                                                         {"behavior", "Isolated"},
                                                         {"invert", false}},
                                                        byte_level(false, false, false)})}};
    } else {
      fail(ErrorKind::Unsupported,
           "GGUF tokenizer: tokenizer.ggml.pre '{}' (gpt2 model; only gpt-2, default, phi-2, "
           "llama-bpe, llama3, llama-v3, qwen2, deepseek-r1-qwen)",
           pre);
    }
    ordered_json merges = bpe_merges(metadata, ids);
    tj["normalizer"] = nullptr;
    tj["pre_tokenizer"] = std::move(pre_tok);
    tj["post_processor"] = nullptr;  // set below
    tj["decoder"] = byte_level(true, true, true);
    tj["model"] =
        bpe_model(vocab_object(tokens), std::move(merges), ordered_json(nullptr), false, ignore_merges);
  }

  out.add_bos = opt_bool(metadata, "tokenizer.ggml.add_bos_token").value_or(add_bos_default);
  out.add_eos = opt_bool(metadata, "tokenizer.ggml.add_eos_token").value_or(false);
  if (out.add_bos && !bos)
    fail(ErrorKind::Parse, "GGUF tokenizer: add_bos_token without a valid tokenizer.ggml.bos_token_id");
  if (out.add_eos && !eos)
    fail(ErrorKind::Parse, "GGUF tokenizer: add_eos_token without a valid tokenizer.ggml.eos_token_id");
  if (spm || out.add_bos || out.add_eos) {
    tj["post_processor"] =
        template_processing(tokens, out.add_bos ? bos : std::nullopt, out.add_eos ? eos : std::nullopt);
  } else {
    tj["post_processor"] = byte_level(true, false, true);
  }

  out.bos_id = bos;
  out.pad_id = opt_id(metadata, "tokenizer.ggml.padding_token_id", n);
  for (auto id : {eos, opt_id(metadata, "tokenizer.ggml.eot_token_id", n),
                  opt_id(metadata, "tokenizer.ggml.eom_token_id", n)}) {
    if (id && std::find(out.eos_ids.begin(), out.eos_ids.end(), *id) == out.eos_ids.end())
      out.eos_ids.push_back(*id);
  }

  try {
    out.tokenizer_json = tj.dump();
  } catch (const json::exception& e) {
    fail(ErrorKind::Parse, "GGUF tokenizer: tokenizer.ggml.tokens or merges are not UTF-8 ({})", e.what());
  }
  return out;
}

}  // namespace cortiq::convert

namespace cortiq::convert {

namespace {

/// The first TemplateProcessing of a post-processor (itself, or inside a Sequence), or nullptr.
const json* template_of(const json& pp) {
  if (!pp.is_object()) return nullptr;
  if (pp.value("type", "") == "TemplateProcessing") return &pp;
  if (pp.value("type", "") == "Sequence" && pp.contains("processors") && pp["processors"].is_array())
    for (const json& p : pp["processors"])
      if (const json* t = template_of(p)) return t;
  return nullptr;
}

/// Whether `j` (a normalizer / pre-tokenizer / decoder, possibly a Sequence) has a part of `type`.
bool has_part(const json& j, std::string_view type) {
  if (!j.is_object()) return false;
  if (j.value("type", "") == type) return true;
  for (const char* k : {"normalizers", "pretokenizers", "decoders"})
    if (j.contains(k) && j[k].is_array())
      for (const json& p : j[k])
        if (has_part(p, type)) return true;
  return false;
}

/// The Split regex of a pre-tokenizer (itself or inside a Sequence), or "".
std::string split_regex(const json& j) {
  if (!j.is_object()) return "";
  if (j.value("type", "") == "Split" && j.contains("pattern") && j["pattern"].is_object() &&
      j["pattern"].contains("Regex") && j["pattern"]["Regex"].is_string())
    return j["pattern"]["Regex"].get<std::string>();
  if (j.contains("pretokenizers") && j["pretokenizers"].is_array())
    for (const json& p : j["pretokenizers"])
      if (std::string r = split_regex(p); !r.empty()) return r;
  return "";
}

/// llama.cpp's tokenizer.ggml.pre for a byte-level pre-tokenizer, or Error(Unsupported).
std::string pre_name(const json& pre) {
  const std::string re = split_regex(pre);
  if (re == kLlama3Regex) return "llama-bpe";
  if (re == kQwen2Regex) return "qwen2";
  if (re.empty() && pre.is_object() && pre.value("type", "") == "ByteLevel" && pre.value("use_regex", true))
    return "gpt-2";
  fail(ErrorKind::Unsupported,
       "tokenizer.json: the pre-tokenizer {} has no llama.cpp tokenizer.ggml.pre name this exporter knows "
       "(GPT-2's ByteLevel, Llama 3's and Qwen2's Split regexes)",
       re.empty() ? pre.dump().substr(0, 120) : "regex '" + re.substr(0, 80) + "'");
}

/// "left right" of one tokenizer.json merge (a string or a two-string array).
std::string merge_text(const json& m, size_t i) {
  if (m.is_string()) return m.get<std::string>();
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
    return m[0].get<std::string>() + " " + m[1].get<std::string>();
  fail(ErrorKind::Parse, "tokenizer.json: model.merges[{}] is not a merge", i);
}

GgufKv kv(std::string key, GgufValueType t, json v) {
  return {std::move(key), t, t, std::move(v)};
}
GgufKv arr(std::string key, GgufValueType elem, json v) {
  return {std::move(key), GgufValueType::Array, elem, std::move(v)};
}

}  // namespace

std::vector<GgufKv> tokenizer_to_gguf(const std::string& tokenizer_json, const cmf::TokenizerBundle* bundle,
                                      uint32_t vocab_size, uint32_t* dropped) {
  if (dropped) *dropped = 0;
  json tj;
  try {
    tj = json::parse(tokenizer_json);
  } catch (const json::exception& e) {
    fail(ErrorKind::Parse, "tokenizer.json: {}", e.what());
  }
  const json& model = tj.contains("model") ? tj["model"] : json();
  const std::string mtype = model.is_object() ? model.value("type", "") : "";
  if (mtype != "BPE")
    fail(ErrorKind::Unsupported,
         "tokenizer.json model type '{}': GGUF export writes BPE tokenizers (byte-level 'gpt2' or "
         "SentencePiece "
         "'llama')",
         mtype);
  const bool spm =
      model.value("byte_fallback", false) || has_part(tj.value("decoder", json()), "ByteFallback");
  if (!spm && !has_part(tj.value("pre_tokenizer", json()), "ByteLevel"))
    fail(
        ErrorKind::Unsupported,
        "tokenizer.json: a BPE without byte fallback or a ByteLevel pre-tokenizer has no llama.cpp tokenizer "
        "model");
  if (!model.contains("vocab") || !model["vocab"].is_object())
    fail(ErrorKind::Parse, "tokenizer.json: model.vocab is not an object");

  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<bool> known;
  auto place = [&](uint64_t id, const std::string& s, int32_t type) {
    if (id >= (1u << 24)) fail(ErrorKind::Parse, "tokenizer.json: token id {} is out of range", id);
    if (id >= tokens.size()) {
      tokens.resize(id + 1);
      types.resize(id + 1, kUnused);
      known.resize(id + 1, false);
    }
    tokens[id] = s;
    types[id] = type;
    known[id] = true;
  };
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_unsigned())
      fail(ErrorKind::Parse, "tokenizer.json: vocab entry '{}' has no id", it.key());
    place(it.value().get<uint64_t>(), it.key(), kNormal);
  }
  std::string unk_token = model.contains("unk_token") && model["unk_token"].is_string()
                              ? model["unk_token"].get<std::string>()
                              : "";
  if (tj.contains("added_tokens") && tj["added_tokens"].is_array())
    for (const json& a : tj["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_unsigned() || !a.contains("content"))
        fail(ErrorKind::Parse, "tokenizer.json: malformed added token {}", a.dump().substr(0, 80));
      place(a["id"].get<uint64_t>(), a["content"].get<std::string>(),
            a.value("special", false) ? kControl : kUserDefined);
    }
  // exactly vocab_size tokens, as many as the embedding has rows (llama.cpp checks): padded, or the
  // ids past the rows dropped (the model cannot produce or embed them); 0: the tokenizer's own count
  if (vocab_size > 0) {
    if (tokens.size() > vocab_size && dropped)
      *dropped = static_cast<uint32_t>(std::count(known.begin() + vocab_size, known.end(), true));
    tokens.resize(vocab_size);
    types.resize(vocab_size, kUnused);
    known.resize(vocab_size, false);
  }
  std::unordered_map<std::string, uint32_t> ids;
  for (uint32_t i = 0; i < tokens.size(); ++i) {
    if (!known[i]) tokens[i] = "[PAD" + std::to_string(i) + "]";
    ids.emplace(tokens[i], i);
  }
  std::optional<uint32_t> unk_id;
  if (!unk_token.empty())
    if (auto it = ids.find(unk_token); it != ids.end()) unk_id = it->second;

  std::vector<std::string> merges;
  if (model.contains("merges") && model["merges"].is_array()) {
    merges.reserve(model["merges"].size());
    for (size_t i = 0; i < model["merges"].size(); ++i) {
      std::string m = merge_text(model["merges"][i], i);
      // a merge of or into a dropped token would make llama.cpp's BPE produce an id it has not
      const size_t sp = m.find(' ', 1);
      if (sp != std::string::npos && (!ids.count(m.substr(0, sp)) || !ids.count(m.substr(sp + 1)) ||
                                      !ids.count(m.substr(0, sp) + m.substr(sp + 1))))
        continue;
      merges.push_back(std::move(m));
    }
  }

  std::vector<GgufKv> out;
  out.push_back(kv("tokenizer.ggml.model", GgufValueType::String, spm ? "llama" : "gpt2"));
  // llama.cpp's converter writes pre "default" for SentencePiece models
  out.push_back(kv("tokenizer.ggml.pre", GgufValueType::String,
                   spm ? std::string("default") : pre_name(tj.value("pre_tokenizer", json()))));
  out.push_back(arr("tokenizer.ggml.tokens", GgufValueType::String, json(tokens)));
  if (spm) {
    std::vector<double> scores(tokens.size(), 0.0);
    std::vector<bool> scored(tokens.size(), false);
    for (size_t r = 0; r < merges.size(); ++r) {
      const size_t sp = merges[r].find(' ', 1);
      if (sp == std::string::npos) continue;
      auto it = ids.find(merges[r].substr(0, sp) + merges[r].substr(sp + 1));
      if (it == ids.end() || scored[it->second]) continue;
      scores[it->second] = -static_cast<double>(r);
      scored[it->second] = true;
    }
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (!scored[i]) scores[i] = -static_cast<double>(merges.size() + i);
      if (types[i] == kNormal && tokens[i].size() == 6 && tokens[i].starts_with("<0x") &&
          tokens[i].back() == '>')
        types[i] = kByte;
      if (unk_id && i == *unk_id) types[i] = kUnknown;
    }
    out.push_back(arr("tokenizer.ggml.scores", GgufValueType::F32, json(scores)));
  }
  out.push_back(arr("tokenizer.ggml.token_type", GgufValueType::I32, json(types)));
  if (!spm) out.push_back(arr("tokenizer.ggml.merges", GgufValueType::String, json(merges)));

  // special ids: the CMF bundle first, the post-processor's template for what it lacks
  std::optional<uint32_t> bos, pad;
  std::vector<uint32_t> eos;
  if (bundle) {
    bos = bundle->bos_token_id;
    pad = bundle->pad_token_id;
    eos = bundle->eos_token_ids;
  }
  bool add_bos = false, add_eos = false;
  const json post = tj.value("post_processor", json());
  if (const json* tp = template_of(post);
      tp && tp->contains("single") && (*tp)["single"].is_array() && !(*tp)["single"].empty()) {
    const json& single = (*tp)["single"];
    auto special_id = [&](const json& item) -> std::optional<uint32_t> {
      if (!item.contains("SpecialToken")) return std::nullopt;
      const std::string name = item["SpecialToken"].value("id", "");
      auto it = ids.find(name);
      return it == ids.end() ? std::nullopt : std::optional<uint32_t>(it->second);
    };
    if (auto b = special_id(single.front())) {
      add_bos = true;
      if (!bos) bos = b;
    }
    if (auto e = special_id(single.back()); e && single.size() > 1) {
      add_eos = true;
      if (eos.empty()) eos.push_back(*e);
    }
  }
  const auto n = static_cast<uint32_t>(tokens.size());
  if (bos && *bos < n) out.push_back(kv("tokenizer.ggml.bos_token_id", GgufValueType::U32, *bos));
  if (!eos.empty() && eos[0] < n)
    out.push_back(kv("tokenizer.ggml.eos_token_id", GgufValueType::U32, eos[0]));
  if (eos.size() > 1 && eos[1] < n)
    out.push_back(kv("tokenizer.ggml.eot_token_id", GgufValueType::U32, eos[1]));
  if (eos.size() > 2 && eos[2] < n)
    out.push_back(kv("tokenizer.ggml.eom_token_id", GgufValueType::U32, eos[2]));
  if (unk_id) out.push_back(kv("tokenizer.ggml.unknown_token_id", GgufValueType::U32, *unk_id));
  if (pad && *pad < n) out.push_back(kv("tokenizer.ggml.padding_token_id", GgufValueType::U32, *pad));
  out.push_back(kv("tokenizer.ggml.add_bos_token", GgufValueType::Bool, add_bos));
  out.push_back(kv("tokenizer.ggml.add_eos_token", GgufValueType::Bool, add_eos));
  if (spm) {
    const json& norm = tj.value("normalizer", json());
    const json& pre = tj.value("pre_tokenizer", json());
    bool prefix = has_part(norm, "Prepend");
    if (pre.is_object() && has_part(pre, "Metaspace"))
      prefix = prefix || pre.value("prepend_scheme", "always") != "never";
    if (!prefix)
      out.push_back(kv("tokenizer.ggml.add_space_prefix", GgufValueType::Bool, false));  // default true
  }
  if (bundle && bundle->chat_template)
    out.push_back(kv("tokenizer.chat_template", GgufValueType::String, *bundle->chat_template));
  return out;
}

}  // namespace cortiq::convert
