// UTF-8 well-formedness, shared by every layer that takes bytes from files or clients: CMF tensor
// names (cmf), the tokenizer's byte-level pieces (tokenizer), error messages (util/error.h) and
// the server's token pieces.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace cortiq {

/// The UTF-8 sequence at s[i] (requires i < s.size()): its length in bytes (1–4) when it is well
/// formed, else minus the length of its maximal invalid subpart (−1 … −3), the unit that decoders
/// replace by one U+FFFD (Unicode §3.9 "U+FFFD Substitution of Maximal Subparts", the WHATWG
/// decoder). Well formed is Unicode table 3-7 / RFC 3629: no overlong forms, no surrogates
/// (U+D800–U+DFFF), nothing above U+10FFFF.
long utf8_sequence(std::string_view s, size_t i) noexcept;

/// Offset (bytes) of the first byte of `s` that starts no well-formed sequence (utf8_sequence), or
/// std::string_view::npos when `s` is valid UTF-8.
size_t first_invalid_utf8(std::string_view s) noexcept;

/// Whether every byte of `s` belongs to a well-formed sequence (utf8_sequence).
bool is_valid_utf8(std::string_view s) noexcept;

/// `n` moved back to the start of the character it falls inside: the largest n' <= n where s[n'] is
/// no continuation byte (10xxxxxx); `n` itself when n >= s.size(). So s[0, n') never ends inside a
/// character.
size_t utf8_char_start(std::string_view s, size_t n) noexcept;

/// `s` with each maximal invalid subpart (utf8_sequence) replaced by `replace(subpart)`, a string;
/// well-formed sequences are copied. escape_invalid_utf8 and the tokenizer's U+FFFD repair are
/// the two replacements.
template <class Replace>
std::string replace_invalid_utf8(std::string_view s, Replace&& replace) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const long n = utf8_sequence(s, i);
    const size_t len = static_cast<size_t>(n > 0 ? n : -n);
    if (n > 0)
      out.append(s.substr(i, len));
    else
      out.append(replace(s.substr(i, len)));
    i += len;
  }
  return out;
}

/// `s` with every byte that is not part of a well-formed sequence written as the four characters
/// "\xNN"; valid text is unchanged. Error messages quote names read from files (a damaged GGUF's
/// tensor names), and a message goes to terminals, logs and JSON, all of which want UTF-8.
std::string escape_invalid_utf8(std::string_view s);

}  // namespace cortiq
