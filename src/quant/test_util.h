// Shared helpers of the quant unit tests (byte builder, random rows). Test-only header.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "util/half.h"

namespace cortiq::quant::testing {

/// Little-endian byte builder for hand-written payloads.
struct Bytes {
  std::vector<uint8_t> b;
  Bytes& u8(std::initializer_list<int> xs) {
    for (int x : xs) b.push_back(static_cast<uint8_t>(x));
    return *this;
  }
  Bytes& rep(int x, size_t count) {
    b.insert(b.end(), count, static_cast<uint8_t>(x));
    return *this;
  }
  Bytes& u16(std::initializer_list<unsigned> xs) {
    for (unsigned x : xs)
      b.push_back(static_cast<uint8_t>(x & 0xFF)), b.push_back(static_cast<uint8_t>(x >> 8));
    return *this;
  }
  Bytes& u32(std::initializer_list<uint32_t> xs) {
    for (uint32_t x : xs)
      for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(x >> (8 * i)));
    return *this;
  }
};

inline std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace cortiq::quant::testing
