#include "util/error.h"

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
    : std::runtime_error(std::string(error_kind_name(kind)) + ": " + message),
      kind_(kind),
      message_(message) {}

}  // namespace cortiq
