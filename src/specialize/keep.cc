// Keep sets (keep.h).
#include "specialize/keep.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"

namespace cortiq::specialize {

namespace {

/// Neuron ids of one layer by logit, highest first (ties: lower id first).
std::vector<uint32_t> ranked(const std::vector<float>& m) {
  std::vector<uint32_t> id(m.size());
  std::iota(id.begin(), id.end(), 0u);
  std::stable_sort(id.begin(), id.end(), [&](uint32_t a, uint32_t b) { return m[a] > m[b]; });
  return id;
}

std::vector<uint32_t> top(const std::vector<float>& m, size_t n) {
  auto r = ranked(m);
  r.resize(std::min(n, r.size()));
  std::sort(r.begin(), r.end());
  return r;
}

}  // namespace

KeepSets keep_by_threshold(const Logits& logits, double tau) {
  const double cut = std::log(tau / (1.0 - tau));
  KeepSets k(logits.size());
  for (size_t l = 0; l < logits.size(); ++l)
    for (uint32_t j = 0; j < logits[l].size(); ++j)
      if (static_cast<double>(logits[l][j]) > cut) k[l].push_back(j);
  return k;
}

double kept_fraction(const KeepSets& k, const Logits& logits) {
  double kept = 0.0, all = 0.0;
  for (size_t l = 0; l < logits.size(); ++l) {
    kept += static_cast<double>(k[l].size());
    all += static_cast<double>(logits[l].size());
  }
  return all > 0 ? kept / all : 1.0;
}

KeepSets scaled_cut(const Logits& logits, const KeepSets& base, double factor) {
  KeepSets k(logits.size());
  for (size_t l = 0; l < logits.size(); ++l) {
    const size_t W = logits[l].size();
    const double pruned = static_cast<double>(W - base[l].size()) * factor;
    const auto p = static_cast<size_t>(std::clamp(std::llround(pruned), 0LL, static_cast<long long>(W) - 1));
    k[l] = top(logits[l], W - p);
  }
  return k;
}

KeepSets align_keep(const Logits& logits, const KeepSets& k, uint32_t align, uint64_t* resurrected) {
  KeepSets out(k.size());
  uint64_t added = 0;
  for (size_t l = 0; l < k.size(); ++l) {
    const size_t W = logits[l].size();
    size_t n = std::max<size_t>(k[l].size(), 1);
    if (align > 1) n = std::min(W, (n + align - 1) / align * align);
    // kept first, then the pruned ones by logit
    std::vector<uint8_t> in(W, 0);
    for (uint32_t j : k[l]) in[j] = 1;
    out[l] = k[l];
    for (uint32_t j : ranked(logits[l])) {
      if (out[l].size() >= n) break;
      if (!in[j]) out[l].push_back(j), ++added;
    }
    std::sort(out[l].begin(), out[l].end());
  }
  if (resurrected) *resurrected = added;
  return out;
}

cmf::TaskMask mask_of(const cmf::ModelArch& arch, const KeepSets& k, std::string name, uint32_t task_id) {
  if (k.size() != arch.num_layers)
    fail(ErrorKind::InvalidArgument, "keep sets for {} layers, the model has {}", k.size(), arch.num_layers);
  cmf::TaskMask m = cmf::make_full_mask(arch, std::move(name), task_id);
  const uint32_t W = arch.intermediate_size;
  m.ffn = cmf::BitRows(arch.num_layers, W, false);
  uint64_t kept = 0;
  for (uint32_t l = 0; l < arch.num_layers; ++l) {
    if (k[l].empty()) fail(ErrorKind::InvalidArgument, "the keep set empties layer {}", l);
    for (uint32_t j : k[l]) {
      if (j >= W) fail(ErrorKind::InvalidArgument, "layer {}: neuron {} >= intermediate_size {}", l, j, W);
      m.ffn.set(l, j, true);
    }
    kept += k[l].size();
  }
  m.sparsity =
      static_cast<float>(1.0 - static_cast<double>(kept) / (static_cast<double>(W) * arch.num_layers));
  return m;
}

KeepSets keep_of(const cmf::ModelArch& arch, const cmf::TaskMask& m) {
  if (m.ffn.rows() != arch.num_layers)
    fail(ErrorKind::Unsupported, "mask '{}' has per-pass FFN rows; defrag takes a legacy-layout mask",
         m.name);
  for (uint32_t l = 0; l < arch.num_layers; ++l) {
    if (!m.gate(l))
      fail(ErrorKind::Unsupported, "mask '{}' closes layer {}; defrag removes FFN neurons only", m.name, l);
    if (m.heads.count_row(l) != m.heads.cols())
      fail(ErrorKind::Unsupported, "mask '{}' closes heads of layer {}; defrag removes FFN neurons only",
           m.name, l);
  }
  if (m.experts) fail(ErrorKind::Unsupported, "mask '{}' restricts experts; use moe-defrag", m.name);
  KeepSets k(arch.num_layers);
  for (uint32_t l = 0; l < arch.num_layers; ++l) {
    for (uint32_t j = 0; j < m.ffn.cols(); ++j)
      if (m.ffn.get(l, j)) k[l].push_back(j);
    if (k[l].empty())
      fail(ErrorKind::InvalidArgument, "mask '{}' empties the FFN of layer {}: a layer needs a neuron",
           m.name, l);
  }
  return k;
}

}  // namespace cortiq::specialize
