// Where the mesh's ranks run: host by host, and whether each group of the innermost dims (tp, then
// dp_shard) stays inside one host, where its traffic is cheapest. Ranks fill the mesh tp fastest,
// so a launcher that places consecutive ranks on one host (block distribution: srun's default,
// mpirun --map-by slot) keeps those groups inside hosts whenever their size divides the ranks per
// host.
#pragma once

#include <string>
#include <vector>

#include "lft/mesh/device_mesh.h"

namespace lft::app {

// "placement  2 host(s) ..." with one line per host: its ranks and their mesh coordinates, then
// one line per mesh dim of size > 1 saying whether its groups stay inside one host.
std::string placement_report(const MeshShape& shape, const std::vector<std::string>& hosts);

// One warning per innermost dim (tp, dp_shard) whose groups span hosts; empty when none does.
std::vector<std::string> placement_warnings(const MeshShape& shape, const std::vector<std::string>& hosts);

// "0-3", "0,2,5-6": ascending whole numbers, runs collapsed.
std::string compress_ranges(std::vector<int> values);

}  // namespace lft::app
