// Per-communicator counters, kept by the communicator itself (callers never touch them).
//
// Bytes convention (docs/communication.md): `bytes` is the payload of each call as nccl-tests
// counts its "size": the tensor for all_reduce and broadcast, the full (gathered) buffer for
// all_gather, the full (input) buffer for reduce_scatter and all_to_all, the message for send/recv. It is what
// the backend was handed: a 16-bit reduction on the MPI backend travels as fp32, and counts so. An
// all_to_all with uneven blocks counts as the even one that sends as many bytes to the other ranks
// (what leaves the rank x n / (n - 1)), so that bus_bytes() is what leaves the rank.
// bus_bytes() turns it into the bytes each rank moves over its links with a ring algorithm.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace lft {

enum class CollKind { AllReduce, ReduceScatter, AllGather, Broadcast, Send, Recv, Barrier, AllToAll };
constexpr int kCollKindCount = 8;
const char* coll_kind_name(CollKind kind);

struct CollStats {
  std::uint64_t calls = 0;
  std::uint64_t bytes = 0;
  double seconds = 0.0;  // from posting the call to its completion, summed
  double waited_seconds = 0.0;  // blocked in Work::wait: the part no computation hid
};

class CommStats {
 public:
  const CollStats& operator[](CollKind kind) const { return per_kind_[index(kind)]; }
  CollStats& at(CollKind kind) { return per_kind_[index(kind)]; }
  std::uint64_t total_calls() const;
  std::uint64_t total_bytes() const;
  void reset() { per_kind_ = {}; }
  // One line per kind that was called: "all_reduce: 12 calls, 48.0 MiB, 0.31 s".
  std::string summary() const;

 private:
  static int index(CollKind kind) { return static_cast<int>(kind); }
  std::array<CollStats, kCollKindCount> per_kind_{};
};

// Bytes each rank sends over its links for `payload_bytes` of `kind` among `group_size` ranks
// (ring algorithms, as nccl-tests' bus bandwidth): all_reduce 2(n-1)/n, all_gather and
// reduce_scatter and all_to_all (n-1)/n, broadcast/send/recv 1, barrier 0.
double bus_bytes(CollKind kind, double payload_bytes, int group_size);

std::string format_bytes(double bytes);

}  // namespace lft
