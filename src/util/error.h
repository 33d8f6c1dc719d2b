// Typed errors for every layer of Cortiq.
//
// Every failure that reaches a user is a `cortiq::Error` carrying an `ErrorKind` (the spec's error
// classes, CMF v2 spec §1.2, plus I/O and usage classes) and a message that names the offset,
// tensor or field at fault. Nothing in the library reports failure by returning a default value.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace cortiq {

/// Error classes. The first five are the spec's (§1.2); the rest are ours (DESIGN.md).
enum class ErrorKind {
  InvalidMagic,        ///< file does not start with "CMF\x01"
  UnsupportedVersion,  ///< envelope version != 2
  UnsupportedFeature,  ///< a required_features bit this reader does not implement
  Bounds,              ///< an offset/length points outside its container
  Parse,               ///< malformed JSON, directory, payload, or unknown dtype id
  HashMismatch,        ///< a stored hash64/SHA-256 disagrees with the bytes
  Io,                  ///< the OS refused an open/read/write/mmap/rename
  Unsupported,         ///< a valid input this build cannot handle (e.g. dequantizing u8)
  InvalidArgument,     ///< a caller/CLI argument out of range
  Signature,           ///< a detached signature that does not verify
  NonFinite,           ///< the forward pass produced NaN/±Inf (a corrupt or out-of-range weight)
};

/// Human-readable name of an ErrorKind, e.g. "Bounds".
std::string_view error_kind_name(ErrorKind kind) noexcept;

/// The one exception type of the library. `what()` is "<Kind>: <message>", the message passed
/// through escape_invalid_utf8 (util/utf8.h), so it is always valid UTF-8.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message);
  ErrorKind kind() const noexcept { return kind_; }
  /// The message without the "<Kind>: " prefix.
  const std::string& message() const noexcept { return message_; }

 private:
  struct Escaped {};  // the message is already escaped (the public constructor escapes it once)
  Error(ErrorKind kind, std::string escaped, Escaped);
  ErrorKind kind_;
  std::string message_;
};

/// Throws Error(kind, fmt::format(fmt, args...)).
template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(kind, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace cortiq
