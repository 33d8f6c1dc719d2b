// hash64 (FORMAT-NOTES §1.10).
#include "cmf/hash.h"

#include <cstring>

namespace cortiq::cmf {

namespace {
constexpr uint64_t kSalt = 0x9E3779B97F4A7C15ull;

inline uint64_t load_word(const uint8_t* p) noexcept {
  uint64_t w;
  std::memcpy(&w, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  w = __builtin_bswap64(w);
#endif
  return w;
}

/// XOR of fmix64(word_i) ^ (first + i)·salt over n full words.
inline uint64_t fold_words(const uint8_t* p, uint64_t n, uint64_t first) noexcept {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  uint64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint64_t k = first + i;
    a0 ^= fmix64(load_word(p + 8 * i)) ^ (k * kSalt);
    a1 ^= fmix64(load_word(p + 8 * i + 8)) ^ ((k + 1) * kSalt);
    a2 ^= fmix64(load_word(p + 8 * i + 16)) ^ ((k + 2) * kSalt);
    a3 ^= fmix64(load_word(p + 8 * i + 24)) ^ ((k + 3) * kSalt);
  }
  for (; i < n; ++i) a0 ^= fmix64(load_word(p + 8 * i)) ^ ((first + i) * kSalt);
  return a0 ^ a1 ^ a2 ^ a3;
}
}  // namespace

uint64_t hash64(std::span<const uint8_t> b) noexcept {
  const uint64_t full = b.size() / 8;
  uint64_t acc = fold_words(b.data(), full, 0);
  if (b.size() % 8 != 0) {
    uint8_t tail[8] = {};
    std::memcpy(tail, b.data() + full * 8, b.size() % 8);
    acc ^= fmix64(load_word(tail)) ^ (full * kSalt);
  }
  acc ^= static_cast<uint64_t>(b.size());
  return fmix64(acc);
}

void Hash64Stream::update(std::span<const uint8_t> b) noexcept {
  len_ += b.size();
  size_t i = 0;
  if (npend_) {
    while (npend_ < 8 && i < b.size()) pend_[npend_++] = b[i++];
    if (npend_ < 8) return;
    acc_ ^= fold_words(pend_, 1, words_++);
    npend_ = 0;
  }
  const uint64_t n = (b.size() - i) / 8;
  acc_ ^= fold_words(b.data() + i, n, words_);
  words_ += n;
  i += n * 8;
  while (i < b.size()) pend_[npend_++] = b[i++];
}

uint64_t Hash64Stream::finish() const noexcept {
  uint64_t acc = acc_;
  if (npend_) {
    uint8_t tail[8] = {};
    std::memcpy(tail, pend_, npend_);
    acc ^= fmix64(load_word(tail)) ^ (words_ * kSalt);
  }
  return fmix64(acc ^ len_);
}

}  // namespace cortiq::cmf
