// Read-only memory mapping of a whole file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace cortiq {

/// How MappedFile brings the bytes into memory.
enum class MapMode : uint8_t {
  /// Read-only private mmap of the file (pages shared with the page cache, loaded lazily; 4 KiB pages).
  Mmap,
  /// Anonymous memory read from the file at open (llama.cpp's `--no-mmap`), 2 MiB aligned and
  /// madvise(MADV_HUGEPAGE)'d so the kernel backs it with transparent huge pages where enabled
  /// ("always" or "madvise" in /sys/kernel/mm/transparent_hugepage/enabled); then made read-only.
  /// Costs the file's size in anonymous RSS and a full read at open; a decode streams every weight
  /// once per token, and 2 MiB pages save a TLB miss and a prefetcher restart every 4 KiB (measured
  /// +10–17% tg on a 480 MiB q8 file, bench/e2e_bench.sh).
  Memory,
};

/// A read-only view of a whole file, memory-mapped or loaded (MapMode). Movable, not copyable. An
/// empty file maps to an empty span. Throws Error(Io) when the file cannot be opened, stat'ed,
/// mapped, allocated or read (naming the path and the byte offset of a failed read).
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path, MapMode mode = MapMode::Mmap);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  /// The file's bytes, [size] bytes.
  std::span<const uint8_t> bytes() const noexcept { return {data_, size_}; }
  const uint8_t* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }

 private:
  void reset() noexcept;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  void* map_base_ = nullptr;  // what munmap gets (MapMode::Memory over-allocates for alignment)
  size_t map_len_ = 0;
};

/// Hands the whole pages inside `bytes` (a range of a read-only file mapping) back to the kernel
/// (madvise MADV_DONTNEED): they leave the resident set and are read from the file again if
/// touched. Pages shared with bytes outside the range are kept. Never fails (advice only).
void release_pages(std::span<const uint8_t> bytes) noexcept;

}  // namespace cortiq
