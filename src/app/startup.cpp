#include "lft/app/startup.h"

#include <ATen/ATen.h>
#include <H5public.h>
#include <gperftools/tcmalloc.h>
#include <mpi.h>
#include <torch/version.h>

#include <chrono>
#include <cstdio>
#include <map>

#include "lft/build_config.h"
#if LFT_HAS_NCCL
#include "lft/comm/nccl_communicator.h"
#endif
#include "lft/model/fused.h"
#include "lft/runtime/error.h"

namespace lft::app {
namespace {

// "vm x4, node2 x4"
std::string host_summary(const std::vector<std::string>& hosts) {
  std::map<std::string, int> count;
  std::vector<std::string> order;
  for (const auto& h : hosts)
    if (count[h]++ == 0) order.push_back(h);
  std::string out;
  for (const auto& h : order) out += (out.empty() ? "" : ", ") + h + " x" + std::to_string(count[h]);
  return out;
}

// "LibTorch 2.11.0, Open MPI v4.1.4, HDF5 1.10.8, NCCL 2.28.9" for the startup log.
std::string library_versions() {
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(mpi, &len);
  std::string mpi_line(mpi);
  mpi_line = mpi_line.substr(0, mpi_line.find_first_of(",\n"));
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  std::string out = std::string("LibTorch ") + TORCH_VERSION + ", " + mpi_line + ", HDF5 " +
                    std::to_string(major) + "." + std::to_string(minor) + "." +
                    std::to_string(release);
#if LFT_HAS_NCCL
  out += ", NCCL " + nccl_version();
#else
  out += ", NCCL not built";
#endif
  int tc_major = 0, tc_minor = 0;
  const char* tc_patch = nullptr;
  tc_version(&tc_major, &tc_minor, &tc_patch);
  return out + ", tcmalloc " + std::to_string(tc_major) + "." + std::to_string(tc_minor);
}

std::string fmt(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

}  // namespace

std::string startup_report(const Runtime& rt, const config::Config& cfg,
                           const engine::EngineInfo& engine, const MeshShape& shape, int threads,
                           const DeviceChoice& device) {
  std::string out = "lftrain " + std::string(LFT_VERSION) + "\n";
  out += "  launcher   " + rt.launcher() + "\n";
  out += "  world      " + std::to_string(rt.world_size()) + " rank(s) on " +
         std::to_string(rt.node_count()) + " node(s): " + host_summary(rt.hosts()) +
         "; this node " + std::to_string(rt.local_size()) + " rank(s)\n";
  out += "  threads    " + std::to_string(threads) + " per rank" +
         (cfg.is_set("intra_op_threads") ? " (intra_op_threads)" : " (cores on the node / ranks on the node)") + "\n";
  out += "  device     " + device.name + (device.cuda ? "" : " (" + device.cpu_reason + ")") + "\n";
  out += "  libraries  " + library_versions() + "\n";
  out += "  config     " + cfg.source_name() +
         (cfg.overrides().empty() ? "" : " + " + std::to_string(cfg.overrides().size()) + " override(s)") + ", read as " +
         cfg.format() + "\n";
  out += "  engine     " + engine.name() + ": " + engine.summary + "\n";
  out += "  mesh       " + shape.str() + "\n";
  out += "  timeouts   comm_timeout " + fmt("%g", cfg.real("comm_timeout")) + " s, setup_timeout " +
         fmt("%g", cfg.real("setup_timeout")) + " s\n";
  out += "  kernels    fused " + model::fused_kernels_name(model::fused_kernels()) +
         (model::fused_kernels() != 0 ? " (" + model::kernel_isa() + " build)" : "") +
         (model::fused_kernels() == 0 && cfg.string("fused_kernels") != "none" ? " (this CPU lacks AVX2/FMA)" : "") +
         (device.cuda ? " (CPU kernels: CUDA tensors take the plain formulas)" : "") + "\n";
  const double progress_us = cfg.real("comm_progress_us");
  out += "  progress   " +
         (progress_us > 0 ? "MPI progress thread every " + fmt("%g", progress_us) + " us while a collective is in flight"
                          : std::string("no MPI progress thread (comm_progress_us = 0)"));
  return out;
}

std::string gpu_binding_report(const std::vector<std::string>& device_names) {
  std::string out = "  gpus       which GPU each rank drives (as that rank numbers its visible GPUs):";
  for (size_t r = 0; r < device_names.size(); ++r) out += "\n    rank " + std::to_string(r) + ": " + device_names[r];
  return out;
}

std::string check_communication(MpiCommunicator& world, DeviceMesh& mesh) {
  const MeshShape& shape = mesh.shape();
  const int me = world.rank();
  std::string out = "communication check:";
  auto check = [&](MpiCommunicator& comm, auto&& member_of_group) {
    // Sum of the world ranks in my group, computed from the mesh, against the all-reduce.
    int64_t expected = 0;
    for (int r = 0; r < world.size(); ++r)
      if (member_of_group(mesh_coord(shape, r))) expected += r;
    auto t = at::full({1}, static_cast<int64_t>(me), at::kLong);
    const auto start = std::chrono::steady_clock::now();
    comm.all_reduce(t);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (t.item<int64_t>() != expected)
      fatal_one("communication check failed on communicator '" + comm.name() + "': all_reduce gave " +
                std::to_string(t.item<int64_t>()) + ", expected " + std::to_string(expected));
    out += " " + comm.name() + "(" + std::to_string(comm.size()) + ") ok " + fmt("%.2f ms", ms) + ";";
  };
  const MeshCoord mine = mesh.coord();
  check(world, [](const MeshCoord&) { return true; });
  for (int d = 0; d < kMeshDims; ++d) {
    check(mesh.comm(static_cast<MeshDim>(d)), [&](const MeshCoord& c) {
      for (int o = 0; o < kMeshDims; ++o)
        if (o != d && c[o] != mine[o]) return false;
      return true;
    });
  }
  check(mesh.dp(), [&](const MeshCoord& c) {
    for (const MeshDim o : {MeshDim::PP, MeshDim::CP, MeshDim::TP})
      if (c[static_cast<int>(o)] != mine[static_cast<int>(o)]) return false;
    return true;
  });
  if (shape.ep > 1) {
    // Expert parallelism's groups, borrowed from dp x cp (device_mesh.h).
    const int place = DeviceMesh::dp_cp_place(shape, mine);
    auto same_outside = [&](const MeshCoord& c) {
      return c[static_cast<int>(MeshDim::PP)] == mine[static_cast<int>(MeshDim::PP)] &&
             c[static_cast<int>(MeshDim::TP)] == mine[static_cast<int>(MeshDim::TP)];
    };
    check(mesh.ep(), [&](const MeshCoord& c) {
      return same_outside(c) && DeviceMesh::dp_cp_place(shape, c) / shape.ep == place / shape.ep;
    });
    check(mesh.edp(), [&](const MeshCoord& c) {
      return same_outside(c) && DeviceMesh::dp_cp_place(shape, c) % shape.ep == place % shape.ep;
    });
  }
  return out;
}

}  // namespace lft::app
