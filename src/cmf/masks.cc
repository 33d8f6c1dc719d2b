// Masks section encode/decode (spec §5, FORMAT-NOTES §1.11).
#include "cmf/masks.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>

#include "cmf/json_util.h"
#include "util/error.h"
#include "util/half.h"

namespace cortiq::cmf {

using detail::json;
using detail::Obj;

namespace {

constexpr std::array<std::string_view, 3> kPriorities = {"Fallback", "Normal", "Primary"};

uint64_t mul_checked(uint64_t a, uint64_t b, std::string_view what) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) fail(ErrorKind::Bounds, "masks: {} size overflows u64", what);
  return r;
}
uint64_t add_checked(uint64_t a, uint64_t b, std::string_view what) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) fail(ErrorKind::Bounds, "masks: {} size overflows u64", what);
  return r;
}

/// Byte sizes of the blob parts for an arch.
struct BlobSizes {
  uint64_t ffn_legacy, ffn_loop, heads, gates, experts;
  uint64_t legacy() const { return ffn_legacy + heads + gates; }
  uint64_t loop() const { return ffn_loop + heads + gates; }
};

BlobSizes blob_sizes(const ModelArch& a) {
  const uint64_t L = a.num_layers;
  BlobSizes s{};
  s.ffn_legacy = mul_checked(L, (uint64_t{a.intermediate_size} + 7) / 8, "ffn");
  s.ffn_loop = mul_checked(s.ffn_legacy, std::max<uint64_t>(a.num_loops, 1), "ffn (loops)");
  s.heads = mul_checked(L, (uint64_t{a.num_attention_heads} + 7) / 8, "heads");
  s.gates = (L + 7) / 8;
  s.experts = a.moe ? mul_checked(L, (uint64_t{a.moe->num_experts} + 7) / 8, "experts") : 0;
  add_checked(add_checked(s.ffn_loop, s.heads, "blob"), add_checked(s.gates, s.experts, "blob"), "blob");
  return s;
}

uint32_t get_u32(std::span<const uint8_t> b, size_t off) {
  uint32_t v;
  std::memcpy(&v, b.data() + off, 4);
  return v;  // little-endian host (checked in reader.cc)
}

}  // namespace

// ---------------------------------------------------------------- BitRows

BitRows::BitRows(uint32_t rows, uint32_t cols, bool value) : rows_(rows), cols_(cols) {
  bytes_.assign(static_cast<size_t>(rows) * row_bytes(), value ? 0xFF : 0x00);
  if (value && cols % 8 != 0) {
    const uint8_t keep = static_cast<uint8_t>((1u << (cols % 8)) - 1u);
    for (uint32_t r = 0; r < rows; ++r) bytes_[r * row_bytes() + row_bytes() - 1] = keep;
  }
}

void BitRows::set(uint32_t r, uint32_t c, bool v) noexcept {
  uint8_t& b = bytes_[r * row_bytes() + c / 8];
  const uint8_t m = static_cast<uint8_t>(1u << (c % 8));
  b = v ? static_cast<uint8_t>(b | m) : static_cast<uint8_t>(b & ~m);
}

uint32_t BitRows::count_row(uint32_t r) const noexcept {
  uint32_t n = 0;
  for (uint8_t b : row(r)) n += static_cast<uint32_t>(std::popcount(b));
  return n;
}

uint64_t BitRows::count() const noexcept {
  uint64_t n = 0;
  for (uint8_t b : bytes_) n += static_cast<uint64_t>(std::popcount(b));
  return n;
}

BitRows BitRows::from_packed(uint32_t rows, uint32_t cols, std::span<const uint8_t> packed,
                             std::string_view what) {
  BitRows b;
  b.rows_ = rows;
  b.cols_ = cols;
  const size_t rb = b.row_bytes();
  if (packed.size() != static_cast<size_t>(rows) * rb)
    fail(ErrorKind::Parse, "{}: {} bytes, expected {} rows × {} bytes", what, packed.size(), rows, rb);
  b.bytes_.assign(packed.begin(), packed.end());
  if (cols % 8 != 0) {
    const uint8_t tail = static_cast<uint8_t>(~((1u << (cols % 8)) - 1u));
    for (uint32_t r = 0; r < rows; ++r)
      if (b.bytes_[r * rb + rb - 1] & tail)
        fail(ErrorKind::Parse, "{}: row {} has tail bits set past dimension {}", what, r, cols);
  }
  return b;
}

std::string_view mask_priority_name(MaskPriority p) noexcept {
  return kPriorities[static_cast<size_t>(p)];
}

std::span<const uint8_t> TaskMask::ffn_row(uint32_t pass, uint32_t layer,
                                           uint32_t num_layers) const noexcept {
  const uint32_t r = ffn.rows() > num_layers ? pass * num_layers + layer : layer;
  return ffn.row(r);
}

const TaskMask* MaskCatalog::find(std::string_view name) const noexcept {
  for (const auto& m : masks)
    if (m.name == name) return &m;
  return nullptr;
}

TaskMask make_full_mask(const ModelArch& arch, std::string name, uint32_t task_id, bool with_experts) {
  TaskMask m;
  m.task_id = task_id;
  m.name = std::move(name);
  m.quality = nullptr;
  m.ffn = BitRows(arch.num_layers, arch.intermediate_size, true);
  m.heads = BitRows(arch.num_layers, arch.num_attention_heads, true);
  m.layer_gates = BitRows(1, arch.num_layers, true);
  if (with_experts && arch.moe) m.experts = BitRows(arch.num_layers, arch.moe->num_experts, true);
  return m;
}

TaskMask make_random_ffn_mask(const ModelArch& arch, std::string name, uint32_t task_id, double keep,
                              uint64_t seed) {
  if (!(keep >= 0.0 && keep <= 1.0))
    fail(ErrorKind::InvalidArgument, "mask '{}': keep fraction {} is outside [0, 1]", name, keep);
  TaskMask m = make_full_mask(arch, std::move(name), task_id);
  const uint32_t W = arch.intermediate_size;
  const auto k = static_cast<uint32_t>(std::llround(keep * W));
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> ids(W);
  for (uint32_t l = 0; l < arch.num_layers; ++l) {
    std::iota(ids.begin(), ids.end(), 0u);
    for (uint32_t i = 0; i < k; ++i) {
      std::uniform_int_distribution<uint32_t> pick(i, W - 1);
      std::swap(ids[i], ids[pick(rng)]);
    }
    for (uint32_t i = k; i < W; ++i) m.ffn.set(l, ids[i], false);
  }
  m.sparsity = W ? 1.0f - static_cast<float>(k) / static_cast<float>(W) : 0.0f;
  return m;
}

bool masks_use_loop_layout(const MaskCatalog& cat, const ModelArch& arch) noexcept {
  if (arch.num_loops <= 1) return false;
  for (const auto& m : cat.masks)
    if (m.ffn.rows() != arch.num_layers) return true;
  return false;
}

// ---------------------------------------------------------------- decode

MaskCatalog decode_masks(std::span<const uint8_t> sec, const ModelArch& arch) {
  if (sec.size() < 8) fail(ErrorKind::Parse, "masks: section is {} bytes, need at least 8", sec.size());
  const uint32_t n_masks = get_u32(sec, 0);
  const uint64_t meta_len = get_u32(sec, 4);
  if (8 + meta_len > sec.size())
    fail(ErrorKind::Bounds, "masks: meta_len {} exceeds section length {}", meta_len, sec.size());
  const auto* mp = reinterpret_cast<const char*>(sec.data() + 8);
  json meta = json::parse(mp, mp + meta_len, nullptr, false);
  if (meta.is_discarded())
    fail(ErrorKind::Parse, "masks: meta is not valid JSON ({} bytes at section offset 8)", meta_len);
  Obj o(meta, "masks.meta");
  MaskCatalog cat;
  cat.default_task = o.req_str("default_task");
  const json& arr = o.req("masks");
  if (!arr.is_array()) fail(ErrorKind::Parse, "masks.meta.masks: expected an array");
  cat.extra = o.rest();
  if (arr.size() != n_masks)
    fail(ErrorKind::Parse, "masks: n_masks {} != meta array length {}", n_masks, arr.size());
  if (arch.num_loops == 0) fail(ErrorKind::Parse, "masks: arch.num_loops is 0");
  const BlobSizes sz = blob_sizes(arch);
  std::set<std::string> names;
  for (size_t i = 0; i < arr.size(); ++i) {
    Obj m(arr[i], fmt::format("masks.meta.masks[{}]", i));
    TaskMask t;
    t.task_id = m.req_u32("task_id");
    t.name = m.req_str("name");
    if (!names.insert(t.name).second) fail(ErrorKind::Parse, "masks: duplicate mask name '{}'", t.name);
    t.description = m.opt_str("description");
    t.sparsity = static_cast<float>(m.req_f64("sparsity"));
    if (auto* q = m.get("quality")) t.quality = *q;
    t.parent = m.opt_str("parent");
    {
      std::string p = m.req_str("priority");
      bool ok = false;
      for (size_t k = 0; k < kPriorities.size(); ++k)
        if (kPriorities[k] == p) t.priority = static_cast<MaskPriority>(k), ok = true;
      if (!ok) fail(ErrorKind::Parse, "{}: unknown priority \"{}\"", m.key_path("priority"), p);
    }
    t.has_hot_pack = m.bool_or("has_hot_pack", false);
    const bool has_exp = m.bool_or("has_expert_fields", false);
    const uint64_t off = m.req_u64("blob_off"), len = m.req_u64("blob_len");
    t.extra = m.rest();
    const std::string what = fmt::format("mask '{}'", t.name);
    if (off % 8 != 0) fail(ErrorKind::Parse, "{}: blob_off {} is not a multiple of 8", what, off);
    if (off < 8 + meta_len || off > sec.size() || len > sec.size() - off)
      fail(ErrorKind::Bounds, "{}: blob [{}, +{}) outside the section (meta ends at {}, length {})", what,
           off, len, 8 + meta_len, sec.size());
    if (has_exp && !arch.moe) fail(ErrorKind::Parse, "{}: expert fields on a non-MoE arch", what);
    const uint64_t exp = has_exp ? sz.experts : 0;
    bool loop;
    if (len == sz.legacy() + exp)
      loop = false;
    else if (len == sz.loop() + exp)
      loop = true;
    else
      fail(ErrorKind::Parse, "{}: blob_len {} matches neither the legacy ({}) nor the loop ({}) layout{}",
           what, len, sz.legacy() + exp, sz.loop() + exp, has_exp ? " with expert fields" : "");
    if (loop && uint64_t{arch.num_layers} * arch.num_loops > UINT32_MAX)
      fail(ErrorKind::Parse, "{}: num_layers × num_loops overflows u32", what);
    auto blob = sec.subspan(off, len);
    const uint64_t ffn_len = loop ? sz.ffn_loop : sz.ffn_legacy;
    const uint32_t ffn_rows = loop ? arch.num_layers * arch.num_loops : arch.num_layers;
    t.ffn = BitRows::from_packed(ffn_rows, arch.intermediate_size, blob.subspan(0, ffn_len), what + " ffn");
    t.heads = BitRows::from_packed(arch.num_layers, arch.num_attention_heads, blob.subspan(ffn_len, sz.heads),
                                   what + " heads");
    t.layer_gates =
        BitRows::from_packed(1, arch.num_layers, blob.subspan(ffn_len + sz.heads, sz.gates), what + " gates");
    if (has_exp)
      t.experts =
          BitRows::from_packed(arch.num_layers, arch.moe->num_experts,
                               blob.subspan(ffn_len + sz.heads + sz.gates, sz.experts), what + " experts");
    cat.masks.push_back(std::move(t));
  }
  return cat;
}

// ---------------------------------------------------------------- encode

std::vector<uint8_t> encode_masks(const MaskCatalog& cat, const ModelArch& arch) {
  const BlobSizes sz = blob_sizes(arch);
  std::vector<uint64_t> lens;
  for (const auto& m : cat.masks) {
    auto bad = [&](std::string_view part) {
      fail(ErrorKind::InvalidArgument, "mask '{}': {} shape does not match the arch", m.name, part);
    };
    const bool loop_rows = arch.num_loops > 1 && m.ffn.rows() == arch.num_layers * arch.num_loops;
    if (m.ffn.cols() != arch.intermediate_size || (m.ffn.rows() != arch.num_layers && !loop_rows)) bad("ffn");
    if (m.heads.rows() != arch.num_layers || m.heads.cols() != arch.num_attention_heads) bad("heads");
    if (m.layer_gates.rows() != 1 || m.layer_gates.cols() != arch.num_layers) bad("layer_gates");
    if (m.experts &&
        (!arch.moe || m.experts->rows() != arch.num_layers || m.experts->cols() != arch.moe->num_experts))
      bad("experts");
    lens.push_back((loop_rows ? sz.loop() : sz.legacy()) + (m.experts ? sz.experts : 0));
  }
  auto build_meta = [&](uint64_t meta_len, std::vector<uint64_t>& offs) {
    json arr = json::array();
    uint64_t pos = (8 + meta_len + 7) / 8 * 8;
    offs.clear();
    for (size_t i = 0; i < cat.masks.size(); ++i) {
      const auto& m = cat.masks[i];
      json j = json::object();
      j["task_id"] = m.task_id;
      j["name"] = m.name;
      j["description"] = m.description ? json(*m.description) : json(nullptr);
      j["sparsity"] = m.sparsity;
      j["quality"] = m.quality;
      j["parent"] = m.parent ? json(*m.parent) : json(nullptr);
      j["priority"] = std::string(mask_priority_name(m.priority));
      j["has_hot_pack"] = m.has_hot_pack;
      j["has_expert_fields"] = m.experts.has_value();
      j["blob_off"] = pos;
      j["blob_len"] = lens[i];
      detail::merge_extra(j, m.extra);
      offs.push_back(pos);
      pos = (pos + lens[i] + 7) / 8 * 8;
      arr.push_back(std::move(j));
    }
    json meta = {{"default_task", cat.default_task}, {"masks", std::move(arr)}};
    detail::merge_extra(meta, cat.extra);
    return meta.dump();
  };
  std::vector<uint64_t> offs;
  uint64_t meta_len = 0;
  std::string meta;
  for (int iter = 0; iter < 64; ++iter) {
    meta = build_meta(meta_len, offs);
    if (meta.size() == meta_len) break;
    meta_len = meta.size();
  }
  if (meta.size() != meta_len) fail(ErrorKind::InvalidArgument, "masks: meta length did not converge");
  if (meta_len > UINT32_MAX) fail(ErrorKind::InvalidArgument, "masks: meta too large");
  std::vector<uint8_t> out(8 + meta_len, 0);
  const uint32_t n = static_cast<uint32_t>(cat.masks.size()), ml = static_cast<uint32_t>(meta_len);
  std::memcpy(out.data(), &n, 4);
  std::memcpy(out.data() + 4, &ml, 4);
  std::memcpy(out.data() + 8, meta.data(), meta_len);
  for (size_t i = 0; i < cat.masks.size(); ++i) {
    const auto& m = cat.masks[i];
    out.resize(offs[i], 0);
    auto app = [&](const BitRows& b) { out.insert(out.end(), b.bytes().begin(), b.bytes().end()); };
    app(m.ffn);
    app(m.heads);
    app(m.layer_gates);
    if (m.experts) app(*m.experts);
  }
  return out;
}

}  // namespace cortiq::cmf
