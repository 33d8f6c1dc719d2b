// `cortiq ppl --kl-divergence-base F [--kl-divergence]`: a base model's log-probabilities saved
// at every scored position of the chunked procedure, and another model's compared against them
// (llama-perplexity's KL-divergence mode; the file format is ours).
//
// The base file (little-endian; version 1):
//   0   "CORTIQKL"                     magic, 8 bytes
//   8   u32 version (1)
//   12  u32 n_vocab                    logits per position
//   16  u32 n_ctx                      chunk length in tokens (ppl --ctx)
//   20  u32 n_chunks
//   24  u32 first                      first scored position of a chunk (n_ctx / 2)
//   28  u32 reserved (0)
//   32  u32 ids[n_chunks · n_ctx]      the text's tokens, chunk after chunk (before ppl puts BOS
//                                      first in each chunk)
//   …   f32 logp[n_chunks][n_ctx − 1 − first][n_vocab]
//                                      log-softmax of the base's logits at positions
//                                      first … n_ctx − 2 of each chunk (each predicts the next id)
// Size: 32 + 4·n_chunks·n_ctx + 4·n_chunks·(n_ctx−1−first)·n_vocab bytes (stories260K, 7 chunks of
// 256: 0.5 MB; a 150k-vocab model on 100k tokens: ~30 GB — use --chunks to compare on fewer).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "util/atomic_file.h"

namespace cortiq::cli {

/// The fixed part of a KL-divergence base file: vocabulary size, chunk length in tokens, chunk count
/// and the first scored position of each chunk (llama-perplexity scores the second half).
struct KldHeader {
  uint32_t n_vocab = 0, n_ctx = 0, n_chunks = 0, first = 0;
  size_t per_chunk() const { return n_ctx - 1 - first; }  ///< scored positions per chunk
};

/// Writes a base file: the header and ids at once, then each position's log-probabilities as the
/// engine reports them (any chunk order), renamed to its final name by commit() (util/atomic_file.h:
/// an interrupted run leaves nothing under `path`). Throws Error(Io).
class KldBaseWriter {
 public:
  KldBaseWriter(const std::string& path, const KldHeader& h, std::span<const uint32_t> ids);
  /// Position `pos` (first ≤ pos ≤ n_ctx − 2) of chunk `chunk`: logits [n_vocab] → log-softmax.
  /// Error(InvalidArgument) when the logits are not n_vocab long.
  void put(size_t chunk, size_t pos, std::span<const float> logits);
  void commit();

 private:
  KldHeader h_;
  AtomicFile file_;
  std::vector<float> row_;
};

/// Reads a base file. open() checks the magic, version, header sanity and the file's size, and
/// throws Error(Io) for a file that cannot be read, Error(Parse) naming the file and the field
/// otherwise.
class KldBaseReader {
 public:
  explicit KldBaseReader(const std::string& path);
  ~KldBaseReader();
  KldBaseReader(const KldBaseReader&) = delete;
  KldBaseReader& operator=(const KldBaseReader&) = delete;
  const KldHeader& header() const { return h_; }
  const std::vector<uint32_t>& ids() const { return ids_; }
  /// The stored log-probabilities [n_vocab] of `pos` in `chunk` into `out`. Throws Error(Io).
  void row(size_t chunk, size_t pos, std::vector<float>& out) const;

 private:
  std::string path_;
  int fd_ = -1;
  KldHeader h_;
  std::vector<uint32_t> ids_;
};

/// llama-perplexity's KL statistics of a model Q against the base, per scored token: KL(base‖Q) =
/// Σ_v p_base(v)·(log p_base(v) − log p_Q(v)) (natural log, log-softmax in double), whether the
/// argmax agrees ("same top p"), and both NLLs of the target token. Tokens are kept by index, so
/// the result does not depend on the order the engine reports them in.
class KldStats {
 public:
  explicit KldStats(size_t tokens);
  /// Token `index`: base log-probabilities [n_vocab], Q's logits [n_vocab], the target id.
  void add(size_t index, std::span<const float> base_logp, std::span<const float> logits, uint32_t target);
  /// The report, llama-perplexity's sections and line names (Mean PPL(Q), Mean PPL(base),
  /// Mean ln(PPL(Q)/PPL(base)), Mean/Maximum/99.9%/99.0%/Median/Minimum KLD, Same top p), each
  /// mean with its standard error.
  std::string report() const;
  double mean_kld() const;
  double same_top() const;  ///< fraction (0..1) of tokens whose argmax agrees

 private:
  std::vector<double> kld_, nll_q_, nll_b_;
  std::vector<char> same_;
};

}  // namespace cortiq::cli
