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

/// `size` bytes of a position-dependent pattern (byte i: (i·mul) >> shift) written to `path`.
std::vector<uint8_t> write_pattern(const std::string& path, size_t size, uint32_t mul, int shift) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>((i * mul) >> shift);
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

// A file larger than one huge page with a position-dependent pattern, read back through both modes.
TEST(MappedFile, MmapAndMemoryModesSeeTheSameBytes) {
  const std::string path = temp_path("cortiq-mapped");
  const std::vector<uint8_t> want = write_pattern(path, (size_t{5} << 20) + 12345, 2654435761u, 13);
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

// The line of /proc/self/maps whose range holds `addr` ("" when none).
std::string mapping_of(const void* addr) {
  std::ifstream maps("/proc/self/maps");
  const auto a = reinterpret_cast<uintptr_t>(addr);
  for (std::string line; std::getline(maps, line);) {
    unsigned long lo = 0, hi = 0;  // NOLINT(google-runtime-int): sscanf's %lx
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && a >= lo && a < hi) return line;
  }
  return "";
}

// release(): the bytes stay the file's; in Memory mode the released whole pages are a file mapping
// again (so they left the anonymous resident set) while the pages around them stay anonymous.
TEST(MappedFile, ReleasedPagesStillReadTheFile) {
  const std::string path = temp_path("cortiq-release");
  const std::vector<uint8_t> want = write_pattern(path, (size_t{3} << 20) + 777, 40503u, 7);
  for (MapMode mode : {MapMode::Mmap, MapMode::Memory}) {
    MappedFile m(path, mode);
    const size_t lo = 100000, hi = (size_t{2} << 20) + 5000;
    m.release(m.bytes().subspan(lo, hi - lo));
    m.release(std::span<const uint8_t>(want.data(), 100));  // not inside the file: ignored
    EXPECT_EQ(std::vector<uint8_t>(m.bytes().begin(), m.bytes().end()), want);
    // Released in two adjacent calls split at a page boundary: one mapping in Memory mode.
    const size_t lo2 = (size_t{2} << 20) + 3 * 4096 + 5, mid = (size_t{2} << 20) + 40 * 4096,
                 hi2 = (size_t{2} << 20) + 90 * 4096 + 7;
    m.release(m.bytes().subspan(lo2, mid - lo2));
    m.release(m.bytes().subspan(mid, hi2 - mid));
    EXPECT_EQ(std::vector<uint8_t>(m.bytes().begin(), m.bytes().end()), want);
    if (mode == MapMode::Memory) {
      EXPECT_EQ(mapping_of(m.data() + lo2 + 4096), mapping_of(m.data() + hi2 - 4096));
      EXPECT_NE(mapping_of(m.data() + lo2 + 4096), mapping_of(m.data() + hi2 + 4096));
      const std::string name = std::filesystem::path(path).filename().string();
      EXPECT_NE(mapping_of(m.data() + 4096 * 25).find(name), std::string::npos)
          << mapping_of(m.data() + 4096 * 25);
      EXPECT_EQ(mapping_of(m.data()).find(name), std::string::npos) << mapping_of(m.data());
      EXPECT_EQ(mapping_of(m.data() + hi).find(name), std::string::npos) << mapping_of(m.data() + hi);
    }
  }
  // Memory mode maps from the descriptor of the load: replacing the path changes nothing.
  MappedFile m(path, MapMode::Memory);
  std::filesystem::remove(path);
  {
    std::ofstream f(path, std::ios::binary);
    f << "another file";
  }
  m.release(m.bytes().subspan(4096, 3 * 4096));
  EXPECT_EQ(std::vector<uint8_t>(m.bytes().begin(), m.bytes().end()), want);
  std::filesystem::remove(path);
}

TEST(HugeBuffer, ZeroFilledAlignedWritable) {
  HugeBuffer b(size_t{3} << 20, "a test buffer");
  ASSERT_EQ(b.size(), size_t{3} << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (uintptr_t{2} << 20), 0u);
  EXPECT_EQ(b.data()[0], 0);
  EXPECT_EQ(b.data()[b.size() - 1], 0);
  b.data()[b.size() - 1] = 7;
  HugeBuffer moved = std::move(b);
  EXPECT_EQ(moved.bytes().back(), 7);
  EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_TRUE(HugeBuffer().bytes().empty());
}

// Small pieces share one buffer (64-byte aligned, back to back); a piece too big for the chunk gets a
// buffer of its own and leaves the current one taking small pieces; a full chunk starts a new one.
TEST(HugeArena, PiecesShareBuffersAndOutliveTheArena) {
  HugeArena::Piece a, b, big, c, d;
  {
    HugeArena arena(size_t{1} << 20);
    a = arena.allocate(100, "a");
    b = arena.allocate(64, "b");
    big = arena.allocate(size_t{3} << 20, "big");
    c = arena.allocate(10, "c");
    d = arena.allocate((size_t{1} << 20) - 100, "d");  // no room left in the first chunk
  }
  EXPECT_EQ(a.owner, b.owner);
  EXPECT_EQ(a.owner, c.owner);
  EXPECT_NE(a.owner, big.owner);
  EXPECT_NE(a.owner, d.owner);
  EXPECT_EQ(b.bytes.data(), a.bytes.data() + 128);
  EXPECT_EQ(c.bytes.data(), a.bytes.data() + 192);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.bytes.data()) % (uintptr_t{2} << 20), 0u);
  EXPECT_EQ(big.bytes.size(), size_t{3} << 20);
  EXPECT_EQ(d.bytes.size(), (size_t{1} << 20) - 100);
  a.bytes[99] = 1;  // the buffers outlived the arena
  big.bytes.back() = 2;
  d.bytes.back() = 3;
  EXPECT_EQ(b.bytes[0], 0);
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
