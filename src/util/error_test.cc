// util/error.h: escape_invalid_utf8 and the Error messages that pass through it.
#include "util/error.h"

#include <gtest/gtest.h>

#include <string>

namespace cortiq {
namespace {

TEST(EscapeInvalidUtf8, ValidTextIsUnchanged) {
  for (const std::string s : {"", "plain ascii", "caf\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac",
                              "\xf0\x9f\x99\x82", "\xef\xbf\xbd", "\xf4\x8f\xbf\xbf", "\xed\x9f\xbf"})
    EXPECT_EQ(escape_invalid_utf8(s), s);
}

TEST(EscapeInvalidUtf8, EachBadByteBecomesItsHexEscape) {
  EXPECT_EQ(escape_invalid_utf8("\xc7lk.3"), "\\xc7lk.3");            // a lead byte without continuation
  EXPECT_EQ(escape_invalid_utf8("a\x80z"), "a\\x80z");                // a lone continuation byte
  EXPECT_EQ(escape_invalid_utf8("\xe2\x82"), "\\xe2\\x82");           // truncated at the end
  EXPECT_EQ(escape_invalid_utf8("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(escape_invalid_utf8("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");  // overlong, 3 bytes
  EXPECT_EQ(escape_invalid_utf8("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a UTF-16 surrogate
  EXPECT_EQ(escape_invalid_utf8("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  EXPECT_EQ(escape_invalid_utf8("\xf5\xff"), "\\xf5\\xff");
  EXPECT_EQ(escape_invalid_utf8("\xe6\x97\xa5\xe6"), "\xe6\x97\xa5\\xe6");  // valid kept, the rest escaped
}

TEST(ErrorMessage, NamesReadFromFilesAreEscaped) {
  const Error e(ErrorKind::Parse, "tensor '\xc7lk.3.attn_output.weight' is bad");
  EXPECT_EQ(e.message(), "tensor '\\xc7lk.3.attn_output.weight' is bad");
  EXPECT_STREQ(e.what(), "Parse: tensor '\\xc7lk.3.attn_output.weight' is bad");
  EXPECT_EQ(e.kind(), ErrorKind::Parse);
}

}  // namespace
}  // namespace cortiq
