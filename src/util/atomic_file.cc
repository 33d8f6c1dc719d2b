#include "util/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "util/error.h"

namespace cortiq {

namespace {
// Temporaries a signal handler may unlink: a fixed table (no allocation, no locks in the handler).
// state 0 = free, 1 = being filled or emptied, 2 = holds a path.
constexpr int kTempSlots = 32;
struct TempSlot {
  std::atomic<int> state{0};
  char path[4096];
};
TempSlot g_temps[kTempSlots];

int register_temp(const std::string& path) {
  if (path.size() >= sizeof(TempSlot::path)) return -1;
  for (int i = 0; i < kTempSlots; ++i) {
    int free = 0;
    if (g_temps[i].state.compare_exchange_strong(free, 1)) {
      std::memcpy(g_temps[i].path, path.c_str(), path.size() + 1);
      g_temps[i].state.store(2);
      return i;
    }
  }
  return -1;  // more than kTempSlots open at once: this one is not cleaned on a signal
}
void unregister_temp(int slot) {
  if (slot >= 0) g_temps[slot].state.store(0);
}
// Runs on any thread; only async-signal-safe calls. The signal is blocked while the handler runs, so
// the re-raised one is delivered with the default action (end, or core dump) as the handler returns;
// a fault (SIGSEGV, SIGFPE) that re-executes its instruction then ends the process the same way.
extern "C" void remove_temporaries_and_die(int sig) {
  const int saved = errno;
  for (auto& t : g_temps)
    if (t.state.load() == 2) ::unlink(t.path);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
  errno = saved;
}
}  // namespace

void remove_temporaries_on_signals() {
  // the crash signals too: a std::terminate (SIGABRT) or a fault must not leave a multi-GB temporary
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGABRT, SIGFPE, SIGSEGV, SIGBUS}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_handler = remove_temporaries_and_die;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

AtomicFile::AtomicFile(std::string final_path, std::string_view example_name)
    : final_path_(std::move(final_path)) {
  // A folder (or a name ending in '/') would only fail at the rename, after all the work: say so now.
  std::error_code ec;
  const bool folder = std::filesystem::is_directory(final_path_, ec);
  if (final_path_.empty() || final_path_.back() == '/' || folder) {
    std::filesystem::path dir =
        std::filesystem::path(final_path_.empty() ? "." : final_path_).lexically_normal();
    if (!dir.has_filename() && dir.has_parent_path()) dir = dir.parent_path();  // "out/" → "out"
    fail(ErrorKind::InvalidArgument, "output '{}' {}: give a file name (e.g. {})", final_path_,
         folder || final_path_.empty() ? "is a folder" : "ends in '/'",
         (dir / std::string(example_name)).string());
  }
  temp_path_ = final_path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fail(ErrorKind::Io, "cannot create '{}' (writing its temporary '{}' failed: {})", final_path_, temp_path_,
         std::strerror(errno));
  slot_ = register_temp(temp_path_);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
  unregister_temp(slot_);
}

static void pwrite_all(int fd, const uint8_t* p, size_t n, uint64_t off, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(ErrorKind::Io, "write to '{}' at offset {} failed: {}", path, off, std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
    off += static_cast<uint64_t>(w);
  }
}

uint64_t AtomicFile::write(std::span<const uint8_t> bytes) {
  const uint64_t at = size_;
  pwrite_all(fd_, bytes.data(), bytes.size(), at, temp_path_);
  size_ += bytes.size();
  return at;
}

void AtomicFile::write_zeros(uint64_t n) {
  static const std::vector<uint8_t> zeros(1 << 16, 0);
  while (n > 0) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, zeros.size()));
    write(std::span<const uint8_t>(zeros.data(), k));
    n -= k;
  }
}

void AtomicFile::pwrite(uint64_t off, std::span<const uint8_t> bytes) {
  if (off + bytes.size() > size_)
    fail(ErrorKind::Io, "patch of {} bytes at offset {} is past the end ({}) of '{}'", bytes.size(), off,
         size_, temp_path_);
  pwrite_all(fd_, bytes.data(), bytes.size(), off, temp_path_);
}

void AtomicFile::commit() {
  if (committed_) return;
  if (::fsync(fd_) != 0) fail(ErrorKind::Io, "fsync '{}' failed: {}", temp_path_, std::strerror(errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail(ErrorKind::Io, "close '{}' failed: {}", temp_path_, std::strerror(errno));
  }
  fd_ = -1;
  if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0)
    fail(ErrorKind::Io, "rename '{}' -> '{}' failed: {}", temp_path_, final_path_, std::strerror(errno));
  committed_ = true;
  unregister_temp(slot_);  // renamed: nothing left for a signal to remove
  slot_ = -1;
  std::filesystem::path dir = std::filesystem::path(final_path_).parent_path();
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

std::string read_file(const std::string& path) {
  // an ifstream opens a folder and reads it as empty
  if (std::filesystem::is_directory(path)) fail(ErrorKind::Io, "cannot read '{}': it is a folder", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::Io, "cannot open '{}': {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail(ErrorKind::Io, "read of '{}' failed", path);
  return ss.str();
}

}  // namespace cortiq
