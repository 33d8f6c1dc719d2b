// AVX-512 element-wise activations of the MLP (issue 6; the scalar references are in kernels.h).
#pragma once

#include <cstddef>

namespace cortiq::kernels {

/// out[i] = silu(g[i])·u[i] = g[i]/(1 + e^−g[i])·u[i] for i < n (SwiGLU), in f32 with the vectorized
/// e^x of simd_exp.h; out may alias g or u. Requires simd_cpu_ok() (simd_matvec.h). Accuracy vs the
/// double-evaluated reference kernels::swiglu: ≤ 4 ulp relative (e^x ≤ 1 ulp, then one add, one
/// divide, one multiply), except that silu(g) for g < −88.7 (where the result is below 1e-36)
/// gives −0.
void swiglu_simd(const float* g, const float* u, float* out, size_t n);

}  // namespace cortiq::kernels
