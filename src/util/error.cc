#include "util/error.h"

#include <utility>

#include "util/utf8.h"

namespace cortiq {

std::string_view error_kind_name(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::InvalidMagic:
      return "InvalidMagic";
    case ErrorKind::UnsupportedVersion:
      return "UnsupportedVersion";
    case ErrorKind::UnsupportedFeature:
      return "UnsupportedFeature";
    case ErrorKind::Bounds:
      return "Bounds";
    case ErrorKind::Parse:
      return "Parse";
    case ErrorKind::HashMismatch:
      return "HashMismatch";
    case ErrorKind::Io:
      return "Io";
    case ErrorKind::Unsupported:
      return "Unsupported";
    case ErrorKind::InvalidArgument:
      return "InvalidArgument";
    case ErrorKind::Signature:
      return "Signature";
    case ErrorKind::NonFinite:
      return "NonFinite";
  }
  return "Unknown";
}

Error::Error(ErrorKind kind, const std::string& message)
    : Error(kind, escape_invalid_utf8(message), Escaped{}) {}

Error::Error(ErrorKind kind, std::string escaped, Escaped)
    : std::runtime_error(std::string(error_kind_name(kind)) + ": " + escaped),
      kind_(kind),
      message_(std::move(escaped)) {}

}  // namespace cortiq
