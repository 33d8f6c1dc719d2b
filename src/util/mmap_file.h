// Read-only memory mapping of a whole file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

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

/// Zero-filled anonymous memory of `size` bytes, 2 MiB aligned and madvise(MADV_HUGEPAGE)'d (the
/// allocation behind MapMode::Memory), for data that is streamed once per token: model weights a
/// load re-lays out, a bandwidth probe's buffer. Movable, not copyable. Throws Error(Io) naming
/// `what` when the memory cannot be mapped.
class HugeBuffer {
 public:
  HugeBuffer() = default;
  explicit HugeBuffer(size_t size, std::string_view what = "a buffer");
  ~HugeBuffer();
  HugeBuffer(HugeBuffer&& o) noexcept;
  HugeBuffer& operator=(HugeBuffer&& o) noexcept;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;

  /// The buffer: [size] bytes, 2 MiB aligned; nullptr / 0 / empty for an empty or moved-from one.
  uint8_t* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  std::span<uint8_t> bytes() const noexcept { return {data_, size_}; }

 private:
  void reset() noexcept;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* map_base_ = nullptr;  // what munmap gets (the mapping is over-allocated for alignment)
  size_t map_len_ = 0;
};

/// Hands out 64-byte aligned pieces of HugeBuffers, so that many small tensors share 2 MiB pages:
/// one HugeBuffer per small tensor would fault in a whole huge page for each (a 64 KiB k_proj would
/// cost 2 MiB). Buffers are `chunk` bytes, or as large as a request that does not fit one; a piece
/// keeps its buffer alive through Piece::owner, so the arena itself may go away first. Untouched
/// tails of a buffer cost address space only. Not thread-safe.
class HugeArena {
 public:
  explicit HugeArena(size_t chunk = size_t{64} << 20) : chunk_(chunk) {}
  struct Piece {
    std::span<uint8_t> bytes;
    std::shared_ptr<const HugeBuffer> owner;
  };
  /// A zero-filled piece of `size` bytes; throws Error(Io) naming `what` when no memory can be mapped.
  Piece allocate(size_t size, std::string_view what);

 private:
  size_t chunk_;
  std::shared_ptr<HugeBuffer> cur_;
  size_t used_ = 0;
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
  /// How the bytes were brought in (the constructor's mode).
  MapMode mode() const noexcept { return mode_; }

  /// Hands the whole pages inside `range` (which must lie within bytes()) back to the kernel, for a
  /// caller that made its own copy of those bytes: they leave the resident set, and a later read
  /// sees the file's bytes again. Mmap: madvise(MADV_DONTNEED) (release_pages). Memory: the pages
  /// are mapped again, read-only and lazily, from the file descriptor kept open since the load (the
  /// same inode even if the path was replaced since; the data is 2 MiB aligned, so page-aligned
  /// addresses match page-aligned file offsets). Released pages are then no longer a private
  /// snapshot: like an mmap, they show the file's current contents, so a file overwritten in place
  /// after the load changes them, and one truncated makes reading them fail (SIGBUS). Release
  /// adjacent ranges in order and split at page boundaries: each call's partial first and last
  /// pages are kept, and each call can add a mapping (the kernel merges adjacent ones of the same
  /// file). Pages shared with bytes outside the range are kept; a range outside bytes() is ignored.
  /// Best effort: when the remap fails and the old mapping is still there (e.g. the process's map
  /// count limit), the pages simply stay resident. Throws Error(Io) only when a failed remap left
  /// the range unmapped and its bytes cannot be mapped and read back.
  void release(std::span<const uint8_t> range) const;

 private:
  void reset() noexcept;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  MapMode mode_ = MapMode::Mmap;
  void* map_base_ = nullptr;  // MapMode::Mmap: the file mapping
  size_t map_len_ = 0;
  HugeBuffer mem_;  // MapMode::Memory: the loaded bytes
  int fd_ = -1;     // MapMode::Memory: the file, for release()
};

/// Hands the whole pages inside `bytes` (a range of a read-only file mapping) back to the kernel
/// (madvise MADV_DONTNEED): they leave the resident set and are read from the file again if
/// touched. Pages shared with bytes outside the range are kept. Never fails (advice only).
void release_pages(std::span<const uint8_t> bytes) noexcept;

}  // namespace cortiq
