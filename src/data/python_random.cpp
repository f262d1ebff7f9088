// MT19937 seeded as CPython's random_seed(): init_by_array over the 32-bit words of the seed.
#include "lft/data/python_random.h"

#include <algorithm>
#include <cmath>

namespace lft::data {
namespace {
constexpr int kN = 624, kM = 397;
}  // namespace

PythonRandom::PythonRandom(std::uint64_t seed) {
  std::vector<std::uint32_t> key;
  for (std::uint64_t s = seed; s != 0; s >>= 32) key.push_back(static_cast<std::uint32_t>(s));
  if (key.empty()) key.push_back(0);
  mt_[0] = 19650218u;  // init_genrand(19650218)
  for (int i = 1; i < kN; ++i)
    mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<std::uint32_t>(i);
  int i = 1;
  std::size_t j = 0;
  for (std::size_t k = std::max<std::size_t>(kN, key.size()); k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] + static_cast<std::uint32_t>(j);
    ++i;
    ++j;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= key.size()) j = 0;
  }
  for (int k = kN - 1; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - static_cast<std::uint32_t>(i);
    ++i;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000u;
  index_ = kN;
}

std::uint32_t PythonRandom::next() {
  if (index_ >= kN) {
    for (int k = 0; k < kN; ++k) {
      const std::uint32_t y = (mt_[k] & 0x80000000u) | (mt_[(k + 1) % kN] & 0x7fffffffu);
      mt_[k] = mt_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    index_ = 0;
  }
  std::uint32_t y = mt_[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

double PythonRandom::random() {
  const std::uint32_t a = next() >> 5, b = next() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

std::vector<std::int64_t> PythonRandom::choices(std::int64_t n, std::int64_t k) {
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(k));
  for (std::int64_t i = 0; i < k; ++i)
    out.push_back(static_cast<std::int64_t>(std::floor(random() * static_cast<double>(n))));
  return out;
}

}  // namespace lft::data
