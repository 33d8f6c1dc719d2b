// libFuzzer target for the tokenizers (tokenizer/tokenizer.h) over every shipped tokenizer.json:
// models/stories260K and each ../shared/models/tokenizer-*/ found at start-up (the directory is
// $CORTIQ_FUZZ_MODELS, else ../shared/models relative to the working directory or to the source
// tree). Input: byte 0 picks the tokenizer, byte 1 holds flags, the rest is both a text (encode,
// then decode of its ids) and an id sequence (decode, token_text / token_bytes, and an
// IncrementalDecoder fed one id at a time, optionally primed, then flushed).
// Id encoding, one or more bytes per id: b < 0x40 → the (b·256 + next)-th "interesting" id (added
// and special tokens, byte tokens); b < 0x80 → id (b & 0x3f)·256 + next; else a 3-byte id modulo
// vocab_size + 4 (a few ids past the vocabulary, which decode ignores).
// Build: CC=clang CXX=clang++ cmake -DCORTIQ_FUZZ=ON ... && cmake --build . --target tokenizer_fuzz
// Run:   ./tokenizer_fuzz tests/fuzz_corpus/tokenizer_fuzz -max_total_time=60
// Loading errors are reported and skip that tokenizer. During a run no exception is expected
// (encode and decode take any input; the IncrementalDecoder never throws): any exception, a crash,
// a sanitizer report, or a stream breaking IncrementalDecoder's rule (unprimed: the pieces join to
// decode(all ids); no rewrites) is a bug.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

using cortiq::IncrementalDecoder;
using cortiq::Tokenizer;
namespace fs = std::filesystem;

struct Loaded {
  std::string path;
  Tokenizer tok;
  std::vector<uint32_t> interesting;  ///< added / special tokens and byte tokens
};

std::vector<Loaded>& tokenizers() {
  static std::vector<Loaded> t;
  return t;
}

void load(const std::string& path) {
  try {
    Tokenizer tok = Tokenizer::from_file(path);
    std::vector<uint32_t> in;
    const size_t n = tok.vocab_size();
    for (uint32_t id = 0; id < n; ++id) {
      const std::string piece = tok.id_to_token(id);
      const bool byte_token = piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece[5] == '>';
      if (tok.is_added(id) || byte_token) in.push_back(id);
    }
    if (in.empty()) in.push_back(0);
    std::fprintf(stderr, "tokenizer_fuzz: %s (%zu ids, %zu interesting)\n", path.c_str(), n, in.size());
    tokenizers().push_back({path, std::move(tok), std::move(in)});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_fuzz: skipping %s: %s\n", path.c_str(), e.what());
  }
}

void load_all() {
  std::vector<fs::path> roots;
  if (const char* src = std::getenv("CORTIQ_SOURCE_DIR")) roots.emplace_back(src);
#ifdef CORTIQ_SOURCE_DIR
  roots.emplace_back(CORTIQ_SOURCE_DIR);
#endif
  roots.emplace_back(".");
  std::error_code ec;
  for (const auto& r : roots)
    if (fs::exists(r / "models/stories260K/tokenizer.json", ec)) {
      load((r / "models/stories260K/tokenizer.json").string());
      break;
    }
  std::vector<fs::path> shared;
  if (const char* m = std::getenv("CORTIQ_FUZZ_MODELS")) shared.emplace_back(m);
  for (const auto& r : roots) shared.push_back(r / "../shared/models");
  for (const auto& dir : shared) {
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<std::string> found;
    for (const auto& de : fs::directory_iterator(dir, ec))
      if (de.path().filename().string().rfind("tokenizer-", 0) == 0 &&
          fs::exists(de.path() / "tokenizer.json", ec))
        found.push_back((de.path() / "tokenizer.json").string());
    std::sort(found.begin(), found.end());  // byte 0 picks the same tokenizer on every machine
    for (const auto& f : found) load(f);
    if (!found.empty()) break;
  }
  if (tokenizers().empty()) {
    std::fprintf(stderr, "tokenizer_fuzz: no tokenizer.json found\n");
    std::exit(1);
  }
}

std::vector<uint32_t> ids_of(const Loaded& l, const uint8_t* p, size_t n) {
  std::vector<uint32_t> ids;
  const uint32_t V = static_cast<uint32_t>(l.tok.vocab_size());
  for (size_t i = 0; i < n;) {
    const uint8_t b = p[i++];
    const uint32_t next = i < n ? p[i++] : 0;
    if (b < 0x40) {
      ids.push_back(l.interesting[((uint32_t{b} << 8) | next) % l.interesting.size()]);
    } else if (b < 0x80) {
      ids.push_back(((uint32_t{b} & 0x3f) << 8) | next);
    } else {
      const uint32_t last = i < n ? p[i++] : 0;
      ids.push_back((((uint32_t{b} & 0x7f) << 16) | (next << 8) | last) % (V + 4));
    }
  }
  return ids;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // CI asks every fuzzer to write its seeds (cmf_fuzz's convention); this one's are committed.
  if (std::getenv("CMF_FUZZ_WRITE_SEEDS")) std::exit(0);
  load_all();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const Loaded& l = tokenizers()[data[0] % tokenizers().size()];
  const uint8_t flags = data[1];
  const bool add_special = flags & 1, skip_special = flags & 2;
  const uint8_t* body = data + 2;
  const size_t n = size - 2;

  const std::string_view text(reinterpret_cast<const char*>(body), n);
  const std::vector<uint32_t> enc = l.tok.encode(text, add_special);
  (void)l.tok.decode(enc, skip_special);

  const std::vector<uint32_t> ids = ids_of(l, body, n);
  (void)l.tok.decode(ids, skip_special);
  for (size_t i = 0; i < ids.size() && i < 8; ++i) {
    (void)l.tok.token_text(ids[i]);
    (void)l.tok.token_bytes(ids[i]);
  }
  // Incremental decode of the ids (or of the encoded text), primed with a prefix when asked.
  const std::vector<uint32_t>& seq = (flags & 4) ? enc : ids;
  IncrementalDecoder dec(l.tok, skip_special);
  size_t start = 0;
  if (flags & 8) {
    start = std::min<size_t>(seq.size(), (flags >> 4) & 7);
    dec.prime(std::span<const uint32_t>(seq.data(), start));
  }
  std::string streamed;
  for (size_t i = start; i < seq.size(); ++i) streamed += dec.push(seq[i]);
  streamed += dec.flush();
  // IncrementalDecoder's documented rule: unprimed, the pieces join to exactly decode(all ids);
  // no decoder of the `tokenizers` library rewrites text already sent.
  const bool mismatch = start == 0 && !(flags & 8) && streamed != l.tok.decode(seq, skip_special);
  if (mismatch || dec.rewrites() != 0) {
    std::fprintf(stderr, "tokenizer_fuzz: %s: stream '%s' vs decode '%s', %zu rewrites\n", l.path.c_str(),
                 streamed.c_str(), l.tok.decode(seq, skip_special).c_str(), dec.rewrites());
    std::abort();
  }
  return 0;
}
