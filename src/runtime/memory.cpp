#include "lft/runtime/memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>
#include <c10/core/impl/alloc_cpu.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <atomic>
#include <cstdio>
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

// Each allocation carries its size and its block's in a header just before the data. The header is one alignment
// unit long, so the data keeps c10's alignment. The DataPtr's context is the data pointer itself:
// LibTorch's contract for raw_allocate()/raw_deallocate() (oneDNN's bf16 kernels use them), which
// an allocator wrapping another allocation's DataPtr in a separate context breaks.
constexpr std::size_t kHeader = std::max<std::size_t>(c10::gAlignment, 2 * sizeof(std::int64_t));

// Large blocks are kept for reuse. glibc serves each allocation above its mmap threshold (at
// most 32 MiB) with a fresh mapping and unmaps it on free, so every step would fault in its
// activations page by page again (3-4% of a step of the benchmark model). A training step asks
// for the same sizes each time: a freed block of >= kCachedMin bytes waits in a list of its exact
// size, up to the cache limit in all (beyond, blocks are freed as before). Cached blocks are not in
// use, so the counter does not count them; peak RSS does. So that they do not pile up beside the
// tensors, trim_cpu_cache() (once a step) frees the blocks no allocation took since the previous
// trim (the loading phase's, a batch shape that did not recur), and the trainer sets the limit to
// what a step allocates and frees again (its estimate), not a fixed size.
constexpr std::size_t kCachedMin = std::size_t{1} << 20;
std::atomic<std::size_t> cache_limit{std::size_t{2} << 30};
// Tensors in use plus cached blocks stay within this (blocks are freed to keep it): the process
// then holds about the estimated peak of its tensors, not that plus idle blocks of other sizes.
std::atomic<std::int64_t> memory_budget{INT64_MAX};
struct CachedBlock {
  char* base;
  std::uint64_t epoch;  // of the trim period in which it was freed
};
std::mutex cache_mutex;
std::unordered_map<std::size_t, std::vector<CachedBlock>> cache;  // total size -> free blocks
std::size_t cached_bytes = 0;
std::uint64_t cache_epoch = 0;

// The block size of an allocation of `total` bytes (header included): below kCachedMin the
// request itself; above, rounded up to one of 8 sizes per doubling (at most 12.5% over). A step's
// tensors change shape a little from step to step (a packed sequence's length, padded to 8), and
// exact sizes would then miss the cache and fault in fresh pages every step (measured at real
// size: the kernel's page zeroing 29% of a run's samples). The tail a smaller request leaves
// untouched costs no resident memory.
std::size_t block_size(std::size_t total) {
  if (total < kCachedMin) return total;
  std::size_t power = kCachedMin;
  while (power <= total / 2) power *= 2;
  const std::size_t step = power / 8;
  return (total + step - 1) / step * step;
}

char* take_cached(std::size_t total) {
  if (total < kCachedMin) return nullptr;
  std::lock_guard<std::mutex> lock(cache_mutex);
  auto it = cache.find(total);
  if (it == cache.end() || it->second.empty()) return nullptr;
  char* base = it->second.back().base;
  it->second.pop_back();
  cached_bytes -= total;
  return base;
}

bool keep_cached(char* base, std::size_t total) {
  if (total < kCachedMin) return false;
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (cached_bytes + total > cache_limit.load()) return false;
  if (in_use.load() + static_cast<std::int64_t>(cached_bytes + total) > memory_budget.load()) return false;
  cache[total].push_back({base, cache_epoch});
  cached_bytes += total;
  return true;
}

// Before a fresh allocation of `total` bytes: frees cached blocks (the largest sizes first) until
// the tensors in use, the cache and the new block fit the budget. Blocks below kCachedMin (most
// allocations) skip it: they never take the lock, as they never do in take_cached.
void make_room(std::size_t total) {
  const std::int64_t budget = memory_budget.load();
  if (total < kCachedMin || budget == INT64_MAX) return;
  std::vector<char*> freed;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto over = [&] { return in_use.load() + static_cast<std::int64_t>(cached_bytes + total) > budget; };
    if (cached_bytes == 0 || !over()) return;
    std::vector<std::size_t> sizes;
    for (const auto& [size, blocks] : cache)
      if (!blocks.empty()) sizes.push_back(size);
    std::sort(sizes.rbegin(), sizes.rend());
    for (const std::size_t size : sizes) {
      auto& blocks = cache[size];
      while (!blocks.empty() && over()) {
        freed.push_back(blocks.back().base);
        blocks.pop_back();
        cached_bytes -= size;
      }
      if (!over()) break;
    }
  }
  for (char* base : freed) c10::free_cpu(base);
}

void release(void* data) {
  if (data == nullptr) return;
  char* base = static_cast<char*>(data) - kHeader;
  std::int64_t bytes = 0, block = 0;
  std::memcpy(&bytes, base, sizeof bytes);
  std::memcpy(&block, base + sizeof bytes, sizeof block);
  in_use.fetch_sub(bytes);
  if (!keep_cached(base, static_cast<std::size_t>(block))) c10::free_cpu(base);
}

class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    // As LibTorch's own CPU allocator: no memory for no bytes. A storage of 0 bytes has a null
    // data pointer, which parameters built without memory (parameter_storage.h) rely on.
    if (n == 0) return {nullptr, nullptr, &release, c10::Device(c10::DeviceType::CPU)};
    const std::size_t block = block_size(n + kHeader);
    char* base = take_cached(block);
    if (base == nullptr) {
      make_room(block);
      base = static_cast<char*>(c10::alloc_cpu(block));
    }
    const auto bytes = static_cast<std::int64_t>(n);
    const auto block_bytes = static_cast<std::int64_t>(block);
    std::memcpy(base, &bytes, sizeof bytes);
    std::memcpy(base + sizeof bytes, &block_bytes, sizeof block_bytes);
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

void set_cpu_cache_limit(std::int64_t bytes) { cache_limit.store(static_cast<std::size_t>(std::max<std::int64_t>(0, bytes))); }
void set_cpu_memory_budget(std::int64_t bytes) { memory_budget.store(bytes); }

std::int64_t cpu_cached_bytes() {
  std::lock_guard<std::mutex> lock(cache_mutex);
  return static_cast<std::int64_t>(cached_bytes);
}

std::int64_t current_rss_bytes() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<std::int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

double usable_node_memory_bytes(int local_ranks) {
  const double total = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  double available = -1;
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char key[64];
    long long kib = 0;
    while (std::fscanf(f, "%63s %lld kB", key, &kib) == 2)
      if (std::strcmp(key, "MemAvailable:") == 0) {
        available = static_cast<double>(kib) * 1024.0;
        break;
      }
    std::fclose(f);
  }
  const double cap = 0.95 * total;
  if (available < 0) return cap;
  return std::min(cap, available + static_cast<double>(local_ranks) * static_cast<double>(current_rss_bytes()));
}

void trim_cpu_cache(bool everything) {
  std::vector<char*> stale;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    for (auto& [total, blocks] : cache) {
      auto keep = std::partition(blocks.begin(), blocks.end(), [&](const CachedBlock& b) { return !everything && b.epoch == cache_epoch; });
      for (auto it = keep; it != blocks.end(); ++it) {
        stale.push_back(it->base);
        cached_bytes -= total;
      }
      blocks.erase(keep, blocks.end());
    }
    ++cache_epoch;
  }
  for (char* base : stale) c10::free_cpu(base);
}

}  // namespace lft
