// transpose_f32 (transpose.h) against the definition, element by element and bit for bit.
#include "kernels/transpose.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace cortiq::kernels {
namespace {

TEST(Transpose, EqualsDefinitionOverShapes) {
  for (size_t rows : {1, 3, 15, 16, 17, 32, 47, 64, 100, 256})
    for (size_t cols : {1, 2, 16, 31, 32, 33, 65, 128, 257}) {
      std::vector<float> a(rows * cols), out(rows * cols, -1.0f);
      for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f - 7.0f;
      if (rows * cols > 5) {
        a[1] = -0.0f;
        a[4] = std::numeric_limits<float>::quiet_NaN();
      }
      transpose_f32(a.data(), rows, cols, out.data());
      for (size_t r = 0; r < rows; ++r)
        for (size_t c = 0; c < cols; ++c)
          ASSERT_EQ(0, std::memcmp(&out[c * rows + r], &a[r * cols + c], 4))
              << rows << "x" << cols << " at (" << r << ", " << c << ")";
    }
}

}  // namespace
}  // namespace cortiq::kernels
