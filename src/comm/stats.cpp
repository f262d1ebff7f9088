#include "lft/comm/stats.h"

#include <cstdio>

namespace lft {

const char* coll_kind_name(CollKind kind) {
  switch (kind) {
    case CollKind::AllReduce: return "all_reduce";
    case CollKind::ReduceScatter: return "reduce_scatter";
    case CollKind::AllGather: return "all_gather";
    case CollKind::Broadcast: return "broadcast";
    case CollKind::Send: return "send";
    case CollKind::Recv: return "recv";
    case CollKind::Barrier: return "barrier";
    case CollKind::AllToAll: return "all_to_all";
  }
  return "?";
}

std::uint64_t CommStats::total_calls() const {
  std::uint64_t n = 0;
  for (const auto& s : per_kind_) n += s.calls;
  return n;
}

std::uint64_t CommStats::total_bytes() const {
  std::uint64_t n = 0;
  for (const auto& s : per_kind_) n += s.bytes;
  return n;
}

std::string CommStats::summary() const {
  std::string out;
  for (int k = 0; k < kCollKindCount; ++k) {
    const CollStats& s = per_kind_[k];
    if (s.calls == 0) continue;
    char line[160];
    std::snprintf(line, sizeof(line), "%s: %llu calls, %s, %.3f s\n",
                  coll_kind_name(static_cast<CollKind>(k)),
                  static_cast<unsigned long long>(s.calls),
                  format_bytes(static_cast<double>(s.bytes)).c_str(), s.seconds);
    out += line;
  }
  return out;
}

double bus_bytes(CollKind kind, double payload_bytes, int group_size) {
  const double n = group_size;
  if (group_size <= 1) return 0.0;
  switch (kind) {
    case CollKind::AllReduce: return payload_bytes * 2.0 * (n - 1) / n;
    case CollKind::AllGather:
    case CollKind::ReduceScatter:
    case CollKind::AllToAll: return payload_bytes * (n - 1) / n;
    case CollKind::Broadcast:
    case CollKind::Send:
    case CollKind::Recv: return payload_bytes;
    case CollKind::Barrier: return 0.0;
  }
  return 0.0;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof(text), u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return text;
}

}  // namespace lft
