// The CPU memory counter keeps LibTorch's allocator contract on every CPU: raw_allocate() and
// raw_deallocate() work through it (oneDNN's bf16 kernels call them on AMX/AVX512-BF16 CPUs), and
// a bf16 matmul runs with it installed, whichever kernels this CPU takes.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>

#include <cstdint>
#include <cstring>

#include "lft/runtime/memory.h"

namespace lft {
namespace {

TEST(CpuMemoryCounter, DataPtrContextIsItsData) {
  install_cpu_memory_counter();
  c10::Allocator* allocator = c10::GetCPUAllocator();
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{4096}, std::size_t{1} << 20}) {
    const c10::DataPtr p = allocator->allocate(n);
    EXPECT_EQ(p.get(), p.get_context()) << n << " bytes";
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p.get()) % c10::gAlignment, 0u) << n << " bytes";
  }
}

// As LibTorch's own allocator: zero bytes have no memory. Parameters built without memory
// (model::unallocated_tensor) are recognised by their null data pointer; a non-null one made
// sharded engines read a 0-byte block as a whole weight (an intermittent crash in bf16 runs).
TEST(CpuMemoryCounter, ZeroBytesHaveANullPointer) {
  install_cpu_memory_counter();
  EXPECT_EQ(c10::GetCPUAllocator()->allocate(0).get(), nullptr);
  const c10::Storage storage(c10::Storage::use_byte_size_t(), 0, c10::GetCPUAllocator(), /*resizable=*/true);
  EXPECT_EQ(storage.data(), nullptr);
}

TEST(CpuMemoryCounter, RawAllocateAndDeallocateThroughTheInstalledAllocator) {
  install_cpu_memory_counter();
  c10::Allocator* allocator = c10::GetCPUAllocator();
  const std::int64_t before = cpu_bytes_in_use();
  void* p = allocator->raw_allocate(1000);
  ASSERT_NE(p, nullptr);
  std::memset(p, 7, 1000);
  EXPECT_EQ(cpu_bytes_in_use(), before + 1000);
  allocator->raw_deallocate(p);
  EXPECT_EQ(cpu_bytes_in_use(), before);
}

TEST(CpuMemoryCounter, CountsTensorsAndTheirRelease) {
  install_cpu_memory_counter();
  const std::int64_t before = cpu_bytes_in_use();
  reset_cpu_peak_bytes();
  {
    const at::Tensor t = at::empty({256, 256}, at::kFloat);
    EXPECT_EQ(cpu_bytes_in_use(), before + 256 * 256 * 4);
  }
  EXPECT_EQ(cpu_bytes_in_use(), before);
  EXPECT_GE(cpu_peak_bytes_in_use(), before + 256 * 256 * 4);
  EXPECT_GE(cpu_largest_allocation(), 256 * 256 * 4);
}

TEST(CpuMemoryCounter, Bf16MatmulAndItsBackwardRun) {
  install_cpu_memory_counter();
  at::manual_seed(3);
  const at::Tensor a = at::randn({64, 96});
  const at::Tensor b = at::randn({96, 80});
  const at::Tensor a16 = a.to(at::kBFloat16).requires_grad_(true);
  const at::Tensor b16 = b.to(at::kBFloat16).requires_grad_(true);
  const at::Tensor c16 = at::matmul(a16, b16);
  c16.sum().backward();
  const at::Tensor reference = at::matmul(a16.detach().to(at::kFloat), b16.detach().to(at::kFloat));
  // bf16 output rounding: 8 bits of mantissa on values of magnitude ~sqrt(96) * 4.
  EXPECT_LT((c16.to(at::kFloat) - reference).abs().max().item<double>(), 0.25);
  ASSERT_TRUE(a16.grad().defined());
  EXPECT_EQ(a16.grad().scalar_type(), at::kBFloat16);
  // A linear layer in bf16 (the path autocast takes in training).
  const at::Tensor w = at::randn({48, 96}).to(at::kBFloat16);
  EXPECT_EQ(at::linear(a16.detach(), w).sizes(), (at::IntArrayRef{64, 48}));
}

}  // namespace
}  // namespace lft
