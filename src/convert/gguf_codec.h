// ggml tensor encodings for GGUF export and import: ggml's reference quantizers for Q8_0 and Q4_0
// (ggml-quants.c `quantize_row_q8_0_ref`, `quantize_row_q4_0_ref`), and the exact transcodes
// between CMF codecs and ggml blocks where the two hold the same numbers:
//   q8_row (per-row f16 scale, i8 values)          → Q8_0 (block of 32: f16 d, i8 qs[32]): d = the
//                                                     row's scale, qs = the row's values;
//   q4_block / q4_tiled (per 32-group f16 scale,   ↔ Q4_0 (block of 32: f16 d, u8 qs[16], element j in
//     element 2k / 2k+1 in byte k low / high)        qs[j] low for j < 16, qs[j−16] high): same d, same
//     nibbles;
//   f32 / f16 / bf16                               ↔ F32 / F16 / BF16 byte for byte (and f16/bf16 → F32).
// Each needs the rows to be whole blocks (cols % 32 == 0), which ggml requires of Q8_0/Q4_0 anyway.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "convert/gguf.h"
#include "quant/dtype.h"

namespace cortiq::convert {

/// Encodes row-major f32 `v` ([rows, cols], cols = the last dimension) as ggml `type` (F32, F16,
/// BF16, Q8_0, Q4_0) with ggml's reference rounding. Throws Error(Unsupported) for another type,
/// Error(InvalidArgument) for Q8_0/Q4_0 when cols % 32 != 0.
std::vector<uint8_t> ggml_encode(GgmlType type, std::span<const float> v, uint64_t cols);

/// The ggml `type` bytes holding exactly the values of CMF tensor (dtype `d`, `shape`, `payload`),
/// or nullopt when `type` cannot hold them without rounding (see the file comment for the pairs).
std::optional<std::vector<uint8_t>> ggml_exact_from_cmf(GgmlType type, quant::DType d,
                                                        std::span<const uint64_t> shape,
                                                        std::span<const uint8_t> payload);

/// The CMF `d` payload holding exactly the values of GGUF tensor `t` (F32/F16/BF16 → the same
/// float dtype, Q4_0 → q4_block), or nullopt for any other pair.
std::optional<std::vector<uint8_t>> cmf_exact_from_ggml(quant::DType d, const GgufTensor& t);

/// Reorders the rows of a row-major tensor's bytes: out row i = in row perm[i]; every row is
/// bytes.size() / perm.size() bytes (any ggml type whose rows are whole blocks).
std::vector<uint8_t> permute_rows(std::span<const uint8_t> bytes, std::span<const uint64_t> perm);

/// llama.cpp's LlamaModel.permute as a row order: GGUF row h·hd + 2j + i is HF row h·hd + i·hd/2 + j.
std::vector<uint64_t> llama_qk_permutation(uint64_t rows, uint32_t heads);

}  // namespace cortiq::convert
