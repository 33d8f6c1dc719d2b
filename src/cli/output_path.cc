// Path helpers of the commands (cli/command.h): refuse_overwriting_input, the check convert, requant and
// compact make before writing, and read_input ("-" = standard input).
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "cli/command.h"
#include "cmf/reader.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace cortiq::cli {
namespace {

/// Whether paths `a` and `b` name the same file: the same inode when both exist (a symlink or hard
/// link to it counts), else the same weakly canonical path.
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code ec;
  if (std::filesystem::equivalent(a, b, ec) && !ec) return true;
  ec.clear();
  const auto ca = std::filesystem::weakly_canonical(a, ec);
  if (ec) return false;
  const auto cb = std::filesystem::weakly_canonical(b, ec);
  return !ec && ca == cb;
}

}  // namespace

void refuse_overwriting_input(const std::string& input, const std::string& output, const char* command) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(input, ec)) {
    // A checkpoint folder: the files convert reads there are its weights, configs and tokenizer.
    const fs::path out(output);
    const std::string ext = out.extension().string();
    const bool read_kind = ext == ".safetensors" || ext == ".json" || ext == ".jinja" || ext == ".model" ||
                           ext == ".bin" || ext == ".gguf";
    if (read_kind && fs::is_regular_file(out, ec) &&
        same_file(out.parent_path().empty() ? "." : out.parent_path(), input))
      fail(ErrorKind::InvalidArgument,
           "-o {} is a file of the input folder {}: {} would replace part of its own source; write to "
           "another path",
           output, input, command);
    return;
  }
  std::vector<std::string> sources{input};
  if (const auto sn = cmf::parse_shard_name(input))
    for (uint32_t k = 1; k <= sn->count; ++k) sources.push_back(cmf::shard_file_name(sn->stem, k, sn->count));
  for (const auto& src : sources)
    if (same_file(src, output))
      fail(ErrorKind::InvalidArgument,
           "-o {} is the input file {}: {} would replace its own source; write to another path (and "
           "rename it afterwards if that is what you want)",
           output, src, command);
}

std::string read_input(const std::string& path) {
  if (path != "-") return cortiq::read_file(path);
  std::stringstream ss;
  ss << std::cin.rdbuf();
  return ss.str();
}

}  // namespace cortiq::cli
