// The trainer's data (issue 29 item 3): text files tokenized into one stream of ids, and that
// stream as a memory-mapped token file (`cortiq tokenize --bin`, `cortiq train --data x.bin`).
//
// Token file format, version 1 (all integers little-endian):
//   offset  0  4 bytes  magic "CTOK"
//   offset  4  u16      version = 1
//   offset  6  u16      token width in bytes: 2 (u16 ids, every id < 65536) or 4 (u32 ids)
//   offset  8  u64      token count N (> 0)
//   offset 16  N × width bytes: the ids, little-endian; the file ends right after them
// The stream is the one tokenize_files makes: each file's text encoded without specials
// (add_special_tokens = false), followed by the separator id (<|endoftext|>, or 0 when the
// tokenizer has none), in the order the files were given.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "util/mmap_file.h"

namespace cortiq::train {

/// A read-only sequence of token ids stored as u16 or u32 (a vector's, or a token file's mapping).
/// Copyable view; the storage must outlive it.
class Tokens {
 public:
  Tokens() = default;
  Tokens(std::span<const uint32_t> ids) : p32_(ids.data()), n_(ids.size()) {}           // NOLINT: implicit
  Tokens(const std::vector<uint32_t>& ids) : Tokens(std::span<const uint32_t>(ids)) {}  // NOLINT
  Tokens(std::span<const uint16_t> ids) : p16_(ids.data()), n_(ids.size()) {}           // NOLINT: implicit
  size_t size() const noexcept { return n_; }
  bool empty() const noexcept { return n_ == 0; }
  uint32_t operator[](size_t i) const noexcept { return p32_ ? p32_[i] : p16_[i]; }
  /// The ids [begin, begin + n) as u32 (begin + n ≤ size()).
  std::vector<uint32_t> slice(size_t begin, size_t n) const;

 private:
  const uint32_t* p32_ = nullptr;
  const uint16_t* p16_ = nullptr;
  size_t n_ = 0;
};

/// The separator tokenize_files puts after each file: <|endoftext|>'s id, or 0 without one.
uint32_t document_separator(const Tokenizer& tok);

/// The files' tokens as one stream (see the file comment), with a progress bar labelled
/// "tokenizing <what>". Throws Error(InvalidArgument) naming the file when one is empty or holds
/// only whitespace, Error(Parse) naming the file and the byte offset when one is not UTF-8,
/// Error(Io) when one cannot be read.
std::vector<uint32_t> tokenize_files(const Tokenizer& tok, const std::vector<std::string>& files,
                                     const std::string& what);

/// Writes `ids` as a token file (width 2 when every id < 65536, else 4) through a temporary renamed
/// into place. Throws Error(InvalidArgument) for no ids, Error(Io) naming the path when it cannot
/// be written (a full disk included; the final name is then untouched).
void write_token_file(const std::string& path, std::span<const uint32_t> ids);

/// Whether `path` starts with the token file's magic (false when it cannot be read).
bool is_token_file(const std::string& path);

/// A token file mapped read-only.
class TokenFile {
 public:
  /// Maps and checks `path`: magic, version 1, width 2 or 4, N > 0, and a size of exactly
  /// 16 + N·width bytes; when vocab_size > 0, every id < vocab_size (one pass over the ids).
  /// Throws Error(Io) when it cannot be mapped, Error(Parse) naming the file and the field (or the
  /// token's index for an id out of the vocabulary).
  explicit TokenFile(const std::string& path, size_t vocab_size = 0);
  Tokens tokens() const noexcept { return tokens_; }
  uint32_t width() const noexcept { return width_; }

 private:
  MappedFile file_;
  Tokens tokens_;
  uint32_t width_ = 0;
};

}  // namespace cortiq::train
