#include "lft/runtime/memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

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

// Each allocation carries its size in a header just before the data. The header is one alignment
// unit long, so the data keeps c10's alignment. The DataPtr's context is the data pointer itself:
// LibTorch's contract for raw_allocate()/raw_deallocate() (oneDNN's bf16 kernels use them), which
// an allocator wrapping another allocation's DataPtr in a separate context breaks.
constexpr std::size_t kHeader = std::max<std::size_t>(c10::gAlignment, sizeof(std::int64_t));

// Large blocks are kept for reuse. glibc serves each allocation above its mmap threshold (at
// most 32 MiB) with a fresh mapping and unmaps it on free, so every step would fault in its
// activations page by page again (3-4% of a step of the benchmark model). A training step asks
// for the same sizes each time: a freed block of >= kCachedMin bytes waits in a list of its exact
// size, up to kCacheLimit bytes in all (beyond, blocks are freed as before). Cached blocks are
// not in use, so the counter does not count them; peak RSS does.
constexpr std::size_t kCachedMin = std::size_t{1} << 20;
constexpr std::size_t kCacheLimit = std::size_t{2} << 30;
std::mutex cache_mutex;
std::unordered_map<std::size_t, std::vector<char*>> cache;  // total size -> free blocks
std::size_t cached_bytes = 0;

char* take_cached(std::size_t total) {
  if (total < kCachedMin) return nullptr;
  std::lock_guard<std::mutex> lock(cache_mutex);
  auto it = cache.find(total);
  if (it == cache.end() || it->second.empty()) return nullptr;
  char* base = it->second.back();
  it->second.pop_back();
  cached_bytes -= total;
  return base;
}

bool keep_cached(char* base, std::size_t total) {
  if (total < kCachedMin) return false;
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (cached_bytes + total > kCacheLimit) return false;
  cache[total].push_back(base);
  cached_bytes += total;
  return true;
}

void release(void* data) {
  if (data == nullptr) return;
  char* base = static_cast<char*>(data) - kHeader;
  std::int64_t bytes = 0;
  std::memcpy(&bytes, base, sizeof bytes);
  in_use.fetch_sub(bytes);
  if (!keep_cached(base, static_cast<std::size_t>(bytes) + kHeader)) c10::free_cpu(base);
}

class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    // As LibTorch's own CPU allocator: no memory for no bytes. A storage of 0 bytes has a null
    // data pointer, which parameters built without memory (parameter_storage.h) rely on.
    if (n == 0) return {nullptr, nullptr, &release, c10::Device(c10::DeviceType::CPU)};
    char* base = take_cached(n + kHeader);
    if (base == nullptr) base = static_cast<char*>(c10::alloc_cpu(n + kHeader));
    const auto bytes = static_cast<std::int64_t>(n);
    std::memcpy(base, &bytes, sizeof bytes);
    note_allocation(bytes);
    void* data = base + kHeader;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

std::atomic<bool> installed{false};

}  // namespace

void install_cpu_memory_counter() {
  if (installed.exchange(true)) return;
  static CountingAllocator counter;
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
