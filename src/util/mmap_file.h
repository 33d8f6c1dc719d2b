// Read-only memory mapping of a whole file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace cortiq {

/// A read-only, private mmap of a whole file. Movable, not copyable. An empty file maps to an
/// empty span. Throws Error(Io) when the file cannot be opened, stat'ed or mapped.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
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
};

}  // namespace cortiq
