// An allocator-level count of CPU tensor memory: the bytes of tensor storage alive now, and the
// peak since the last reset. Peak RSS also counts the libraries, the allocator's caches and pages
// freed but not returned, so memory tests compare these counts with what an algorithm needs.
#pragma once

#include <cstdint>

namespace lft {

// Routes LibTorch's CPU allocations through the counter (idempotent). Storage allocated before
// the call is not counted, so call it before the model is built.
void install_cpu_memory_counter();
bool cpu_memory_counter_installed();
std::int64_t cpu_bytes_in_use();
std::int64_t cpu_peak_bytes_in_use();
// Also resets cpu_largest_allocation().
void reset_cpu_peak_bytes();
// The largest single tensor allocation since the last reset (shows which tensors a step forms).
std::int64_t cpu_largest_allocation();

// Resident bytes of this process now (/proc/self/statm).
std::int64_t current_rss_bytes();
// What this node's ranks can hold: the memory the kernel reports available (MemAvailable) plus
// what the node's `local_ranks` processes already hold (each about this one's RSS), at most 95% of
// the node's memory (the rest is the kernel's and the page cache's working room). Without
// /proc/meminfo, 95% of the node's memory.
double usable_node_memory_bytes(int local_ranks);

}  // namespace lft
