// util/error.h: Error messages pass through escape_invalid_utf8 (util/utf8.h, tested there).
#include "util/error.h"

#include <gtest/gtest.h>

#include <string>

namespace cortiq {
namespace {

TEST(ErrorMessage, NamesReadFromFilesAreEscaped) {
  const Error e(ErrorKind::Parse, "tensor '\xc7lk.3.attn_output.weight' is bad");
  EXPECT_EQ(e.message(), "tensor '\\xc7lk.3.attn_output.weight' is bad");
  EXPECT_STREQ(e.what(), "Parse: tensor '\\xc7lk.3.attn_output.weight' is bad");
  EXPECT_EQ(e.kind(), ErrorKind::Parse);
}

}  // namespace
}  // namespace cortiq
