// Writing safetensors files (the layout safetensors.h reads): [u64 LE header_len][header JSON]
// [data], tensors in the order given, F32 data, each range 8-byte aligned by padding the header
// with spaces (as huggingface/safetensors does). The trainer's checkpoints and its HF output use it.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace cortiq::convert {

/// One f32 tensor to write: its name, shape (row-major) and values (Π shape of them).
struct StF32 {
  std::string name;
  std::vector<uint64_t> shape;
  std::span<const float> values;
};

/// Writes `tensors` as one safetensors file at `path` through a temporary renamed into place
/// (nothing is left under `path` or beside it on error), with `metadata` as `__metadata__` (omitted
/// when empty). Throws Error(InvalidArgument) for a duplicate name or values.size() != Π shape,
/// Error(Io) when the file cannot be written.
void write_safetensors_f32(const std::string& path, const std::vector<StF32>& tensors,
                           const std::map<std::string, std::string>& metadata = {});

}  // namespace cortiq::convert
