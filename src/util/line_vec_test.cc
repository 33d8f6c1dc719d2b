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

TEST(Grow, GrowsOnlyAndKeepsValues) {
  LineVec<float> v;
  float* p = grow(v, 100);
  EXPECT_EQ(v.size(), 100u);
  EXPECT_EQ(p, v.data());
  EXPECT_TRUE(line_aligned(p));
  EXPECT_EQ(p[99], 0.0f);  // new elements are value-initialized
  p[3] = 2.5f;
  EXPECT_EQ(grow(v, 10), p);  // smaller request: no shrink, no reallocation
  EXPECT_EQ(v.size(), 100u);
  p = grow(v, 1000);
  EXPECT_EQ(v.size(), 1000u);
  EXPECT_EQ(p[3], 2.5f);  // kept across the reallocation
  EXPECT_TRUE(line_aligned(p));
  std::vector<int> plain;  // any allocator
  int* q = grow(plain, 4);
  EXPECT_EQ(q, plain.data());
  EXPECT_EQ(plain.size(), 4u);
}

}  // namespace
}  // namespace cortiq
