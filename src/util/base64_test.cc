#include "util/base64.h"

#include <gtest/gtest.h>

#include "util/error.h"

namespace cortiq {
namespace {

std::vector<uint8_t> bytes(std::string_view s) {
  return {s.begin(), s.end()};
}

// RFC 4648 §10 test vectors.
TEST(Base64, Rfc4648Vectors) {
  const char* plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
  const char* enc[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(base64_encode(bytes(plain[i])), enc[i]);
    EXPECT_EQ(base64_decode(enc[i]), bytes(plain[i]));
  }
  EXPECT_EQ(base64_decode("Zm9vYg"), bytes("foob"));  // unpadded
  std::vector<uint8_t> all(256);
  for (int i = 0; i < 256; ++i) all[i] = uint8_t(i);
  EXPECT_EQ(base64_decode(base64_encode(all)), all);
}

TEST(Base64, RejectsBadInput) {
  EXPECT_THROW(base64_decode("Zm9v!"), Error);
  EXPECT_THROW(base64_decode("Z"), Error);
  EXPECT_THROW(base64_decode("Zg==Zg=="), Error);
  EXPECT_THROW(base64_decode("=Zg="), Error);
}

}  // namespace
}  // namespace cortiq
