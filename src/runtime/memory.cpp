#include "lft/runtime/memory.h"

#include <c10/core/CPUAllocator.h>

#include <atomic>

namespace lft {
namespace {

std::atomic<std::int64_t> in_use{0};
std::atomic<std::int64_t> peak{0};
std::atomic<std::int64_t> largest{0};

void note_allocation(std::int64_t bytes) {
  const std::int64_t now = in_use.fetch_add(bytes) + bytes;
  std::int64_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
  std::int64_t big = largest.load();
  while (bytes > big && !largest.compare_exchange_weak(big, bytes)) {
  }
}

// What a counted allocation keeps: the underlying allocation and its size.
struct Counted {
  c10::DataPtr inner;
  std::int64_t bytes;
};

void release(void* ctx) {
  auto* counted = static_cast<Counted*>(ctx);
  in_use.fetch_sub(counted->bytes);
  delete counted;  // frees the inner allocation with its own deleter
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    note_allocation(static_cast<std::int64_t>(n));
    return {data, new Counted{std::move(inner), static_cast<std::int64_t>(n)}, &release, device};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    base_->copy_data(dest, src, count);
  }

 private:
  c10::Allocator* base_;
};

std::atomic<bool> installed{false};

}  // namespace

void install_cpu_memory_counter() {
  if (installed.exchange(true)) return;
  static CountingAllocator counter(c10::GetCPUAllocator());
  c10::SetCPUAllocator(&counter, /*priority=*/100);
}

bool cpu_memory_counter_installed() { return installed.load(); }
std::int64_t cpu_bytes_in_use() { return in_use.load(); }
std::int64_t cpu_peak_bytes_in_use() { return peak.load(); }
void reset_cpu_peak_bytes() {
  peak.store(in_use.load());
  largest.store(0);
}
std::int64_t cpu_largest_allocation() { return largest.load(); }

}  // namespace lft
