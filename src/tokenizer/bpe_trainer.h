// Byte-level BPE training (Sennrich et al. 2016, "Neural Machine Translation of Rare Words with
// Subword Units", with GPT-2's byte-level alphabet, Radford et al. 2019): learns merges from a
// corpus and writes a Hugging Face tokenizer.json that this project's Tokenizer and HF `tokenizers`
// both load and encode identically.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cortiq {

/// What train_bpe learns and writes.
struct BpeTrainerOptions {
  /// Total vocabulary: special tokens + the 256 byte symbols + learned merges. Must be
  /// ≥ specials + 256; fewer tokens result when the corpus runs out of pairs seen min_frequency times.
  uint32_t vocab_size = 8192;
  /// Added tokens (ids 0.., in this order), never split and never learned from: every occurrence in
  /// the corpus is cut out before pre-tokenization (the corpus's document separator is one).
  std::vector<std::string> special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  /// A pair seen fewer times than this (over the whole corpus) is never merged.
  uint64_t min_frequency = 2;
  /// Draw a progress bar over the merges on a terminal (util/progress.h).
  bool progress = false;
};

/// Counts of the pre-tokens of a corpus, as byte-level strings; feed texts with add_text, then train.
class BpeTrainer {
 public:
  /// Throws Error(InvalidArgument) when vocab_size cannot hold the specials and the 256 bytes, or a
  /// special token is empty or repeated.
  explicit BpeTrainer(BpeTrainerOptions opt);
  ~BpeTrainer();
  BpeTrainer(const BpeTrainer&) = delete;
  BpeTrainer& operator=(const BpeTrainer&) = delete;

  /// Adds one text. `source` names it in errors: Error(InvalidArgument) "<source>: not UTF-8 at
  /// byte offset N" for invalid UTF-8 (nothing of the text is counted then).
  void add_text(std::string_view text, std::string_view source);

  /// Bytes of text added so far (specials included).
  uint64_t bytes_added() const noexcept;

  /// Learns the merges and returns the tokenizer.json text: the Llama-3 split regex, then ByteLevel
  /// (no prefix space); a BPE model (vocab in id order, merges as "a b" in rank order); the specials
  /// as added tokens; a ByteLevel decoder. Merge order: the pair with the highest count over the
  /// corpus, ties to the lower (left id, right id); a merge whose string is already a token keeps
  /// that token's id. Deterministic: the same texts (in any order of add_text calls that concatenate
  /// to the same multiset of pre-tokens) and options give the same bytes. Throws
  /// Error(InvalidArgument) when no text was added.
  std::string train();

 private:
  struct State;
  BpeTrainerOptions opt_;
  State* s_;
};

}  // namespace cortiq
