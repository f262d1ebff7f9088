#include "lft/runtime/memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>
#include <c10/core/impl/alloc_cpu.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

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

// Freed blocks go straight back to malloc, which is tcmalloc (CMakeLists.txt): its page heap keeps
// the freed spans of a step and hands them to the next step's tensors of any size, so steady-state
// steps fault in no fresh pages. (An own cache of freed blocks by exact size, which glibc's
// munmap of every large block once needed, held 5% more resident memory under tcmalloc at the
// same speed and page faults: docs/performance.md.)
void release(void* data) {
  if (data == nullptr) return;
  char* base = static_cast<char*>(data) - kHeader;
  std::int64_t bytes = 0;
  std::memcpy(&bytes, base, sizeof bytes);
  in_use.fetch_sub(bytes);
  c10::free_cpu(base);
}

class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    // As LibTorch's own CPU allocator: no memory for no bytes. A storage of 0 bytes has a null
    // data pointer, which parameters built without memory (parameter_storage.h) rely on.
    if (n == 0) return {nullptr, nullptr, &release, c10::Device(c10::DeviceType::CPU)};
    char* base = static_cast<char*>(c10::alloc_cpu(n + kHeader));
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

}  // namespace lft
