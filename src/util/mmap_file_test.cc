#include "util/mmap_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "util/error.h"

namespace cortiq {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))).string();
}

// A file larger than one huge page with a position-dependent pattern, read back through both modes.
TEST(MappedFile, MmapAndMemoryModesSeeTheSameBytes) {
  const std::string path = temp_path("cortiq-mapped");
  std::vector<uint8_t> want((size_t{5} << 20) + 12345);
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(want.data()), static_cast<std::streamsize>(want.size()));
  }
  for (MapMode mode : {MapMode::Mmap, MapMode::Memory}) {
    MappedFile m(path, mode);
    ASSERT_EQ(m.size(), want.size());
    EXPECT_EQ(std::vector<uint8_t>(m.bytes().begin(), m.bytes().end()), want);
    if (mode == MapMode::Memory) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(m.data()) % (uintptr_t{2} << 20), 0u);  // 2 MiB aligned
    }
    MappedFile moved = std::move(m);  // ownership moves, the old object is empty
    EXPECT_EQ(moved.size(), want.size());
    EXPECT_EQ(m.size(), 0u);  // NOLINT(bugprone-use-after-move): checking the moved-from state
    EXPECT_EQ(moved.bytes()[want.size() - 1], want.back());
  }
  std::filesystem::remove(path);
}

TEST(MappedFile, EmptyFileAndErrors) {
  const std::string path = temp_path("cortiq-empty");
  { std::ofstream f(path, std::ios::binary); }
  for (MapMode mode : {MapMode::Mmap, MapMode::Memory}) {
    MappedFile m(path, mode);
    EXPECT_EQ(m.size(), 0u);
    EXPECT_TRUE(m.bytes().empty());
  }
  std::filesystem::remove(path);
  for (MapMode mode : {MapMode::Mmap, MapMode::Memory}) {
    try {
      MappedFile m(path, mode);
      FAIL() << "opened a missing file";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Io);
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
    EXPECT_THROW(MappedFile(std::filesystem::temp_directory_path().string(), mode), Error);  // a directory
  }
}

}  // namespace
}  // namespace cortiq
