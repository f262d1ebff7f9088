#include "lft/ckpt/box_checksum.h"

#include <ATen/Parallel.h>

#include <stdexcept>
#include <string>

namespace lft::ckpt {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

__attribute__((always_inline)) inline uint64_t mix64(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The checksum of n consecutive elements whose first has global index `first`. Written so that the
// compiler vectorizes it (64-bit lanes); the target-specific copies below are the same loop.
template <typename Bits>
__attribute__((always_inline)) inline uint64_t run_sum(const Bits* x, uint64_t first, int64_t n) {
  uint64_t sum = 0;
  for (int64_t j = 0; j < n; ++j)
    sum += mix64(static_cast<uint64_t>(x[j]) ^ mix64((first + static_cast<uint64_t>(j)) * kGolden + 1));
  return sum;
}

using RunSum = uint64_t (*)(const void*, uint64_t, int64_t);

template <typename Bits>
uint64_t run_sum_default(const void* x, uint64_t first, int64_t n) {
  return run_sum(static_cast<const Bits*>(x), first, n);
}

#if defined(__x86_64__) && defined(__GNUC__)
template <typename Bits>
__attribute__((target("avx2"))) uint64_t run_sum_avx2(const void* x, uint64_t first, int64_t n) {
  return run_sum(static_cast<const Bits*>(x), first, n);
}

template <typename Bits>
__attribute__((target("avx512f,avx512dq"))) uint64_t run_sum_avx512(const void* x, uint64_t first,
                                                                     int64_t n) {
  return run_sum(static_cast<const Bits*>(x), first, n);
}
#endif

template <typename Bits>
RunSum best_run_sum() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")) return run_sum_avx512<Bits>;
  if (__builtin_cpu_supports("avx2")) return run_sum_avx2<Bits>;
#endif
  return run_sum_default<Bits>;
}

RunSum run_sum_for(size_t element_size) {
  static const RunSum by_size[] = {best_run_sum<uint8_t>(), best_run_sum<uint16_t>(),
                                   best_run_sum<uint32_t>(), best_run_sum<uint64_t>()};
  switch (element_size) {
    case 1: return by_size[0];
    case 2: return by_size[1];
    case 4: return by_size[2];
    case 8: return by_size[3];
    default: throw std::invalid_argument("box_checksum: elements of " + std::to_string(element_size) + " bytes");
  }
}

}  // namespace

uint64_t box_checksum(const at::Tensor& data, const std::vector<int64_t>& offset,
                      const std::vector<int64_t>& global_shape) {
  const int64_t n = data.numel();
  if (n == 0) return 0;
  const size_t elem = static_cast<size_t>(data.element_size());
  const RunSum sum_of = run_sum_for(elem);
  const auto* bytes = static_cast<const unsigned char*>(data.data_ptr());
  const size_t nd = global_shape.size();
  const std::vector<int64_t> box = nd == 0 ? std::vector<int64_t>{} : data.sizes().vec();

  // Dims [inner, nd) form runs contiguous both in memory and in the global index: the last dim,
  // and the ones before it while the box spans the whole of every dim after them.
  size_t inner = nd;
  int64_t run = 1;
  while (inner > 0) {
    run *= box[--inner];
    if (box[inner] != global_shape[inner]) break;
  }
  std::vector<uint64_t> stride(nd, 1);  // of the global tensor, in elements
  for (size_t d = nd; d-- > 1;) stride[d - 1] = stride[d] * static_cast<uint64_t>(global_shape[d]);
  uint64_t origin = 0;  // the global index of the box's first element
  for (size_t d = 0; d < nd; ++d) origin += static_cast<uint64_t>(offset[d]) * stride[d];
  auto run_start = [&](int64_t r) {  // the global index of run r's first element
    uint64_t at = origin;
    for (size_t d = inner; d-- > 0;) {
      at += static_cast<uint64_t>(r % box[d]) * stride[d];
      r /= box[d];
    }
    return at;
  };
  return at::parallel_reduce(
      int64_t{0}, n, int64_t{1} << 20, uint64_t{0},
      [&](int64_t begin, int64_t end, uint64_t sum) {
        for (int64_t p = begin; p < end;) {
          const int64_t within = p % run;
          const int64_t len = std::min(run - within, end - p);
          sum += sum_of(bytes + static_cast<size_t>(p) * elem, run_start(p / run) + static_cast<uint64_t>(within), len);
          p += len;
        }
        return sum;
      },
      [](uint64_t a, uint64_t b) { return a + b; });
}

}  // namespace lft::ckpt
