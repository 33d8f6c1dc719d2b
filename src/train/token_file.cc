// Token streams and token files (token_file.h).
#include "train/token_file.h"

#include <bit>
#include <cstring>
#include <fstream>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/progress.h"
#include "util/utf8.h"

namespace cortiq::train {

static_assert(std::endian::native == std::endian::little, "token files are read in place as little-endian");

namespace {
constexpr char kMagic[4] = {'C', 'T', 'O', 'K'};
constexpr uint16_t kVersion = 1;
constexpr size_t kHeader = 16;
}  // namespace

std::vector<uint32_t> Tokens::slice(size_t begin, size_t n) const {
  std::vector<uint32_t> out(n);
  if (p32_)
    std::memcpy(out.data(), p32_ + begin, 4 * n);
  else
    for (size_t i = 0; i < n; ++i) out[i] = p16_[begin + i];
  return out;
}

uint32_t document_separator(const Tokenizer& tok) {
  const auto eos = tok.token_to_id("<|endoftext|>");
  return eos ? *eos : 0;
}

std::vector<uint32_t> tokenize_files(const Tokenizer& tok, const std::vector<std::string>& files,
                                     const std::string& what) {
  const uint32_t sep = document_separator(tok);
  std::vector<uint32_t> all;
  Progress bar("tokenizing " + what, files.size(), "file");
  for (const std::string& f : files) {
    const std::string text = read_file(f);
    if (text.find_first_not_of(" \t\n\r\f\v") == std::string::npos)
      fail(ErrorKind::InvalidArgument, "train: {} file '{}' is {}", what, f,
           text.empty() ? "empty" : "only whitespace");
    if (const size_t bad = first_invalid_utf8(text); bad != std::string::npos)
      fail(ErrorKind::Parse, "train: {} file '{}' is not UTF-8 at byte offset {}", what, f, bad);
    const auto ids = tok.encode(text, false);
    all.insert(all.end(), ids.begin(), ids.end());
    all.push_back(sep);
    bar.advance(1);
  }
  return all;
}

void write_token_file(const std::string& path, std::span<const uint32_t> ids) {
  if (ids.empty()) fail(ErrorKind::InvalidArgument, "token file '{}': no tokens to write", path);
  uint32_t top = 0;
  for (uint32_t id : ids) top = std::max(top, id);
  const uint16_t width = top < 65536 ? 2 : 4;
  uint8_t head[kHeader] = {};
  std::memcpy(head, kMagic, 4);
  std::memcpy(head + 4, &kVersion, 2);
  std::memcpy(head + 6, &width, 2);
  const uint64_t n = ids.size();
  std::memcpy(head + 8, &n, 8);
  AtomicFile f(path, "train.bin");
  f.write(head, kHeader);
  if (width == 4) {
    f.write(ids.data(), 4 * ids.size());
  } else {
    std::vector<uint16_t> chunk;
    for (size_t i = 0; i < ids.size(); i += 1 << 20) {
      const size_t m = std::min<size_t>(ids.size() - i, 1 << 20);
      chunk.assign(ids.begin() + static_cast<ptrdiff_t>(i), ids.begin() + static_cast<ptrdiff_t>(i + m));
      f.write(chunk.data(), 2 * m);
    }
  }
  f.commit();
}

bool is_token_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char got[4] = {};
  f.read(got, 4);
  return f.gcount() == 4 && std::memcmp(got, kMagic, 4) == 0;
}

TokenFile::TokenFile(const std::string& path, size_t vocab_size) : file_(path) {
  const auto b = file_.bytes();
  if (b.size() < kHeader || std::memcmp(b.data(), kMagic, 4) != 0)
    fail(ErrorKind::Parse, "token file '{}': no CTOK header (make one with `cortiq tokenize --bin`)", path);
  uint16_t version = 0, width = 0;
  uint64_t n = 0;
  std::memcpy(&version, b.data() + 4, 2);
  std::memcpy(&width, b.data() + 6, 2);
  std::memcpy(&n, b.data() + 8, 8);
  if (version != kVersion)
    fail(ErrorKind::Parse, "token file '{}': version {} (this build reads {})", path, version, kVersion);
  if (width != 2 && width != 4)
    fail(ErrorKind::Parse, "token file '{}': token width {} (2 or 4)", path, width);
  if (n == 0) fail(ErrorKind::InvalidArgument, "token file '{}' holds no tokens", path);
  if (n > (b.size() - kHeader) / width || kHeader + n * width != b.size())
    fail(ErrorKind::Parse,
         "token file '{}': the header's {} tokens of {} bytes do not fill its {} bytes after the header",
         path, n, width, b.size() - kHeader);
  width_ = width;
  const uint8_t* d = b.data() + kHeader;  // the mapping is page aligned, so d is 16-byte aligned
  if (width == 2)
    tokens_ = std::span<const uint16_t>(reinterpret_cast<const uint16_t*>(d), n);
  else
    tokens_ = std::span<const uint32_t>(reinterpret_cast<const uint32_t*>(d), n);
  if (vocab_size)
    for (size_t i = 0; i < n; ++i)
      if (tokens_[i] >= vocab_size)
        fail(ErrorKind::Parse, "token file '{}': token {} is id {}, outside the vocabulary of {}", path, i,
             tokens_[i], vocab_size);
}

}  // namespace cortiq::train
