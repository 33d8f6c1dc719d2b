// CMF v2 streaming writer (spec §1, §3, §4, §8, §10; FORMAT-NOTES §1.2, §1.3, §1.6, §1.10, §1.15).
//
// Layout written (readers navigate only by the envelope, so this is one valid placement):
//   [0, 128)            envelope (patched last)
//   [128, ...)          header JSON, then the directory immediately after it — written into a
//                       zero-filled reserved gap at finish()
//   data_off            = align4096(max(reserve, 129)); payloads streamed here as add_tensor() is
//                       called: each at a multiple of 64 relative to data_off (4096 for payloads
//                       ≥ 16 KiB), gaps zero; data_len ends at the last payload's end
//   after the blob      masks section, then vocab section, back-to-back, unaligned
//   (no sparse index: decision 4)
// If header + directory do not fit in the gap, they are appended after the last section instead
// (header, then directory) and the gap stays zero — still a valid file; pass a larger
// WriterOptions::reserve_bytes to keep them in front.
// Memory is bounded by one payload plus the directory records. Output goes through AtomicFile
// (temp + fsync + rename); nothing appears under the final name unless finish() succeeds.
//
// required_features (FORMAT-NOTES §1.3, decision 2): TENSOR_DIR always; BINARY_MASKS when masks
// are written; QUANT_2F when a q8_2f, vbit or vbit_ro tensor is in the file; LOOP_MASKS when masks
// are written and arch.num_loops > 1; SKILL_FILE when a skill record has base_dir_hash.
//
// Sharding (WriterOptions::shard_max_bytes > 0): tensors go greedily in call order into shards
// whose whole file stays ≤ shard_max_bytes: the reserved gap before the blob (reserve_bytes), the
// blob, and in shard 1 the vocab and raw masks set before the tensors (a tensor that does not fit
// in an empty shard with its gap gets a shard of its own, which is then larger). If more
// than one shard results, files are `{stem}-{no:05}-of-{count:05}.cmf` (stem = path without a
// trailing ".cmf"), each a complete file with header.shard = {no, count}; only shard 1 carries
// masks, vocab, tokenizer_config and skills. If only one shard results, `path` is written as a
// plain file without a shard block. Shards are staged as "<stem>.shardN.partial" and renamed
// once all are complete.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cmf/format.h"
#include "cmf/header.h"
#include "cmf/masks.h"
#include "quant/dtype.h"

namespace cortiq::cmf {

struct WriterOptions {
  /// Bytes reserved at the front for envelope + header + directory (data_off =
  /// align4096(max(reserve, 129))). 0 = default: 1 MiB + 192 bytes per expected tensor.
  uint64_t reserve_bytes = 0;
  /// Hint for the default reserve.
  uint64_t expected_tensors = 0;
  /// Split into shards of at most this many bytes per file (see the sharding note above); 0 = one
  /// file.
  uint64_t shard_max_bytes = 0;
  /// Validate each payload with quant::validate_payload in add_tensor (reserved dtypes refused,
  /// u8 accepted as raw bytes).
  bool validate_payloads = true;
};

/// Streaming CMF writer. Not copyable. Destroying it without finish() removes the temp files.
class Writer {
 public:
  /// Opens the temp output for `path`. Throws Error(Io).
  explicit Writer(std::string path, WriterOptions opt = {});
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  /// Writes one tensor payload now (hash64 computed). `shape` is row-major (`[out, in]`), ≤ 6 dims,
  /// each ≤ u32. Throws Error(InvalidArgument) for a duplicate/empty/non-UTF-8 name or a bad
  /// shape, Error(Parse|Bounds) when the payload does not match its dtype/shape, Error(Io).
  void add_tensor(std::string_view name, quant::DType dtype, std::span<const uint64_t> shape,
                  std::span<const uint8_t> payload);
  /// Masks to write, encoded now against `arch` (which must be the arch of the header given to
  /// finish(), where the section is checked again). Throws Error(InvalidArgument) if a mask's bit
  /// shapes disagree with `arch`.
  void set_masks(const MaskCatalog& masks, const ModelArch& arch);
  /// Raw masks section bytes (e.g. copied from a Reader); validated at finish() against the arch.
  void set_masks_raw(std::vector<uint8_t> section);
  /// Vocab section bytes (HF tokenizer.json verbatim). Set it and the masks before the first
  /// add_tensor when sharding, so shard 1's size limit counts them.
  void set_vocab(std::vector<uint8_t> tokenizer_json);
  /// Number of tensors added so far.
  size_t num_tensors() const noexcept;

  /// Writes sections, header (with section_hashes, and shard blocks when sharded), directory and
  /// envelope; fsync + rename. `header` is taken as the base: its section_hashes and shard fields
  /// are replaced. Returns the final paths (one, or the shard files in order). Throws
  /// Error(InvalidArgument) (masks not matching the arch), Error(Io).
  std::vector<std::string> finish(Header header);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Convenience: writes a whole file from in-memory tensors (tests, small tools).
struct TensorData {
  std::string name;
  quant::DType dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> payload;
};
std::vector<std::string> write_file(const std::string& path, const Header& header,
                                    std::span<const TensorData> tensors,
                                    const std::optional<MaskCatalog>& masks = std::nullopt,
                                    std::span<const uint8_t> vocab = {}, WriterOptions opt = {});

}  // namespace cortiq::cmf
