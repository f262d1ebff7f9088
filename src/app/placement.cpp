#include "lft/app/placement.h"

#include <algorithm>
#include <map>
#include <set>

namespace lft::app {
namespace {

constexpr MeshDim kInnermost[] = {MeshDim::TP, MeshDim::CP, MeshDim::DPShard};

// The groups along `dim`: ranks that differ only in that coordinate, keyed by the others.
std::map<MeshCoord, std::vector<int>> groups_along(const MeshShape& shape, MeshDim dim) {
  std::map<MeshCoord, std::vector<int>> groups;
  for (int r = 0; r < shape.world_size(); ++r) {
    MeshCoord key = mesh_coord(shape, r);
    key[static_cast<int>(dim)] = 0;
    groups[key].push_back(r);
  }
  return groups;
}

std::set<std::string> hosts_of(const std::vector<int>& ranks, const std::vector<std::string>& hosts) {
  std::set<std::string> out;
  for (const int r : ranks) out.insert(r < static_cast<int>(hosts.size()) ? hosts[r] : "?");
  return out;
}

struct Spanning {
  int groups = 0;
  int spanning = 0;
  std::vector<int> example;  // the first spanning group's ranks
};

Spanning spanning_groups(const MeshShape& shape, MeshDim dim, const std::vector<std::string>& hosts) {
  Spanning s;
  for (const auto& [key, ranks] : groups_along(shape, dim)) {
    ++s.groups;
    if (hosts_of(ranks, hosts).size() > 1 && s.spanning++ == 0) s.example = ranks;
  }
  return s;
}

std::string join(const std::set<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

}  // namespace

std::string compress_ranges(std::vector<int> values) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  std::string out;
  for (std::size_t i = 0; i < values.size();) {
    std::size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(values[i]);
    if (j > i) out += "-" + std::to_string(values[j]);
    i = j + 1;
  }
  return out;
}

std::string placement_report(const MeshShape& shape, const std::vector<std::string>& hosts) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> ranks_of;
  for (int r = 0; r < shape.world_size(); ++r) {
    const std::string& h = r < static_cast<int>(hosts.size()) ? hosts[r] : "?";
    if (ranks_of[h].empty()) order.push_back(h);
    ranks_of[h].push_back(r);
  }
  std::size_t width = 0;
  for (const auto& h : order) width = std::max(width, h.size());
  std::string out = "placement  " + std::to_string(order.size()) + " host(s), host by host:";
  for (const auto& h : order) {
    const auto& ranks = ranks_of[h];
    out += "\n  " + h + std::string(width - h.size(), ' ') + "  ranks " + compress_ranges(ranks) + " (";
    for (int d = 0; d < kMeshDims; ++d) {
      std::vector<int> coords;
      for (const int r : ranks) coords.push_back(mesh_coord(shape, r)[d]);
      out += std::string(d ? ", " : "") + mesh_dim_name(static_cast<MeshDim>(d)) + " " + compress_ranges(coords);
    }
    out += ")";
  }
  for (int d = kMeshDims - 1; d >= 0; --d) {
    const auto dim = static_cast<MeshDim>(d);
    if (shape[dim] == 1) continue;
    const Spanning s = spanning_groups(shape, dim, hosts);
    out += "\n  " + std::string(mesh_dim_name(dim)) + " groups (" + std::to_string(shape[dim]) + " ranks each): ";
    out += s.spanning == 0 ? "each inside one host"
                           : std::to_string(s.spanning) + " of " + std::to_string(s.groups) + " span hosts";
  }
  return out;
}

std::vector<std::string> placement_warnings(const MeshShape& shape, const std::vector<std::string>& hosts) {
  std::vector<std::string> out;
  for (const MeshDim dim : kInnermost) {
    if (shape[dim] == 1) continue;
    const Spanning s = spanning_groups(shape, dim, hosts);
    if (s.spanning == 0) continue;
    out.push_back(std::to_string(s.spanning) + " of " + std::to_string(s.groups) + " " + mesh_dim_name(dim) +
                  " groups span hosts (e.g. ranks " + compress_ranges(s.example) + " on " +
                  join(hosts_of(s.example, hosts)) + "), so their collectives cross the network. Place " +
                  "consecutive ranks on one host (srun's default block distribution; mpirun --map-by slot) " +
                  "and keep " + mesh_dim_name(dim) + " a divisor of the ranks per host.");
  }
  return out;
}

}  // namespace lft::app
