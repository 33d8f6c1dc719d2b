// Test support (header-only; for unit tests, fuzz seeds and benchmarks, never a library): the
// small CMF headers their files are written with.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "cmf/header.h"

namespace cortiq::test {

/// A header for a model of these dimensions (cmf::ModelArch's required fields, in its order): every
/// layer full attention, quant_type `q`, every other field the default of cmf::Header and
/// cmf::ModelArch (rms_norm_eps 1e-6, rope_theta 10000, no provenance).
inline cmf::Header tiny_header(std::string arch_name, uint32_t hidden_size, uint32_t intermediate_size,
                               uint32_t num_layers, uint32_t num_attention_heads, uint32_t num_kv_heads,
                               uint32_t head_dim, uint32_t vocab_size, uint64_t max_position_embeddings,
                               cmf::QuantType q = cmf::QuantType::F32) {
  cmf::Header h;
  cmf::ModelArch& a = h.arch;
  a.arch_name = std::move(arch_name);
  a.hidden_size = hidden_size;
  a.intermediate_size = intermediate_size;
  a.num_layers = num_layers;
  a.num_attention_heads = num_attention_heads;
  a.num_kv_heads = num_kv_heads;
  a.head_dim = head_dim;
  a.vocab_size = vocab_size;
  a.layer_types.assign(num_layers, cmf::LayerType::FullAttention);
  a.max_position_embeddings = max_position_embeddings;
  h.quant_type = q;
  return h;
}

}  // namespace cortiq::test
