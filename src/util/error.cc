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

namespace {

/// Length of the well-formed UTF-8 sequence starting at s[i], or 0 if there is none (RFC 3629
/// table 3-7 ranges: the second byte's range depends on the first).
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace

std::string escape_invalid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(s[i]));
      ++i;
    }
  }
  return out;
}

Error::Error(ErrorKind kind, const std::string& message)
    : std::runtime_error(std::string(error_kind_name(kind)) + ": " + escape_invalid_utf8(message)),
      kind_(kind),
      message_(escape_invalid_utf8(message)) {}

}  // namespace cortiq
