#include "util/base64.h"

#include "util/error.h"

namespace cortiq {
namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int sextet(char c) noexcept {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace

std::string base64_encode(std::span<const uint8_t> bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = (uint32_t{bytes[i]} << 16) | (uint32_t{bytes[i + 1]} << 8) | bytes[i + 2];
    for (int s = 18; s >= 0; s -= 6) out.push_back(kAlphabet[(v >> s) & 63]);
  }
  size_t rest = bytes.size() - i;
  if (rest) {
    uint32_t v = uint32_t{bytes[i]} << 16;
    if (rest == 2) v |= uint32_t{bytes[i + 1]} << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::vector<uint8_t> base64_decode(std::string_view text) {
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3);
  uint32_t acc = 0;
  int n = 0;    // sextets in acc
  int pad = 0;  // '=' seen
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++pad;
      if (pad > 2 || n < 2) fail(ErrorKind::Parse, "base64: misplaced '=' at offset {}", i);
      continue;
    }
    int s = sextet(c);
    if (s < 0) fail(ErrorKind::Parse, "base64: invalid character 0x{:02x} at offset {}", uint8_t(c), i);
    if (pad) fail(ErrorKind::Parse, "base64: data after '=' padding at offset {}", i);
    acc = (acc << 6) | uint32_t(s);
    if (++n == 4) {
      out.push_back(uint8_t(acc >> 16));
      out.push_back(uint8_t(acc >> 8));
      out.push_back(uint8_t(acc));
      acc = 0;
      n = 0;
    }
  }
  if (n == 1) fail(ErrorKind::Parse, "base64: truncated input ({} characters)", text.size());
  if (n == 2) out.push_back(uint8_t(acc >> 4));
  if (n == 3) {
    out.push_back(uint8_t(acc >> 10));
    out.push_back(uint8_t(acc >> 2));
  }
  if (pad && n + pad != 4) fail(ErrorKind::Parse, "base64: wrong padding length");
  return out;
}

}  // namespace cortiq
