// Token files (token_file.h): the byte layout of the header and the ids for both widths, the
// round trip through the mapping, and malformed files refused by name.
#include "train/token_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "util/atomic_file.h"
#include "util/error.h"

namespace cortiq::train {
namespace {

namespace fs = std::filesystem;

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cortiq_token_file_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  void put(const std::string& p, const std::string& bytes) const {
    std::ofstream(p, std::ios::binary) << bytes;
  }
  std::string error_of(const std::string& p, size_t vocab = 0) const {
    try {
      TokenFile f(p, vocab);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(TokenFileTest, U16LayoutIsByteExact) {
  const std::vector<uint32_t> ids = {1, 258, 65535, 0};
  write_token_file(path("a.bin"), ids);
  const std::string want = std::string("CTOK\x01\x00\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00", 16) +
                           std::string("\x01\x00\x02\x01\xff\xff\x00\x00", 8);
  EXPECT_EQ(read_file(path("a.bin")), want);
  const TokenFile f(path("a.bin"), 65536);
  EXPECT_EQ(f.width(), 2u);
  ASSERT_EQ(f.tokens().size(), 4u);
  EXPECT_EQ(f.tokens().slice(0, 4), ids);
  EXPECT_EQ(f.tokens().slice(1, 2), (std::vector<uint32_t>{258, 65535}));
}

TEST_F(TokenFileTest, U32WhenAnIdNeedsIt) {
  const std::vector<uint32_t> ids = {7, 65536, 151643};
  write_token_file(path("b.bin"), ids);
  const std::string b = read_file(path("b.bin"));
  ASSERT_EQ(b.size(), 16u + 12u);
  EXPECT_EQ(b.substr(6, 2), std::string("\x04\x00", 2));
  EXPECT_EQ(b.substr(20, 4), std::string("\x00\x00\x01\x00", 4));  // 65536 little-endian
  const TokenFile f(path("b.bin"));
  EXPECT_EQ(f.width(), 4u);
  EXPECT_EQ(f.tokens().slice(0, 3), ids);
  EXPECT_TRUE(is_token_file(path("b.bin")));
  // an id outside the tokenizer's vocabulary is named with its index
  EXPECT_NE(error_of(path("b.bin"), 100000).find("token 2 is id 151643"), std::string::npos)
      << error_of(path("b.bin"), 100000);
}

TEST_F(TokenFileTest, MalformedFilesAreNamed) {
  const std::string head = std::string("CTOK\x01\x00\x02\x00\x03\x00\x00\x00\x00\x00\x00\x00", 16);
  put(path("short.bin"), head + std::string(4, '\0'));  // 3 tokens announced, 2 present
  EXPECT_NE(error_of(path("short.bin")).find("do not fill"), std::string::npos)
      << error_of(path("short.bin"));
  put(path("text.bin"), "hello, not tokens at all");
  EXPECT_NE(error_of(path("text.bin")).find("no CTOK header"), std::string::npos);
  EXPECT_FALSE(is_token_file(path("text.bin")));
  put(path("empty.bin"), std::string("CTOK\x01\x00\x02\x00", 8) + std::string(8, '\0'));
  EXPECT_NE(error_of(path("empty.bin")).find("holds no tokens"), std::string::npos);
  put(path("v9.bin"), std::string("CTOK\x09\x00\x02\x00", 8) + std::string(8, '\0'));
  EXPECT_NE(error_of(path("v9.bin")).find("version 9"), std::string::npos);
  EXPECT_THROW(write_token_file(path("none.bin"), {}), Error);
  EXPECT_FALSE(fs::exists(path("none.bin")));
}

}  // namespace
}  // namespace cortiq::train
