// Reading Hugging Face safetensors checkpoints (single file or sharded through
// `model.safetensors.index.json`), memory-mapped, with the full header validation of the
// safetensors format (huggingface/safetensors `tensor.rs::validate`; PITFALLS CTR-5, CTR-6).
//
// File layout: [u64 LE header_len][header JSON, header_len bytes][data section]. The header is an
// object `{name: {"dtype": str, "shape": [u64...], "data_offsets": [begin, end]}, ...}` plus an
// optional `__metadata__` (string map, ignored). Offsets are relative to the data section.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/mmap_file.h"

namespace cortiq::convert {

/// Element types of the safetensors format. All are validated (size × shape = byte length);
/// `to_f32` converts F64, F32, F16, BF16, I64, I32, I16, I8, U8 (BOOL, U16/U32/U64 and the F8
/// types are refused by `to_f32` as Unsupported, naming the tensor).
enum class StDType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, U16, U32, U64, F8_E4M3, F8_E5M2 };

/// The safetensors spelling, e.g. "BF16".
std::string_view st_dtype_name(StDType t) noexcept;
/// Size of one element in bytes.
size_t st_dtype_size(StDType t) noexcept;

/// One tensor of a mapped safetensors file. `data` points into the mapping (valid while the
/// owning SafetensorsFile lives) and has exactly numel·dtype_size bytes.
struct StTensor {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<uint64_t> shape;  ///< row-major, outer → inner (HF `[out, in]` for linear weights)
  uint64_t numel = 0;           ///< Π shape (1 for a 0-d scalar)
  std::span<const uint8_t> data;
  std::string file;  ///< path of the file holding it (for messages)
};

/// One mapped `.safetensors` file. The constructor validates the whole header:
/// header_len ≥ 2, ≤ 100 MiB and within the file; the header is a JSON object; each entry has
/// a known dtype, a shape of positive integers (a negative or zero dimension is Error(Parse);
/// checked product), `data_offsets` of two
/// non-negative integers with begin ≤ end and (end − begin) == numel × dtype size; sorted by
/// offset the ranges tile the data section exactly (first begins at 0, each begins where the
/// previous ended, the last ends at the end of the file — no overlap, no hole, no tail).
/// Throws Error(Io) if the file cannot be mapped, Error(Parse) for malformed JSON / fields /
/// unknown dtype, Error(Bounds) for ranges; every message names the file and the tensor.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  /// Tensors in ascending data offset order.
  const std::vector<StTensor>& tensors() const noexcept { return tensors_; }
  const std::string& path() const noexcept { return file_.path(); }
  /// Size of the mapped file in bytes.
  size_t file_size() const noexcept { return file_.size(); }
  /// Hints the kernel that the pages fully inside `bytes` (a span of this mapping) will not be
  /// needed again (MADV_DONTNEED), so converting a large model does not keep its input resident.
  void release(std::span<const uint8_t> bytes) const noexcept;

 private:
  MappedFile file_;
  std::vector<StTensor> tensors_;
};

/// A whole checkpoint directory: `model.safetensors.index.json` (its `weight_map` names the
/// shard of every tensor; each shard must contain exactly the tensors mapped to it), else
/// `model.safetensors`, else every `*.safetensors` in the directory (sorted by name).
/// Duplicate tensor names across files are a Parse error. Throws Error(Io) when the directory
/// has no safetensors file.
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& dir);
  /// All tensors, ordered by (file index, offset) — the source order used for streaming.
  const std::vector<const StTensor*>& tensors() const noexcept { return order_; }
  /// The tensor named `name`, or nullptr.
  const StTensor* find(std::string_view name) const;
  /// Sum of the tensors' data bytes.
  uint64_t total_bytes() const noexcept { return total_bytes_; }
  /// Releases the pages of `t` (see SafetensorsFile::release).
  void release(const StTensor& t) const noexcept;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const noexcept { return files_; }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<const StTensor*> order_;
  std::map<std::string, std::pair<const StTensor*, size_t>, std::less<>> by_name_;
  uint64_t total_bytes_ = 0;
};

/// Converts the tensor's elements to f32 into `out` (size must equal numel): floats exactly
/// (f16 subnormals exact, bf16 by bit placement; F64 rounded to nearest), integers by value
/// conversion. Throws Error(Unsupported) naming the tensor for dtypes with no float meaning
/// (BOOL, U16/U32/U64, F8), Error(InvalidArgument) if `out` has the wrong size.
void to_f32(const StTensor& t, std::span<float> out);
/// Same, returning a new vector.
std::vector<float> to_f32(const StTensor& t);

/// Parses safetensors bytes already in memory (used by tests and by SafetensorsFile). Returns
/// tensors whose `data` spans point into `bytes`. Same validation and errors as SafetensorsFile.
std::vector<StTensor> parse_safetensors(std::span<const uint8_t> bytes, const std::string& file_label);

}  // namespace cortiq::convert
