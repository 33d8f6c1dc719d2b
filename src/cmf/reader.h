// CMF v2 reader: mmap, strict open-time validation, tensor directory, sections, verify, shard sets.
//
// Navigation is only through the 128-byte envelope (spec §1); nothing assumes section order.
// Open-time checks (spec §1.2, FORMAT-NOTES §1.4), each a typed cortiq::Error naming the offset,
// section or tensor: InvalidMagic, UnsupportedVersion, UnsupportedFeature (unknown bits and the
// reserved DELTA_MASKS/HOT_PACKS), Bounds (a section past EOF, sections overlapping each other or
// the envelope, data_off % 4096, a tensor past data_len or misaligned), Parse (header JSON / keys
// / enum spellings, directory layout, non-UTF-8 name, unknown dtype, ndim > 6, a dimension 0, duplicate
// names, payload size/structure via quant::validate_payload, masks section, sparse index). Tensor hashes are
// checked only by verify(); check_sections() checks the small sections' hashes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cmf/format.h"
#include "cmf/header.h"
#include "cmf/masks.h"
#include "quant/dtype.h"
#include "util/mmap_file.h"

namespace cortiq::cmf {

/// A tensor of the (merged) directory. `off` is relative to the data_off of shard `shard`.
struct TensorInfo {
  std::string name;
  quant::DType dtype = quant::DType::F32;
  std::vector<uint64_t> shape;  ///< row-major, outer → inner (`[out, in]` for matrices)
  uint64_t off = 0;             ///< bytes, relative to data_off of its file
  uint64_t nbytes = 0;          ///< exact payload length in bytes
  uint64_t hash = 0;            ///< stored hash64 of the payload
  uint32_t shard = 0;           ///< 0-based index of the file in the shard set (runtime only)
  /// Π shape (1 for a 0-D tensor).
  uint64_t numel() const noexcept;
};

/// One sparse-index entry (spec §7): active 32-neuron FFN groups and heads of (task, layer).
struct SparseEntry {
  uint32_t task_id = 0;
  uint32_t layer = 0;
  std::vector<uint16_t> groups;  ///< sorted active FFN group ids
  std::vector<uint8_t> heads;    ///< sorted active head ids
};

/// Decodes a sparse-index section (spec §7) with bounds checks on every entry. Throws
/// Error(Parse|Bounds) naming the entry and section offset.
std::vector<SparseEntry> decode_sparse_index(std::span<const uint8_t> section);
/// Encodes a sparse index (entries 4-aligned, zero pad). Our writers do not emit it (decision 4);
/// exposed for tests and tools.
std::vector<uint8_t> encode_sparse_index(std::span<const SparseEntry> entries);

/// Called by verify() as bytes are hashed: (bytes_done_delta).
using ProgressFn = std::function<void(uint64_t bytes)>;

/// Open options.
struct OpenOptions {
  /// When the path is named `{stem}-{no:05}-of-{count:05}.cmf` and its header has a `shard` block,
  /// open the whole set (spec §10, decision 6). false: open just this file.
  bool open_shard_set = true;
  /// Validate every payload's size/structure with quant::validate_payload at open (FORMAT-NOTES
  /// §1.4 step 5). Reserved dtypes (mix8_4, q4_col) and u8 are only bounds-checked.
  bool validate_payloads = true;
  /// MapMode::Memory: read every file into 2 MiB-aligned anonymous memory with transparent huge
  /// pages (`--no-mmap`, faster decode) instead of mmap'ing it (util/mmap_file.h).
  MapMode map_mode = MapMode::Mmap;
};

/// An opened CMF file or shard set. Movable, not copyable. All spans point into the mmaps and stay
/// valid while the Reader lives.
class Reader {
 public:
  /// Opens and validates. Throws Error(InvalidMagic|UnsupportedVersion|UnsupportedFeature|Bounds|
  /// Parse|Io); for shard sets also Io (missing sibling) and Parse (count/no mismatch, duplicate
  /// tensor names across shards). A missing `stem.cmf` beside one `stem-00001-of-NNNNN.cmf` opens that
  /// set (the name `convert -o stem.cmf --shard-max-gb` got); beside two sets: an Io error naming both.
  static Reader open(const std::string& path, const OpenOptions& opt = {});
  /// Opens an in-memory image (tests, fuzzing). The bytes must outlive the Reader. No shard sets.
  static Reader open_memory(std::span<const uint8_t> bytes, const OpenOptions& opt = {});

  Reader(Reader&&) noexcept;
  Reader& operator=(Reader&&) noexcept;
  ~Reader();

  /// Header of the first file (shard 1 in a set).
  const Header& header() const noexcept;
  /// Raw header JSON bytes of the first file.
  std::span<const uint8_t> header_bytes() const noexcept;
  /// Envelope of file `shard` (0-based).
  const Envelope& envelope(size_t shard = 0) const;
  /// Number of files (1 unless a shard set).
  size_t num_files() const noexcept;
  /// Path of file `shard` ("<memory>" for open_memory).
  const std::string& path(size_t shard = 0) const;
  /// All bytes of file `shard`.
  std::span<const uint8_t> file_bytes(size_t shard = 0) const;

  /// Merged tensor directory: file 1's records in directory order, then file 2's, ...
  const std::vector<TensorInfo>& tensors() const noexcept;
  /// The tensor named `name`, or nullptr.
  const TensorInfo* find(std::string_view name) const noexcept;
  /// The tensor named `name`; throws Error(InvalidArgument) "no tensor '<name>'" when absent.
  const TensorInfo& tensor(std::string_view name) const;
  /// The payload bytes [nbytes] of a tensor of this reader.
  std::span<const uint8_t> payload(const TensorInfo& t) const;
  /// Hands the pages of `bytes` (a range of one of this reader's files, e.g. a payload a model
  /// copied into its own layout) back to the kernel; later reads still see the file's bytes
  /// (MappedFile::release). Ignored for open_memory and for ranges outside the files. Throws
  /// Error(Io) as MappedFile::release does.
  void release(std::span<const uint8_t> bytes) const;

  /// Masks section (file 1) decoded against header().arch; nullptr when absent.
  const MaskCatalog* masks() const noexcept;
  /// Raw masks section bytes (empty when absent).
  std::span<const uint8_t> masks_bytes() const noexcept;
  /// Vocab section bytes (HF tokenizer.json verbatim); empty when absent.
  std::span<const uint8_t> vocab() const noexcept;
  /// Sparse index entries (file 1); empty when absent.
  const std::vector<SparseEntry>& sparse_index() const noexcept;
  bool has_sparse_index() const noexcept;
  /// Skills registry (header().skills).
  const std::vector<SkillRecord>& skills() const noexcept { return header().skills; }
  /// SKILL_FILE bit (6) of file 1: a partial skill file, not runnable (spec §9.1).
  bool is_skill_file() const noexcept;
  /// Stored directory hash of file 1 (envelope 0x78) — a skill's base_dir_hash.
  uint64_t dir_hash() const noexcept { return envelope(0).dir_hash; }

  /// Checks the whole integrity chain of every file (spec §8.1, FORMAT-NOTES §1.10): header/dir
  /// hashes when stored ≠ 0, section_hashes (malformed hex reported), every tensor hash; plus our
  /// strict checks: flags == 0, required_features consistent with the content, absent sections are
  /// (0,0), unused bytes (gaps, padding) are zero — except the dead ranges an in-place append lists in
  /// the header and the stale tail of an interrupted append (cmf/append.h). Returns one human-readable line
  /// per problem (e.g. "tensor 'x': hash mismatch (stored …, actual …)"); empty = OK. `progress` receives
  /// hashed byte counts (total = verify_total_bytes()). Never throws for content problems.
  std::vector<std::string> verify(const ProgressFn& progress = {}) const;
  /// The cheap part of verify(), for every open that runs a model (run, ppl, bench, serve): in
  /// every file, the header and directory hashes of the envelope (when stored ≠ 0) and the masks,
  /// vocab and index hashes of header.section_hashes are checked against the bytes; tensor payloads
  /// are not read (that is verify() / `--check-tensors`). Throws Error(HashMismatch) naming the
  /// file and each mismatching section ("section 'header': hash mismatch (stored …, actual …)"),
  /// or Error(Parse) when the first problem is a malformed stored hash.
  void check_sections() const;
  /// Bytes verify() hashes (for a progress bar).
  uint64_t verify_total_bytes() const noexcept;

 private:
  struct Impl;
  explicit Reader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// If `path`'s file name is `{stem}-{no:05}-of-{count:05}.cmf`, returns {stem path, no, count}.
struct ShardName {
  std::string stem;  ///< path without the "-NNNNN-of-NNNNN.cmf" suffix
  uint32_t no = 0, count = 0;
};
std::optional<ShardName> parse_shard_name(std::string_view path);
/// `{stem}-{no:05}-of-{count:05}.cmf`.
std::string shard_file_name(std::string_view stem, uint32_t no, uint32_t count);

}  // namespace cortiq::cmf
