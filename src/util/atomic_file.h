// Crash-safe output files: write to "<path>.tmp.<pid>", fsync, rename over <path>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace cortiq {

/// A file written under a temporary name and renamed to its final name only by `commit()`.
/// If destroyed without `commit()` (an exception, an early return) the temporary is removed and
/// the final path is untouched. Supports sequential writes and positional patches (`pwrite`).
/// Every method throws Error(Io) naming the path on failure; the constructor throws
/// Error(InvalidArgument) when `final_path` is a folder or ends in '/', suggesting
/// `<folder>/<example_name>` instead.
class AtomicFile {
 public:
  explicit AtomicFile(std::string final_path, std::string_view example_name = "model.cmf");
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends bytes at the current end; returns the offset they were written at (bytes).
  uint64_t write(std::span<const uint8_t> bytes);
  uint64_t write(const void* p, size_t n) { return write({static_cast<const uint8_t*>(p), n}); }
  /// Appends `n` zero bytes.
  void write_zeros(uint64_t n);
  /// Overwrites bytes at absolute offset `off` (must lie within what was written).
  void pwrite(uint64_t off, std::span<const uint8_t> bytes);
  /// Current length in bytes.
  uint64_t size() const noexcept { return size_; }
  /// fsync + rename to the final path + fsync of the directory. Idempotent after success.
  void commit();
  const std::string& final_path() const noexcept { return final_path_; }
  const std::string& temp_path() const noexcept { return temp_path_; }

 private:
  std::string final_path_, temp_path_;
  int slot_ = -1;  ///< this temporary's entry in the signal-cleanup registry (-1: none)
  int fd_ = -1;
  uint64_t size_ = 0;
  bool committed_ = false;
};

/// Makes SIGINT, SIGTERM, SIGHUP and SIGQUIT, and the crash signals SIGABRT (std::terminate),
/// SIGFPE, SIGSEGV and SIGBUS, remove every AtomicFile temporary still open before the process ends
/// with that signal as before (exit status, core dump), so an interrupted or crashed `convert`
/// leaves no multi-GB `.tmp.<pid>` file behind. Installs handlers only for signals still at their
/// default disposition (a sanitizer's or a server's own handler is kept). Idempotent. main.cc calls
/// it once for every command.
void remove_temporaries_on_signals();

/// Writes `bytes` to `path` atomically (temp + fsync + rename).
void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);

/// Reads a whole file into a string; throws Error(Io) when it cannot be opened or read, or is a
/// folder.
std::string read_file(const std::string& path);

}  // namespace cortiq
