#include "util/line_vec.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace cortiq {
namespace {

bool line_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 64 == 0;
}

// Small buffers come from the heap arenas, large ones (≥ 128 KiB) from mmap, where malloc's
// pointer sits 16 bytes past a page: both must start on a cache line, also after growing.
TEST(LineVec, DataStartsOnACacheLineForEverySize) {
  for (size_t n : {size_t{1}, size_t{3}, size_t{17}, size_t{1000}, size_t{40000}, size_t{1} << 20}) {
    LineVec<float> f(n);
    LineVec<int8_t> b(n);
    EXPECT_TRUE(line_aligned(f.data())) << n;
    EXPECT_TRUE(line_aligned(b.data())) << n;
    f.resize(3 * n + 5);
    b.resize(3 * n + 5);
    EXPECT_TRUE(line_aligned(f.data())) << n;
    EXPECT_TRUE(line_aligned(b.data())) << n;
  }
}

TEST(LineVec, HoldsItsValuesAcrossGrowth) {
  LineVec<int> v;
  for (int i = 0; i < 5000; ++i) v.push_back(i * 7);
  for (int i = 0; i < 5000; ++i) ASSERT_EQ(v[static_cast<size_t>(i)], i * 7);
  EXPECT_TRUE(line_aligned(v.data()));
}

}  // namespace
}  // namespace cortiq
