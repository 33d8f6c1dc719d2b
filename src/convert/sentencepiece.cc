#include "convert/sentencepiece.h"

#include <fmt/format.h>

#include <cstring>
#include <optional>
#include <vector>

#include "convert/gguf_tokenizer.h"
#include "util/error.h"

namespace cortiq::convert {

namespace {

using json = nlohmann::json;

/// A bounds-checked protobuf reader over one message's bytes.
struct Proto {
  std::span<const uint8_t> b;
  size_t base;  ///< offset of b in the file, for messages
  const std::string& path;
  size_t o = 0;

  bool done() const { return o >= b.size(); }
  [[noreturn]] void bad(const char* what) const {
    fail(ErrorKind::Parse, "{}: SentencePiece model: {} at offset {}", path, what, base + o);
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (o >= b.size()) bad("truncated varint");
      const uint8_t c = b[o++];
      v |= uint64_t{c & 0x7Fu} << shift;
      if (!(c & 0x80)) return v;
    }
    bad("varint longer than 10 bytes");
  }
  /// Reads a key; false at the end of the message.
  bool key(uint32_t& field, uint32_t& wire) {
    if (done()) return false;
    const uint64_t k = varint();
    field = static_cast<uint32_t>(k >> 3);
    wire = static_cast<uint32_t>(k & 7);
    return true;
  }
  std::span<const uint8_t> bytes() {
    const uint64_t n = varint();
    if (n > b.size() - o) bad("length-delimited field past the end");
    auto s = b.subspan(o, n);
    o += n;
    return s;
  }
  float f32() {
    if (b.size() - o < 4) bad("truncated float");
    float f;
    std::memcpy(&f, b.data() + o, 4);
    o += 4;
    return f;
  }
  void skip(uint32_t wire) {
    switch (wire) {
      case 0:
        (void)varint();
        return;
      case 1:
        if (b.size() - o < 8) bad("truncated fixed64");
        o += 8;
        return;
      case 2:
        (void)bytes();
        return;
      case 5:
        if (b.size() - o < 4) bad("truncated fixed32");
        o += 4;
        return;
      default:
        bad("unknown wire type");
    }
  }
  Proto sub(std::span<const uint8_t> s) const {
    return Proto{s, base + static_cast<size_t>(s.data() - b.data()), path};
  }
};

/// An int32 field (varint, two's complement in 64 bits for negatives).
int64_t as_int32(uint64_t v) {
  return static_cast<int32_t>(static_cast<uint32_t>(v));
}

}  // namespace

json sentencepiece_metadata(std::span<const uint8_t> proto, const std::string& path) {
  Proto p{proto, 0, path};
  std::vector<std::string> tokens;
  std::vector<double> scores;
  std::vector<int32_t> types;
  int64_t model_type = 1;  // UNIGRAM, the proto default
  int64_t unk = 0, bos = 1, eos = 2, pad = -1;
  bool dummy_prefix = true;
  uint32_t field = 0, wire = 0;
  while (p.key(field, wire)) {
    if (field == 1 && wire == 2) {
      Proto m = p.sub(p.bytes());
      std::string piece;
      float score = 0.0f;
      int32_t type = 1;
      while (m.key(field, wire)) {
        if (field == 1 && wire == 2) {
          auto s = m.bytes();
          piece.assign(reinterpret_cast<const char*>(s.data()), s.size());
        } else if (field == 2 && wire == 5) {
          score = m.f32();
        } else if (field == 3 && wire == 0) {
          type = static_cast<int32_t>(m.varint());
        } else {
          m.skip(wire);
        }
      }
      tokens.push_back(std::move(piece));
      scores.push_back(score);
      types.push_back(type);
    } else if (field == 2 && wire == 2) {
      Proto t = p.sub(p.bytes());
      while (t.key(field, wire)) {
        if (wire != 0) {
          t.skip(wire);
          continue;
        }
        const uint64_t v = t.varint();
        if (field == 3) model_type = as_int32(v);
        if (field == 40) unk = as_int32(v);
        if (field == 41) bos = as_int32(v);
        if (field == 42) eos = as_int32(v);
        if (field == 43) pad = as_int32(v);
      }
    } else if (field == 3 && wire == 2) {
      Proto n = p.sub(p.bytes());
      while (n.key(field, wire)) {
        if (field == 3 && wire == 0)
          dummy_prefix = n.varint() != 0;
        else
          n.skip(wire);
      }
    } else {
      p.skip(wire);
    }
  }
  if (tokens.empty()) fail(ErrorKind::Parse, "{}: SentencePiece model has no pieces", path);
  if (model_type != 2) {
    const char* names[] = {"?", "unigram", "BPE", "word", "char"};
    fail(ErrorKind::Unsupported,
         "{}: SentencePiece model type {} ({}): only BPE models are converted (as transformers' "
         "LlamaConverter "
         "does); add the model's tokenizer.json to the folder",
         path, model_type, model_type >= 0 && model_type <= 4 ? names[model_type] : "?");
  }
  json md = json::object();
  md["tokenizer.ggml.model"] = "llama";
  md["tokenizer.ggml.tokens"] = tokens;
  md["tokenizer.ggml.scores"] = scores;
  md["tokenizer.ggml.token_type"] = types;
  const auto n = static_cast<int64_t>(tokens.size());
  // -1 (none) or out of range: the key is left out and tokenizer_from_gguf applies llama.cpp's defaults
  auto id = [&](const char* key, int64_t v) { md[key] = v >= 0 && v < n ? v : -1; };
  id("tokenizer.ggml.unknown_token_id", unk);
  id("tokenizer.ggml.bos_token_id", bos);
  id("tokenizer.ggml.eos_token_id", eos);
  if (pad >= 0) id("tokenizer.ggml.padding_token_id", pad);
  md["tokenizer.ggml.add_space_prefix"] = dummy_prefix;
  return md;
}

std::string tokenizer_json_from_sentencepiece(std::span<const uint8_t> proto, const std::string& path,
                                              std::optional<bool> add_bos, std::optional<bool> add_eos) {
  json md = sentencepiece_metadata(proto, path);
  if (add_bos) md["tokenizer.ggml.add_bos_token"] = *add_bos;
  if (add_eos) md["tokenizer.ggml.add_eos_token"] = *add_eos;
  try {
    return tokenizer_from_gguf(md).tokenizer_json;
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("{}: {}", path, e.message()));
  }
}

}  // namespace cortiq::convert
