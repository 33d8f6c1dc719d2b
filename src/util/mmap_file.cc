#include "util/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

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

MappedFile::MappedFile(const std::string& path, MapMode mode) : path_(path) {
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
  // MapMode::Memory: over-allocate by one huge page so the data can start 2 MiB aligned.
  const size_t rounded = (size + kHugePage - 1) / kHugePage * kHugePage;
  const size_t len = rounded + kHugePage;
  void* base = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    fail(ErrorKind::Io, "cannot allocate {} bytes to load '{}': {}", len, path, std::strerror(errno));
  map_base_ = base;
  map_len_ = len;
  auto* p =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(base) + kHugePage - 1) & ~(kHugePage - 1));
  // A kernel without THP refuses the advice (EINVAL): the load still works with 4 KiB pages, only
  // slower, so that is not an error.
  (void)::madvise(p, rounded, MADV_HUGEPAGE);
  size_t off = 0;
  while (off < size) {
    const ssize_t r = ::pread(f.fd, p + off, size - off, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int e = r < 0 ? errno : 0;
      reset();
      fail(ErrorKind::Io, "cannot read '{}' at byte offset {} of {}: {}", path, off, size,
           e ? std::strerror(e) : "unexpected end of file");
    }
    off += static_cast<size_t>(r);
  }
  ::mprotect(base, len, PROT_READ);
  data_ = p;
  size_ = size;
}

MappedFile::~MappedFile() {
  reset();
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      path_(std::move(o.path_)),
      map_base_(std::exchange(o.map_base_, nullptr)),
      map_len_(std::exchange(o.map_len_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    path_ = std::move(o.path_);
    map_base_ = std::exchange(o.map_base_, nullptr);
    map_len_ = std::exchange(o.map_len_, 0);
  }
  return *this;
}

void MappedFile::reset() noexcept {
  if (map_base_ != nullptr) ::munmap(map_base_, map_len_);
  map_base_ = nullptr;
  map_len_ = 0;
  data_ = nullptr;
  size_ = 0;
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
