// Standard base64 (RFC 4648 §4, alphabet A–Z a–z 0–9 + /, '=' padding), as the skill descriptors
// of the CMF header store their f16 arrays (FORMAT-NOTES §1.14).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cortiq {

/// Encodes `bytes` with '=' padding (length 4·⌈n/3⌉).
std::string base64_encode(std::span<const uint8_t> bytes);
/// Decodes padded or unpadded base64; ASCII whitespace is skipped. Throws Error(Parse) naming the
/// offset of a character outside the alphabet, misplaced padding, or a length that is 1 mod 4.
std::vector<uint8_t> base64_decode(std::string_view text);

}  // namespace cortiq
