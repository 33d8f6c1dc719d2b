// Matrix transpose of f32 (the trainer's backward products take transposed operands: Wᵀ for dx,
// xᵀ and dyᵀ for dW, Kᵀ, Pᵀ, dSᵀ, Qᵀ, dOᵀ in attention; src/train/block_backward.cc).
#pragma once

#include <cstddef>

namespace cortiq::kernels {

/// out[c·rows + r] = a[r·cols + c] for r < rows, c < cols: a [rows, cols] → out [cols, rows],
/// both row-major f32, values copied bit for bit. 16×16 register blocks (AVX-512 shuffles) where
/// simd_cpu_ok(), the edges and other CPUs by 32×32 cache blocks of scalar copies. a and out must
/// not overlap. Throws nothing.
void transpose_f32(const float* a, size_t rows, size_t cols, float* out) noexcept;

}  // namespace cortiq::kernels
