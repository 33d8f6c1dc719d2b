// `compact` after in-place growth (cmf/append.h, FORMAT-NOTES §1.16, decision 5): the dead bytes of
// appends are reclaimed — compacting a grown file gives byte for byte what compacting the same
// content written fresh gives — and compaction is byte-deterministic.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cmf/append.h"
#include "cmf/masks.h"
#include "cmf/reader.h"
#include "cmf/writer.h"
#include "convert/convert.h"
#include "support/cmf_header.h"

namespace cortiq::convert {
namespace {

namespace fs = std::filesystem;
using quant::DType;

std::string tmp(const std::string& name) {
  struct Dir {
    fs::path p = fs::temp_directory_path() / ("compact_test_" + std::to_string(::getpid()));
    Dir() { fs::create_directories(p); }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  };
  static const Dir d;
  return (d.p / name).string();
}

std::vector<uint8_t> read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 11 + (i >> 9));
  return v;
}

cmf::Header with_skills(std::initializer_list<const char*> ids) {
  cmf::Header h = test::tiny_header("test", 8, 20, 2, 3, 1, 4, 16, 128);
  h.provenance = {{"tool", "compact_test"}};
  for (const char* id : ids) {
    cmf::SkillRecord s;
    s.id = id;
    s.layers = {1};
    h.skills.push_back(s);
  }
  return h;
}

std::vector<cmf::TensorData> overlay(const std::string& id, uint8_t seed) {
  return {{"skill." + id + ".down", DType::F32, {8, 20}, pattern(8 * 20 * 4, seed)},
          {"skill." + id + ".big", DType::F32, {64, 160}, pattern(64 * 160 * 4, seed + 1)}};
}

void expect_verified(const std::string& p) {
  cmf::Reader r = cmf::Reader::open(p);
  r.check_sections();
  const auto problems = r.verify();
  EXPECT_TRUE(problems.empty()) << p << ": " << (problems.empty() ? "" : problems[0]);
}

TEST(CompactAfterAppend, ReclaimsDeadBytesAndIsDeterministic) {
  const cmf::Header h0 = with_skills({});
  cmf::MaskCatalog masks;
  masks.default_task = "general";
  masks.masks.push_back(cmf::make_full_mask(h0.arch, "general", 0));
  const std::string vocab = R"({"model":{"type":"BPE"}})";
  const std::span<const uint8_t> vb(reinterpret_cast<const uint8_t*>(vocab.data()), vocab.size());
  std::vector<cmf::TensorData> base = {{"model.embed_tokens.weight", DType::F32, {16, 8}, pattern(512, 1)},
                                       {"model.norm.weight", DType::F16, {8}, pattern(16, 2)},
                                       {"big", DType::F32, {64, 80}, pattern(64 * 80 * 4, 3)}};
  const std::string grown = tmp("grown.cmf");
  cmf::write_file(grown, h0, base, masks, vb);
  const uint64_t base_size = fs::file_size(grown);
  // add a, add b, replace a's big overlay, remove b (skill rm)
  cmf::append_in_place(grown, with_skills({"a"}), overlay("a", 10));
  cmf::append_in_place(grown, with_skills({"a", "b"}), overlay("b", 20));
  const std::vector<cmf::TensorData> a_big = {
      {"skill.a.big", DType::F16, {64, 160}, pattern(64 * 160 * 2, 30)}};
  const std::vector<std::string> drop = {"skill.a.big", "skill.b.down", "skill.b.big"};
  const cmf::Header final_header = with_skills({"a"});
  const cmf::AppendResult last = cmf::append_in_place(grown, final_header, a_big, drop);
  expect_verified(grown);
  const uint64_t grown_size = fs::file_size(grown);
  EXPECT_GT(last.dead_bytes, 64u * 160 * 4 * 2);  // at least the two dropped 40 KiB payloads

  const std::string c1 = tmp("c1.cmf"), c2 = tmp("c2.cmf");
  compact_file(grown, c1, false);
  compact_file(grown, c2, false);
  expect_verified(c1);
  EXPECT_EQ(read_all(c1), read_all(c2));  // deterministic

  // the same content written fresh, in the grown file's directory order, then compacted
  std::vector<cmf::TensorData> fresh_t = base;
  fresh_t.push_back(overlay("a", 10)[0]);
  fresh_t.push_back(a_big[0]);
  const std::string fresh = tmp("fresh.cmf"), c3 = tmp("c3.cmf");
  cmf::write_file(fresh, final_header, fresh_t, masks, vb);
  compact_file(fresh, c3, false);
  EXPECT_EQ(read_all(c1), read_all(c3));

  const cmf::Reader r = cmf::Reader::open(c1);
  EXPECT_TRUE(cmf::dead_ranges(r.header()).empty());
  EXPECT_FALSE(r.header().extra.contains(std::string(cmf::kDeadBytesKey)));
  // tight: besides the structures only alignment padding (< 4096 before the blob and between
  // payloads, < 1 KiB of header slack) remains
  const cmf::Envelope& e = r.envelope();
  uint64_t used = cmf::kEnvelopeSize + e.header.len + e.dir.len + e.masks.len + e.vocab.len;
  for (const auto& t : r.tensors()) used += t.nbytes;
  const uint64_t c1_size = fs::file_size(c1);
  EXPECT_LT(c1_size - used, 4096u * (1 + r.tensors().size()));
  EXPECT_LT(c1_size, grown_size - last.dead_bytes + 4096);
  std::printf("[sizes] base %llu, after 3 appends %llu (dead %llu), compacted %llu\n",
              static_cast<unsigned long long>(base_size), static_cast<unsigned long long>(grown_size),
              static_cast<unsigned long long>(last.dead_bytes), static_cast<unsigned long long>(c1_size));
}

}  // namespace
}  // namespace cortiq::convert
