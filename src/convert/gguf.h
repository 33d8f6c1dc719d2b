// Reading llama.cpp GGUF files (versions 2 and 3), memory-mapped, with full validation of the
// header, the metadata and the tensor table against a possibly hostile file, and dequantization of
// the common ggml tensor types to f32.
//
// File layout (all little-endian; llama.cpp `ggml/src/gguf.cpp`, docs/gguf.md):
//   "GGUF" magic, u32 version, u64 tensor_count, u64 metadata_kv_count,
//   metadata_kv_count × { string key, u32 value_type, value },
//   tensor_count × { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset },
//   padding up to the next multiple of `general.alignment` (default 32), then the tensor data.
// A string is a u64 byte length followed by that many bytes (no terminator). Value types: 0 u8,
// 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array (u32 element type, u64 count,
// elements), 10 u64, 11 i64, 12 f64. Tensor offsets are relative to the data start and multiples of
// the alignment.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/mmap_file.h"

namespace cortiq::convert {

/// ggml tensor types (the `ggml_type` enum values of ggml.h) that this API names; gguf_to_f32
/// dequantizes all of them except Q8_1 (ggml itself has no dequantizer for it). A GgufTensor's
/// `type` is a raw u32 because files may hold other ggml types (IQ*, TQ*, I8..I64, F64, MXFP4),
/// which the reader sizes and names but cannot dequantize.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  BF16 = 30
};

/// ggml's spelling of a type, e.g. "F32", "Q4_K", "IQ2_XS"; "type N" for a value ggml does not
/// define (e.g. "type 4", "type 99"). Every type the reader can size has a name.
std::string ggml_type_name(uint32_t type);

/// Block geometry of a ggml type: `block_elems` values are stored in `block_bytes` bytes
/// (1 and the element size for F32/F16/BF16/I8..I64/F64). Returns false for a type whose layout
/// is unknown (the file is then refused). Sizes are those of ggml.c `type_traits`.
bool ggml_block_geometry(uint32_t type, uint64_t& block_elems, uint64_t& block_bytes) noexcept;

/// One tensor of a GGUF file.
struct GgufTensor {
  std::string name;
  std::vector<uint64_t> ne;       ///< dims as stored: ne[0] varies fastest (the columns)
  std::vector<uint64_t> shape;    ///< row-major shape = ne reversed ([rows, cols] for a matrix)
  uint32_t type = 0;              ///< GgmlType value (or another ggml type)
  uint64_t numel = 0;             ///< Π ne
  uint64_t offset = 0;            ///< byte offset of the data, relative to the data section start
  std::span<const uint8_t> data;  ///< exactly this tensor's bytes inside the mapping
};

/// One mapped GGUF file (v2 or v3), validated entirely at construction:
/// - magic "GGUF" (else Error(InvalidMagic) quoting the 4 bytes), version 2 or 3 (else
///   Error(UnsupportedVersion); v1 used u32 counts and is not read);
/// - every read is bounds-checked: a file that ends inside the header, a key, a value, the tensor
///   table, or before the end of a tensor's data is Error(Bounds) naming the offset and the key or
///   tensor;
/// - Error(Parse) for: an unknown metadata value type, a duplicate key, counts of keys, tensors or
///   array elements larger than the rest of the file could hold, arrays nested more than 16 deep,
///   a `general.alignment` that is not a power of two or not stored as u32 (llama.cpp reads only
///   u32), n_dims 0 or > 4, a dimension 0 or ≥ 2^63 (negative as int64) or an element count
///   overflowing, an unknown ggml type, a row (ne[0]) that is
///   not a whole number of the type's blocks, duplicate tensor names;
/// - Error(Bounds) for a tensor offset that is not a multiple of the alignment, data past the end
///   of the file, or two tensors whose bytes overlap.
/// Error(Io) if the file cannot be opened or mapped. String contents are not checked for UTF-8
/// (nlohmann::json::dump() may then throw; keys and values are kept byte for byte).
class GgufFile {
 public:
  /// mmaps and validates the whole file.
  explicit GgufFile(const std::string& path);
  /// 2 or 3.
  uint32_t version() const noexcept { return version_; }
  /// Every metadata key → value, in a plain (key-sorted) nlohmann::json object: u8..i64 as JSON
  /// integers (unsigned types as number_unsigned, signed as number_integer), f32/f64 as JSON floats
  /// (the f32 value widened exactly to double), bool, string, arrays as JSON arrays (nested arrays
  /// allowed). The file's key order is in `metadata_keys()`; value types in `metadata_type()`.
  const nlohmann::json& metadata() const noexcept { return metadata_; }
  /// Metadata keys in file order.
  const std::vector<std::string>& metadata_keys() const noexcept { return keys_; }
  /// The GGUF value type (0..12, see the file comment) of a key, or -1 if absent. For arrays it is
  /// 9; `metadata_array_type` gives the element type.
  int metadata_type(std::string_view key) const noexcept;
  /// Element type of an array-valued key, or -1 if absent or not an array.
  int metadata_array_type(std::string_view key) const noexcept;
  /// Tensors in file (table) order.
  const std::vector<GgufTensor>& tensors() const noexcept { return tensors_; }
  /// The tensor named `name`, or nullptr.
  const GgufTensor* find(std::string_view name) const noexcept;
  /// `general.alignment`, default 32.
  uint64_t alignment() const noexcept { return alignment_; }
  /// Absolute byte offset of the data section (first multiple of the alignment after the table).
  uint64_t data_offset() const noexcept { return data_offset_; }
  /// Sum of the tensors' data bytes.
  uint64_t total_tensor_bytes() const noexcept { return total_bytes_; }
  const std::string& path() const noexcept { return file_.path(); }
  /// Size of the mapped file in bytes.
  size_t file_size() const noexcept { return file_.size(); }
  /// Hints the kernel that the pages lying wholly inside `t`'s bytes (a tensor of this file) will
  /// not be needed again (madvise MADV_DONTNEED), as SafetensorsFile::release does.
  void release(const GgufTensor& t) const noexcept;

 private:
  MappedFile file_;
  uint32_t version_ = 0;
  nlohmann::json metadata_ = nlohmann::json::object();
  std::vector<std::string> keys_;
  std::map<std::string, std::pair<int, int>, std::less<>> types_;  // key -> (type, array elem type)
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  uint64_t total_bytes_ = 0;
};

/// Dequantizes `t` to f32 into `out` (out.size() == t.numel), values in row-major order (the
/// storage order: ne[0] fastest). Formulas are ggml's reference ones (ggml-quants.c
/// `dequantize_row_q4_0`, `_q4_1`, `_q5_0`, `_q5_1`, `_q8_0`, `_q2_K`, `_q3_K`, `_q4_K`, `_q5_K`,
/// `_q6_K`, `_q8_K`), with the same float operation order; F16 is exact, BF16 by bit placement, F32
/// copied. Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
/// Q8_K. Throws Error(Unsupported) naming the tensor and the type for any other type (Q8_1, the IQ
/// and TQ types, integer types, ...), Error(InvalidArgument) if `out` has the wrong size, and
/// Error(Bounds) if `t.data` does not hold exactly the bytes numel values of that type take.
void gguf_to_f32(const GgufTensor& t, std::span<float> out);
/// Same, returning a new vector.
std::vector<float> gguf_to_f32(const GgufTensor& t);

}  // namespace cortiq::convert
