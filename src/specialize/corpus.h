// A task corpus cut for compilation (SPECIALIZATION-NOTES §1 step 2, OURS): each file tokenized raw
// (no BOS, no template), cut into non-overlapping chunks, and the chunks dealt by stride into three
// disjoint splits — index mod 10 = 0 → select (checkpoint choice), 1 → report (the quality contract),
// the rest → train — so that no split is the opening of one file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace cortiq::specialize {

using Chunk = std::vector<uint32_t>;

/// How the corpus is cut.
struct SplitOptions {
  size_t chunk = 256;          ///< tokens per chunk (≤ the model's context)
  size_t select_chunks = 16;   ///< at most this many select chunks (evenly spaced over the select pool)
  size_t report_chunks = 32;   ///< at most this many report chunks
  size_t train_chunks = 1024;  ///< at most this many train chunks (0 = all)
  size_t min_chunks = 24;      ///< fewer chunks in all is refused (REF: 24)
};

/// One input file as recorded in the quality contract.
struct CorpusFile {
  std::string path, basename;
  std::string sha256;   ///< lowercase hex of the whole file
  uint64_t tokens = 0;  ///< its token count
};

struct TaskCorpus {
  std::vector<CorpusFile> files;
  size_t chunk = 0;
  uint64_t tokens = 0;        ///< all files' tokens
  uint64_t total_chunks = 0;  ///< before the caps
  std::vector<Chunk> select, report, train;
  /// "stride10:select=0,report=1" (the contract's split rule).
  static constexpr const char* kSplitRule = "stride10:select=0,report=1";
};

/// Tokenizes `paths` with `tok` (text must be UTF-8; invalid input is replaced as the tokenizer
/// does), cuts chunks file by file (a file's tail shorter than a chunk is dropped) and deals them
/// into the splits. Throws Error(Io) for an unreadable file, Error(InvalidArgument) when there are
/// no files, chunk < 4, or the corpus gives fewer than opt.min_chunks chunks — the message says how
/// many tokens it has and how many are needed (min_chunks · chunk).
TaskCorpus load_corpus(const Tokenizer& tok, const std::vector<std::string>& paths, const SplitOptions& opt);

}  // namespace cortiq::specialize
