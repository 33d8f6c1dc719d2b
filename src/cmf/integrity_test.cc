// Reader::check_sections (the integrity check every model open runs: header, directory, masks,
// vocab and index hashes, issue 27) and the directory's refusal of a zero dimension.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "cmf/hash.h"
#include "cmf/reader.h"
#include "cmf/writer.h"
#include "support/cmf_header.h"
#include "support/errors.h"
#include "util/error.h"
#include "util/half.h"

namespace cortiq::cmf {
namespace {

using quant::DType;

/// A small file with every optional section but the index: 2 tensors, 2 masks, a vocab.
std::vector<uint8_t> file_with_sections() {
  const Header h = test::tiny_header("test", 8, 20, 2, 3, 1, 4, 16, 128);
  MaskCatalog c;
  c.default_task = "general";
  c.masks.push_back(make_full_mask(h.arch, "general", 0));
  c.masks[0].priority = MaskPriority::Fallback;
  TaskMask m = make_full_mask(h.arch, "code", 1);
  m.ffn.set(1, 5, false);
  c.masks.push_back(std::move(m));
  std::vector<TensorData> t;
  t.push_back({"a", DType::F32, {4, 4}, std::vector<uint8_t>(64, 7)});
  t.push_back({"b", DType::F32, {2, 8}, std::vector<uint8_t>(64, 9)});
  const std::string vocab = R"({"model":{"type":"BPE","vocab":{"a":0}}})";
  const std::string path =
      (std::filesystem::temp_directory_path() / fmt::format("cmf_integrity_{}.cmf", ::getpid())).string();
  write_file(path, h, t, c, std::span(reinterpret_cast<const uint8_t*>(vocab.data()), vocab.size()));
  std::ifstream f(path, std::ios::binary);
  std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), {});
  std::filesystem::remove(path);
  return b;
}

/// The Error check_sections throws on `b` (which must open), or kind Unsupported = "none".
Error check_error(const std::vector<uint8_t>& b) {
  const Reader r = Reader::open_memory(b);  // the edits below keep the file openable
  return test::error_of([&] { r.check_sections(); }).value_or(Error(ErrorKind::Unsupported, "no error"));
}

TEST(CheckSections, UnmodifiedFilePasses) {
  const auto b = file_with_sections();
  const Reader r = Reader::open_memory(b);
  EXPECT_NO_THROW(r.check_sections());
  EXPECT_TRUE(r.verify().empty());
  ASSERT_TRUE(r.envelope().header_hash != 0 && r.envelope().dir_hash != 0);
  ASSERT_TRUE(r.header().section_hashes.masks && r.header().section_hashes.vocab);
}

// The issue's case: rope_theta edited in place (same length, still valid JSON) opens and parses,
// but the header hash no longer matches; the message names the section and both hashes.
TEST(CheckSections, EditedHeaderJsonIsRefused) {
  auto b = file_with_sections();
  const Envelope e = Reader::open_memory(b).envelope();
  std::string json(b.begin() + static_cast<ptrdiff_t>(e.header.off),
                   b.begin() + static_cast<ptrdiff_t>(e.header.end()));
  const size_t at = json.find("\"rope_theta\":10000");
  ASSERT_NE(at, std::string::npos) << json;
  b[e.header.off + at + 13] = '2';  // 10000 → 20000
  const uint64_t actual = hash64(std::span(b).subspan(e.header.off, e.header.len));
  EXPECT_EQ(Reader::open_memory(b).header().arch.rope_theta, 20000.0);  // it parses: only the hash tells
  const Error err = check_error(b);
  EXPECT_EQ(err.kind(), ErrorKind::HashMismatch);
  EXPECT_NE(err.message().find("section 'header': hash mismatch"), std::string::npos) << err.message();
  EXPECT_NE(err.message().find(fmt::format("stored {:016x}, actual {:016x}", e.header_hash, actual)),
            std::string::npos)
      << err.message();
}

TEST(CheckSections, FlippedVocabByteIsRefused) {
  auto b = file_with_sections();
  const Envelope e = Reader::open_memory(b).envelope();
  const auto vocab = std::span(b).subspan(e.vocab.off, e.vocab.len);
  const auto it = std::find(vocab.begin(), vocab.end(), 'B');  // "BPE" → "CPE"
  ASSERT_NE(it, vocab.end());
  *it = 'C';
  const Error err = check_error(b);
  EXPECT_EQ(err.kind(), ErrorKind::HashMismatch);
  EXPECT_NE(err.message().find("section 'vocab': hash mismatch"), std::string::npos) << err.message();
  EXPECT_NE(err.message().find(fmt::format("actual {:016x}", hash64(vocab))), std::string::npos);
}

TEST(CheckSections, FlippedMaskBitIsRefused) {
  auto b = file_with_sections();
  const Envelope e = Reader::open_memory(b).envelope();
  b[e.masks.end() - 1] ^= 0x01;  // the last byte of the last mask's bits
  Error err = check_error(b);
  EXPECT_EQ(err.kind(), ErrorKind::HashMismatch);
  EXPECT_NE(err.message().find("section 'masks': hash mismatch"), std::string::npos) << err.message();
}

// A tensor's stored hash changed in the directory: the directory hash catches it at open, without
// reading any payload.
TEST(CheckSections, EditedDirectoryIsRefused) {
  auto b = file_with_sections();
  const Envelope e = Reader::open_memory(b).envelope();
  b[e.dir.off + 16 + 48] ^= 0x5A;  // record 0's hash64
  const Error err = check_error(b);
  EXPECT_EQ(err.kind(), ErrorKind::HashMismatch);
  EXPECT_NE(err.message().find("section 'directory': hash mismatch"), std::string::npos) << err.message();
}

// Payload bytes are not part of the open-time check (that is --check-tensors / verify()).
TEST(CheckSections, TensorBytesAreLeftToVerify) {
  auto b = file_with_sections();
  const Reader r0 = Reader::open_memory(b);
  b[r0.envelope().data.off + r0.tensor("a").off] ^= 0x01;
  const Reader r = Reader::open_memory(b);
  EXPECT_NO_THROW(r.check_sections());
  const auto problems = r.verify();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("tensor 'a': hash mismatch"), std::string::npos) << problems[0];
}

// Zero dimensions: refused by the reader (Parse, naming the tensor) before any size arithmetic,
// and never written.
TEST(Directory, ZeroDimensionIsRefused) {
  auto b = file_with_sections();
  const Envelope e = Reader::open_memory(b).envelope();
  store_le<uint32_t>(&b[e.dir.off + 16 + 56 + 8 + 4], 0);  // tensor 'b' [2, 8] → [2, 0]
  try {
    Reader::open_memory(b);
    FAIL() << "opened";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::Parse);
    EXPECT_NE(err.message().find("<memory>: tensor 'b' (directory record 1"), std::string::npos)
        << err.message();
    EXPECT_NE(err.message().find("dimension 1 is 0"), std::string::npos) << err.message();
  }
  const DirRecord zero{"z", DType::F32, {0, 4}, 0, 0, 0};
  try {
    encode_directory(std::span(&zero, 1));
    FAIL() << "encoded";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(err.message().find("tensor 'z': dim 0 = 0"), std::string::npos) << err.message();
  }
}

}  // namespace
}  // namespace cortiq::cmf
