// Test support (header-only; for the libFuzzer targets src/*/*_fuzz.cc): the seed-corpus mode
// .ci/run starts every fuzzer in once, `CMF_FUZZ_WRITE_SEEDS=<dir> ./NAME_fuzz`, which writes the
// fuzzer's small valid inputs into <dir> and exits.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>

namespace cortiq::test {

/// Called from LLVMFuzzerInitialize: when CMF_FUZZ_WRITE_SEEDS names a folder, creates it, calls
/// `write_seeds(folder)` and exits the process with status 0; otherwise returns.
template <class WriteSeeds>
void write_seeds_if_asked(WriteSeeds&& write_seeds) {
  const char* dir = std::getenv("CMF_FUZZ_WRITE_SEEDS");
  if (!dir) return;
  std::filesystem::create_directories(dir);
  write_seeds(std::string(dir));
  std::exit(0);
}

/// Writes `bytes` as the file `path` (replacing it).
inline void write_seed(const std::string& path, std::span<const uint8_t> bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
inline void write_seed(const std::string& path, const std::string& bytes) {
  write_seed(path, std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

}  // namespace cortiq::test
