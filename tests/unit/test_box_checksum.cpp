// The tensor store's position-keyed checksum: the vectorized one equals the format's formula,
// element by element, for every element size and box shape, and boxes add up to the whole.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "lft/ckpt/box_checksum.h"

namespace lft::ckpt {
namespace {

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The formula of box_checksum.h, one element at a time (the format's definition).
uint64_t reference(const at::Tensor& box, const std::vector<int64_t>& offset,
                   const std::vector<int64_t>& global_shape) {
  const at::Tensor flat = box.contiguous().reshape({-1});
  const auto elem = static_cast<size_t>(box.element_size());
  const auto* bytes = static_cast<const unsigned char*>(flat.data_ptr());
  const std::vector<int64_t> shape = box.sizes().vec();
  uint64_t sum = 0;
  for (int64_t i = 0; i < flat.numel(); ++i) {
    uint64_t global = 0;
    int64_t rest = i;
    std::vector<int64_t> idx(shape.size());
    for (size_t d = shape.size(); d-- > 0;) {
      idx[d] = rest % shape[d];
      rest /= shape[d];
    }
    for (size_t d = 0; d < shape.size(); ++d)
      global = global * static_cast<uint64_t>(global_shape[d]) + static_cast<uint64_t>(offset[d] + idx[d]);
    uint64_t bits = 0;
    std::memcpy(&bits, bytes + static_cast<size_t>(i) * elem, elem);
    sum += mix64(bits ^ mix64(global * 0x9e3779b97f4a7c15ULL + 1));
  }
  return sum;
}

at::Tensor random_of(at::ScalarType dtype, at::IntArrayRef shape) {
  at::Tensor t = at::randint(-100000, 100000, shape, at::kLong);
  return dtype == at::kBool ? t.gt(0) : t.to(dtype);
}

TEST(BoxChecksum, EqualsTheFormulaForEveryElementSizeAndBox) {
  at::manual_seed(1);
  const std::vector<int64_t> global = {5, 7, 37};
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kDouble, at::kBool, at::kLong}) {
    const at::Tensor whole = random_of(dtype, global);
    // Boxes that are whole rows, partial rows, a single element and the whole tensor.
    const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> boxes = {
        {{0, 0, 0}, {5, 7, 37}}, {{1, 0, 0}, {3, 7, 37}}, {{1, 2, 0}, {3, 4, 37}},
        {{2, 3, 5}, {2, 3, 31}}, {{4, 6, 36}, {1, 1, 1}}, {{0, 6, 0}, {5, 1, 37}}};
    for (const auto& [offset, size] : boxes) {
      at::Tensor box = whole;
      for (size_t d = 0; d < size.size(); ++d) box = box.narrow(static_cast<int64_t>(d), offset[d], size[d]);
      box = box.contiguous();
      EXPECT_EQ(box_checksum(box, offset, global), reference(box, offset, global))
          << c10::toString(dtype) << " box at " << at::IntArrayRef(offset) << " of " << at::IntArrayRef(size);
    }
  }
}

TEST(BoxChecksum, DisjointBoxesAddUpToTheWholeAndLongRunsSplitAcrossThreads) {
  at::manual_seed(2);
  const int64_t rows = 3, cols = (int64_t{1} << 20) + 13;  // runs longer than a thread's grain
  const at::Tensor whole = at::randn({rows, cols});
  const uint64_t all = box_checksum(whole, {0, 0}, {rows, cols});
  EXPECT_EQ(all, reference(whole, {0, 0}, {rows, cols}));
  const int64_t split = 777;
  const uint64_t left = box_checksum(whole.narrow(1, 0, split).contiguous(), {0, 0}, {rows, cols});
  const uint64_t right = box_checksum(whole.narrow(1, split, cols - split).contiguous(), {0, split}, {rows, cols});
  EXPECT_EQ(left + right, all);
  at::Tensor changed = whole.clone();
  changed[1][cols - 1] = changed[1][cols - 1].item<float>() + 1.0f;
  EXPECT_NE(box_checksum(changed, {0, 0}, {rows, cols}), all);
}

TEST(BoxChecksum, IsPinnedSoCheckpointsWrittenEarlierStillVerify) {
  // Values written by the format's first implementation (store version 2).
  EXPECT_EQ(box_checksum(at::arange(10, at::kFloat), {0}, {10}), 14009315727004650059u);
  EXPECT_EQ(box_checksum(at::arange(6, at::kBFloat16).reshape({2, 3}), {1, 0}, {4, 3}), 6606188946828270997u);
  EXPECT_EQ(box_checksum(at::scalar_tensor(3.5, at::kDouble), {}, {}), 3364822922340386744u);
}

}  // namespace
}  // namespace lft::ckpt
