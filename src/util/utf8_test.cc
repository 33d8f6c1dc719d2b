// util/utf8.h: well-formed sequences and maximal invalid subparts (Unicode table 3-7 and §3.9),
// validity, and the escaping of invalid bytes used by error messages.
#include "util/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace cortiq {
namespace {

TEST(Utf8Sequence, LengthsAndMaximalInvalidSubparts) {
  EXPECT_EQ(utf8_sequence("a", 0), 1);
  EXPECT_EQ(utf8_sequence("\xc3\xa9", 0), 2);
  EXPECT_EQ(utf8_sequence("\xe6\x97\xa5", 0), 3);
  EXPECT_EQ(utf8_sequence("\xf0\x9f\x99\x82", 0), 4);
  EXPECT_EQ(utf8_sequence("\xf4\x8f\xbf\xbf", 0), 4);  // U+10FFFF
  EXPECT_EQ(utf8_sequence("\x80", 0), -1);             // a lone continuation byte
  EXPECT_EQ(utf8_sequence("\xc0\xaf", 0), -1);         // C0 never starts a sequence
  EXPECT_EQ(utf8_sequence("\xe2\x82", 0), -2);         // truncated: both bytes are one subpart
  EXPECT_EQ(utf8_sequence("\xe2\x82z", 0), -2);
  EXPECT_EQ(utf8_sequence("\xe0\x80\xaf", 0), -1);      // overlong: E0 needs A0..BF next
  EXPECT_EQ(utf8_sequence("\xed\xa0\x80", 0), -1);      // a surrogate: ED needs 80..9F next
  EXPECT_EQ(utf8_sequence("\xf4\x90\x80\x80", 0), -1);  // above U+10FFFF
  EXPECT_EQ(utf8_sequence("\xf0\x9f\x99", 0), -3);
  EXPECT_EQ(utf8_sequence("\xf5\x80", 0), -1);
}

TEST(Utf8Valid, WholeStrings) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("caf\xc3\xa9 \xe6\x97\xa5\xf0\x9f\x99\x82"));
  EXPECT_FALSE(is_valid_utf8("caf\xc3"));
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));
  EXPECT_FALSE(is_valid_utf8("\xc1\xbf"));
  // the offset of the first bad byte, after whole sequences
  EXPECT_EQ(first_invalid_utf8("caf\xc3\xa9 ok"), std::string_view::npos);
  EXPECT_EQ(first_invalid_utf8("caf\xc3\xa9\xff"), 5u);
  EXPECT_EQ(first_invalid_utf8("\xe6\x97\xa5\xe6"), 3u);
}

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

// A cut point moves back to the start of the character it falls inside ("é" is C3 A9, "€" E2 82 AC).
TEST(Utf8, CharStartOfACutPoint) {
  const std::string s = "a\xc3\xa9\xe2\x82\xac";
  EXPECT_EQ(utf8_char_start(s, 0), 0u);
  EXPECT_EQ(utf8_char_start(s, 1), 1u);
  EXPECT_EQ(utf8_char_start(s, 2), 1u);  // inside é
  EXPECT_EQ(utf8_char_start(s, 3), 3u);
  EXPECT_EQ(utf8_char_start(s, 5), 3u);  // inside €
  EXPECT_EQ(utf8_char_start(s, 6), 6u);  // the end
  EXPECT_EQ(utf8_char_start(s, 9), 9u);  // past the end: unchanged
}

}  // namespace
}  // namespace cortiq
