// CPython's `random` module, as far as LlamaFactory v1's dataset sizing uses it: random.seed(n)
// for an integer n and random.choices(population, k=...) without weights, so that a v1 dataset
// file's `size` / `weight` draw the same records as v1 does.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace lft::data {

class PythonRandom {
 public:
  explicit PythonRandom(std::uint64_t seed);  // random.seed(seed)
  double random();                            // random.random(): 53 bits in [0, 1)
  // random.choices(range(n), k=k): k indices in [0, n), drawn with replacement.
  std::vector<std::int64_t> choices(std::int64_t n, std::int64_t k);

 private:
  std::uint32_t next();  // MT19937 genrand_uint32
  std::array<std::uint32_t, 624> mt_{};
  int index_ = 625;
};

}  // namespace lft::data
