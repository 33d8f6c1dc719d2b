// quant::gather_rows (row_gather.h): the gathered payload decodes to exactly the chosen rows of the
// full decode (the oracle is decode itself), for every codec it covers; the others are refused.
#include "quant/row_gather.h"

#include <gtest/gtest.h>

#include <cstring>

#include "quant/codec.h"
#include "quant/test_util.h"
#include "util/error.h"

namespace cortiq::quant {
namespace {

TEST(GatherRows, DecodesToTheChosenRows) {
  const uint64_t rows = 13, cols = 96;
  const std::vector<uint32_t> ids = {12, 0, 5, 5, 7};  // out of order, one repeated
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8Row, DType::Q8_2F, DType::Q4Block,
                  DType::Q4Tiled, DType::Q1}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const std::vector<uint64_t> shape{rows, cols};
    const std::vector<uint8_t> full = encode(t, shape, testing::gaussian(rows * cols, 3));
    std::vector<float> all(rows * cols);
    decode(t, shape, full, all);
    ASSERT_TRUE(can_gather_rows(t, cols));
    const auto got = gather_rows(t, rows, cols, full, ids, "w");
    ASSERT_TRUE(got);
    const std::vector<uint64_t> gshape{ids.size(), cols};
    ASSERT_NO_THROW(validate_payload(t, gshape, *got, "gathered"));
    std::vector<float> sub(ids.size() * cols);
    decode(t, gshape, *got, sub);
    for (size_t j = 0; j < ids.size(); ++j)
      EXPECT_EQ(std::memcmp(&sub[j * cols], &all[ids[j] * cols], 4 * cols), 0) << "row " << j;
  }
}

TEST(GatherRows, RefusesLayoutsWithoutPerRowBytes) {
  const std::vector<uint32_t> ids = {0};
  for (DType t : {DType::Q4TP, DType::Q2TP, DType::Q1S, DType::Q1T, DType::VBit}) {
    EXPECT_FALSE(can_gather_rows(t, 64)) << dtype_name(t);
    const std::vector<uint64_t> shape{4, 64};
    const std::vector<uint8_t> full = encode(t, shape, testing::gaussian(256, 4));
    EXPECT_FALSE(gather_rows(t, 4, 64, full, ids, "w")) << dtype_name(t);
  }
  EXPECT_FALSE(can_gather_rows(DType::Q4Block, 40));  // a row that is not whole groups
}

TEST(GatherRows, BadIdOrPayloadIsAnError) {
  const std::vector<uint64_t> shape{4, 64};
  const std::vector<uint8_t> full = encode(DType::Q8Row, shape, testing::gaussian(256, 5));
  const std::vector<uint32_t> bad = {4};
  try {
    (void)gather_rows(DType::Q8Row, 4, 64, full, bad, "w");
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Bounds);
  }
  const std::vector<uint32_t> ok = {1};
  const std::span<const uint8_t> cut(full.data(), full.size() - 1);
  try {
    (void)gather_rows(DType::Q8Row, 4, 64, cut, ok, "w");
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Parse);
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cortiq::quant
