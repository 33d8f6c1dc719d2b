// Which dtypes each SIMD matrix tier has a kernel for: the one table that avx512's simd_supported,
// avx2's avx2_supported and make_weight_plan (weight_plan.cc: which views get a kernel plan) read.
// A new codec gets its row here (and its kernels in the tiers that claim it); a new tier gets a
// column. The CPU checks stay with each tier (simd_cpu_ok, simd_vbmi_ok, avx2_cpu_ok): this table
// says what a tier implements on a CPU that has it. Internal to src/kernels.
#pragma once

#include <cstdint>

#include "quant/dtype.h"

namespace cortiq::kernels::simd_detail {

/// Whether a tier implements a dtype: No, Yes, or only when the CPU has AVX512-VBMI (AVX-512 tier).
enum class Cap : uint8_t { No, Yes, Vbmi };

/// One dtype's row: what each tier implements.
struct TierCaps {
  quant::DType t;
  Cap avx512;  ///< avx512/ (simd_matvec.h)
  Cap avx2;    ///< avx2/ (simd_avx2.h)
};

/// Every dtype with a kernel in some tier (the others — u8, mix8_4, q4_col — have only the reference).
/// Notes by dtype: q1s's outliers need ascending indices on the AVX-512 int8 path and on AVX2's
/// native decoders (else the reference / quant::RowDecoder); q1t's AVX-512 int8 tile needs VBMI (the
/// exact path otherwise); vbit / vbit_ro unpack with vpermb / vpmultishiftqb on AVX-512 (VBMI), with
/// pshufb + mulhi spreads on AVX2.
inline constexpr TierCaps kTierCaps[] = {
    {quant::DType::F32, Cap::Yes, Cap::Yes},     {quant::DType::F16, Cap::Yes, Cap::Yes},
    {quant::DType::BF16, Cap::Yes, Cap::Yes},    {quant::DType::Q8Row, Cap::Yes, Cap::Yes},
    {quant::DType::Q8_2F, Cap::Yes, Cap::Yes},   {quant::DType::Q4Block, Cap::Yes, Cap::Yes},
    {quant::DType::Q4Tiled, Cap::Yes, Cap::Yes}, {quant::DType::Q4TP, Cap::Yes, Cap::Yes},
    {quant::DType::Q2TP, Cap::Yes, Cap::Yes},    {quant::DType::Q1, Cap::Yes, Cap::Yes},
    {quant::DType::Q1S, Cap::Yes, Cap::Yes},     {quant::DType::Q1T, Cap::Yes, Cap::Yes},
    {quant::DType::VBit, Cap::Vbmi, Cap::Yes},   {quant::DType::VBitRo, Cap::Vbmi, Cap::Yes},
};

/// The row of t, or a row of Cap::No when no tier has a kernel for it.
constexpr TierCaps tier_caps(quant::DType t) noexcept {
  for (const TierCaps& c : kTierCaps)
    if (c.t == t) return c;
  return {t, Cap::No, Cap::No};
}

/// Whether the AVX-512 tier implements t on a CPU with AVX-512 VNNI (and VBMI when `vbmi`).
constexpr bool avx512_has_kernel(quant::DType t, bool vbmi) noexcept {
  const Cap c = tier_caps(t).avx512;
  return c == Cap::Yes || (c == Cap::Vbmi && vbmi);
}

/// Whether the AVX2 tier implements t on a CPU with AVX2 + FMA + F16C.
constexpr bool avx2_has_kernel(quant::DType t) noexcept {
  return tier_caps(t).avx2 != Cap::No;
}

/// Whether some tier implements t on some CPU (make_weight_plan prepares only these views).
constexpr bool any_tier_has_kernel(quant::DType t) noexcept {
  const TierCaps c = tier_caps(t);
  return c.avx512 != Cap::No || c.avx2 != Cap::No;
}

}  // namespace cortiq::kernels::simd_detail
