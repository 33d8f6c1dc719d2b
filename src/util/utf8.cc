#include "util/utf8.h"

#include <fmt/format.h>

namespace cortiq {

long utf8_sequence(std::string_view s, size_t i) noexcept {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return 1;
  size_t need = 0;                     // continuation bytes after the lead
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the first continuation byte (table 3-7)
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;  // overlong
    if (b == 0xED) hi = 0x9F;  // surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;  // overlong
    if (b == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return -1;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return -static_cast<long>(k);
    const auto c = static_cast<unsigned char>(s[i + k]);
    if (c < lo || c > hi) return -static_cast<long>(k);
    lo = 0x80;
    hi = 0xBF;
  }
  return static_cast<long>(need + 1);
}

size_t first_invalid_utf8(std::string_view s) noexcept {
  for (size_t i = 0; i < s.size();) {
    const long n = utf8_sequence(s, i);
    if (n < 0) return i;
    i += static_cast<size_t>(n);
  }
  return std::string_view::npos;
}

size_t utf8_char_start(std::string_view s, size_t n) noexcept {
  while (n > 0 && n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

bool is_valid_utf8(std::string_view s) noexcept {
  return first_invalid_utf8(s) == std::string_view::npos;
}

std::string escape_invalid_utf8(std::string_view s) {
  return replace_invalid_utf8(s, [](std::string_view bad) {
    std::string e;
    for (char c : bad) e += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    return e;
  });
}

}  // namespace cortiq
