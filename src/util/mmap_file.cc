#include "util/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "util/error.h"

namespace cortiq {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

/// Closes the descriptor on every exit path of the constructor.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

HugeBuffer::HugeBuffer(size_t size, std::string_view what) {
  if (size == 0) return;
  // Over-allocate by one huge page so the data can start 2 MiB aligned.
  const size_t rounded = (size + kHugePage - 1) / kHugePage * kHugePage;
  const size_t len = rounded + kHugePage;
  void* base = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    fail(ErrorKind::Io, "cannot allocate {} bytes for {}: {}", len, what, std::strerror(errno));
  map_base_ = base;
  map_len_ = len;
  data_ = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(base) + kHugePage - 1) & ~(kHugePage - 1));
  size_ = size;
  // A kernel without THP refuses the advice (EINVAL): the memory still works with 4 KiB pages, only
  // slower to stream, so that is not an error.
  (void)::madvise(data_, rounded, MADV_HUGEPAGE);
}

HugeBuffer::~HugeBuffer() {
  reset();
}

HugeBuffer::HugeBuffer(HugeBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      map_base_(std::exchange(o.map_base_, nullptr)),
      map_len_(std::exchange(o.map_len_, 0)) {}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    map_base_ = std::exchange(o.map_base_, nullptr);
    map_len_ = std::exchange(o.map_len_, 0);
  }
  return *this;
}

void HugeBuffer::reset() noexcept {
  if (map_base_ != nullptr) ::munmap(map_base_, map_len_);
  map_base_ = nullptr;
  map_len_ = 0;
  data_ = nullptr;
  size_ = 0;
}

HugeArena::Piece HugeArena::allocate(size_t size, std::string_view what) {
  const size_t at = (used_ + 63) & ~size_t{63};
  if (!cur_ || at + size > cur_->size()) {
    if (size >= chunk_) {  // a buffer of its own; the current one keeps taking the small pieces
      auto own = std::make_shared<HugeBuffer>(size, what);
      return {own->bytes(), own};
    }
    cur_ = std::make_shared<HugeBuffer>(chunk_, what);
    used_ = size;
    return {cur_->bytes().first(size), cur_};
  }
  used_ = at + size;
  return {cur_->bytes().subspan(at, size), cur_};
}

MappedFile::MappedFile(const std::string& path, MapMode mode) : path_(path), mode_(mode) {
  const Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) fail(ErrorKind::Io, "cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail(ErrorKind::Io, "cannot stat '{}': {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(ErrorKind::Io, "'{}' is not a regular file", path);
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) return;
  if (mode == MapMode::Mmap) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, f.fd, 0);
    if (p == MAP_FAILED)
      fail(ErrorKind::Io, "cannot mmap '{}' ({} bytes): {}", path, size, std::strerror(errno));
    map_base_ = p;
    map_len_ = size;
    data_ = static_cast<const uint8_t*>(p);
    size_ = size;
    return;
  }
  // MapMode::Memory: huge-page memory filled from the file, then made read-only.
  mem_ = HugeBuffer(size, "'" + path + "'");
  uint8_t* p = mem_.data();
  size_t off = 0;
  while (off < size) {
    const ssize_t r = ::pread(f.fd, p + off, size - off, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int e = r < 0 ? errno : 0;
      mem_ = HugeBuffer();
      fail(ErrorKind::Io, "cannot read '{}' at byte offset {} of {}: {}", path, off, size,
           e ? std::strerror(e) : "unexpected end of file");
    }
    off += static_cast<size_t>(r);
  }
  ::mprotect(p, (size + kHugePage - 1) / kHugePage * kHugePage, PROT_READ);
  data_ = p;
  size_ = size;
  // Kept for release(): the same inode, even if the path is replaced (an atomic rename) later.
  fd_ = ::fcntl(f.fd, F_DUPFD_CLOEXEC, 0);
}

MappedFile::~MappedFile() {
  reset();
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      path_(std::move(o.path_)),
      mode_(o.mode_),
      map_base_(std::exchange(o.map_base_, nullptr)),
      map_len_(std::exchange(o.map_len_, 0)),
      mem_(std::move(o.mem_)),
      fd_(std::exchange(o.fd_, -1)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    path_ = std::move(o.path_);
    mode_ = o.mode_;
    map_base_ = std::exchange(o.map_base_, nullptr);
    map_len_ = std::exchange(o.map_len_, 0);
    mem_ = std::move(o.mem_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void MappedFile::reset() noexcept {
  if (map_base_ != nullptr) ::munmap(map_base_, map_len_);
  map_base_ = nullptr;
  map_len_ = 0;
  mem_ = HugeBuffer();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  data_ = nullptr;
  size_ = 0;
}

void MappedFile::release(std::span<const uint8_t> range) const {
  if (range.empty() || range.data() < data_ || range.data() + range.size() > data_ + size_) return;
  if (mode_ == MapMode::Mmap) return release_pages(range);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t lo = static_cast<size_t>(range.data() - data_), hi = lo + range.size();
  const size_t a = (lo + page - 1) / page * page, b = hi / page * page;
  if (b <= a) return;
  if (fd_ < 0) return;  // no descriptor kept: the anonymous copy stays resident, still correct
  // data_ is 2 MiB aligned, so address data_ + a and file offset a are both page aligned.
  void* at = const_cast<uint8_t*>(data_) + a;
  const size_t len = b - a;
  if (::mmap(at, len, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd_, static_cast<off_t>(a)) != MAP_FAILED) return;
  const int map_errno = errno;
  // A failed MAP_FIXED normally leaves the old mapping as it was (ENOMEM from the map count limit,
  // say): then the pages simply stay resident. mincore fails with ENOMEM only for unmapped pages.
  std::vector<unsigned char> resident((len + page - 1) / page);
  if (::mincore(at, len, resident.data()) == 0 || errno != ENOMEM) return;
  // The range was unmapped: put anonymous memory back and read the bytes into it again.
  if (::mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
    fail(ErrorKind::Io,
         "bytes [{}, {}) of '{}' were unmapped by a failed remap ({}) and cannot be mapped again: {}", a, b,
         path_, std::strerror(map_errno), std::strerror(errno));
  size_t off = 0;
  while (off < len) {
    const ssize_t r = ::pread(fd_, static_cast<uint8_t*>(at) + off, len - off, static_cast<off_t>(a + off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      fail(ErrorKind::Io,
           "bytes [{}, {}) of '{}' were unmapped by a failed remap ({}); reading them again failed at {}: {}",
           a, b, path_, std::strerror(map_errno), a + off,
           r < 0 ? std::strerror(errno) : "unexpected end of file");
    off += static_cast<size_t>(r);
  }
  ::mprotect(at, len, PROT_READ);
}

void release_pages(std::span<const uint8_t> bytes) noexcept {
  if (bytes.empty()) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(bytes.data());
  const uintptr_t hi = lo + bytes.size();
  const uintptr_t a = (lo + page - 1) / page * page;
  const uintptr_t b = hi / page * page;
  if (b > a) ::madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

}  // namespace cortiq
