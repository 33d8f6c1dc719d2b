// Writing GGUF v3 files (llama.cpp's format; the layout is the one gguf.h reads): metadata in the
// order added, a tensor table, then each tensor's bytes at an offset aligned to 32 (the default
// `general.alignment`, which is therefore not written). Tensor data is produced one tensor at a
// time by a callback, so a multi-GB export never holds more than one tensor in memory. The file
// goes through util/atomic_file.h: on any error nothing is left under the output name.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cortiq::convert {

/// GGUF metadata value types (gguf.h file comment).
enum class GgufValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12
};

/// One metadata entry: a scalar (`type`, `value`) or, with type Array, an array of `elem` values.
struct GgufKv {
  std::string key;
  GgufValueType type = GgufValueType::U32;
  GgufValueType elem = GgufValueType::U32;
  nlohmann::json value;
};

/// One GGUF file being assembled.
class GgufWriter {
 public:
  /// add or add_array by `kv.type`.
  void add(const GgufKv& kv);
  /// A scalar key: `value` a JSON number/bool/string of that type. Throws Error(InvalidArgument)
  /// for a duplicate key or a value that does not fit the type.
  void add(const std::string& key, GgufValueType type, const nlohmann::json& value);
  /// An array key of scalars of `elem` type (not nested).
  void add_array(const std::string& key, GgufValueType elem, const nlohmann::json& values);
  /// Whether `key` was added.
  bool has(const std::string& key) const;
  /// Declares a tensor: row-major `shape` ([rows, cols]; ne = shape reversed), ggml `type`,
  /// `bytes` the exact size of its data. Throws Error(InvalidArgument) for a duplicate name.
  void add_tensor(const std::string& name, const std::vector<uint64_t>& shape, uint32_t type, uint64_t bytes);
  size_t num_tensors() const noexcept { return tensors_.size(); }

  /// Writes the file: `produce(i)` returns tensor i's bytes (exactly the declared size, else
  /// Error(Internal)). Atomic (temp + rename); throws Error(Io) naming the path on write failure.
  /// Returns the file size in bytes.
  uint64_t write(const std::string& path, const std::function<std::vector<uint8_t>(size_t)>& produce) const;

 private:
  struct Kv {
    std::string key;
    GgufValueType type;
    GgufValueType elem;
    nlohmann::json value;
  };
  struct T {
    std::string name;
    std::vector<uint64_t> shape;
    uint32_t type;
    uint64_t bytes;
  };
  std::vector<Kv> kvs_;
  std::vector<T> tensors_;
};

}  // namespace cortiq::convert
