// CMF v2 masks section: task masks as packed bit fields (spec §5, §5.1; FORMAT-NOTES §1.11).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cmf/header.h"

namespace cortiq::cmf {

/// A [rows, cols] bit matrix stored exactly as on disk: each row is ceil(cols/8) bytes, bit c of a
/// row = bit c%8 of byte c/8 (LSB-first), 1 = active. Tail bits past `cols` are always zero.
class BitRows {
 public:
  BitRows() = default;
  /// rows × cols bits, all set to `value`.
  BitRows(uint32_t rows, uint32_t cols, bool value = false);
  uint32_t rows() const noexcept { return rows_; }
  uint32_t cols() const noexcept { return cols_; }
  /// ceil(cols/8).
  size_t row_bytes() const noexcept { return (static_cast<size_t>(cols_) + 7) / 8; }
  bool get(uint32_t r, uint32_t c) const noexcept {
    return (bytes_[r * row_bytes() + c / 8] >> (c % 8)) & 1u;
  }
  void set(uint32_t r, uint32_t c, bool v) noexcept;
  /// Packed bytes of row r, [row_bytes()].
  std::span<const uint8_t> row(uint32_t r) const noexcept {
    return {bytes_.data() + r * row_bytes(), row_bytes()};
  }
  /// All packed bytes, [rows × row_bytes].
  std::span<const uint8_t> bytes() const noexcept { return bytes_; }
  /// Number of set bits in row r.
  uint32_t count_row(uint32_t r) const noexcept;
  /// Number of set bits overall.
  uint64_t count() const noexcept;
  /// Builds from packed bytes ([rows × ceil(cols/8)]); throws Error(Parse) if a tail bit is set,
  /// naming `what` and the row.
  static BitRows from_packed(uint32_t rows, uint32_t cols, std::span<const uint8_t> packed,
                             std::string_view what);
  bool operator==(const BitRows&) const = default;

 private:
  uint32_t rows_ = 0, cols_ = 0;
  std::vector<uint8_t> bytes_;
};

/// `masks[].priority`: "Fallback" | "Normal" | "Primary".
enum class MaskPriority : uint8_t { Fallback, Normal, Primary };
std::string_view mask_priority_name(MaskPriority p) noexcept;

/// One task mask (spec §5.1 meta + blob).
struct TaskMask {
  uint32_t task_id = 0;
  std::string name;
  std::optional<std::string> description;
  float sparsity = 0.0f;
  nlohmann::json quality;  ///< null = not measured (writers must not invent it)
  std::optional<std::string> parent;
  MaskPriority priority = MaskPriority::Normal;
  bool has_hot_pack = false;
  /// FFN neurons: [num_layers, intermediate_size] (legacy layout) or
  /// [num_layers × num_loops, intermediate_size] (LOOP_MASKS layout, pass-major: row = pass·L + layer).
  BitRows ffn;
  /// Attention heads: [num_layers, num_attention_heads].
  BitRows heads;
  /// Layer gates: [1, num_layers] (bit l = physical layer l alive).
  BitRows layer_gates;
  /// Routable experts: [num_layers, moe.num_experts]; present iff has_expert_fields.
  std::optional<BitRows> experts;
  /// Unknown meta keys, written back verbatim.
  nlohmann::json extra = nlohmann::json::object();

  /// FFN row for (pass, physical layer): legacy masks replicate their rows to every pass.
  std::span<const uint8_t> ffn_row(uint32_t pass, uint32_t layer, uint32_t num_layers) const noexcept;
  bool gate(uint32_t layer) const noexcept { return layer_gates.get(0, layer); }
};

/// The decoded masks section.
struct MaskCatalog {
  std::string default_task;
  std::vector<TaskMask> masks;
  nlohmann::json extra = nlohmann::json::object();
  /// The mask named `name`, or nullptr.
  const TaskMask* find(std::string_view name) const noexcept;
};

/// A mask with every bit active and the shapes `arch` implies (legacy layout; experts when MoE and
/// `with_experts`).
TaskMask make_full_mask(const ModelArch& arch, std::string name, uint32_t task_id, bool with_experts = false);

/// make_full_mask with round(keep · intermediate_size) FFN neurons kept per layer, chosen uniformly
/// at random (std::mt19937_64 from `seed`, a partial Fisher–Yates shuffle per layer); heads, layer
/// gates and experts stay open; `sparsity` = 1 − kept/all. The random baseline a found mask is
/// compared with, and the fixture of `cortiq bench --task`. Throws Error(InvalidArgument) for keep
/// outside [0, 1].
TaskMask make_random_ffn_mask(const ModelArch& arch, std::string name, uint32_t task_id, double keep,
                              uint64_t seed);

/// Decodes the masks section bytes against the arch (FORMAT-NOTES §1.11): n_masks == meta length,
/// blob_off ≡ 0 mod 8 and inside the section, blob_len one of legacy/loop × with/without experts,
/// expert fields only on a MoE arch, tail bits zero. Throws Error(Parse|Bounds) naming the mask.
MaskCatalog decode_masks(std::span<const uint8_t> section, const ModelArch& arch);

/// Encodes a catalog (meta iterated until its length is stable, blobs 8-aligned, zero fill).
/// Throws Error(InvalidArgument) if a mask's bit shapes disagree with `arch`.
std::vector<uint8_t> encode_masks(const MaskCatalog& cat, const ModelArch& arch);

/// Whether any mask uses the per-visit (LOOP_MASKS) FFN layout.
bool masks_use_loop_layout(const MaskCatalog& cat, const ModelArch& arch) noexcept;

}  // namespace cortiq::cmf
