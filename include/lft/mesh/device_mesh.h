// The device mesh: the world's ranks laid out as pp x dp_replicate x dp_shard x cp x tp, tp
// innermost (a tensor-parallel group sits on consecutive ranks, so on one node), then the
// context-parallel group, pp outermost. Each dim, the flattened data-parallel dim
// dp = dp_replicate x dp_shard, and, with cp > 1, the groups that hold copies or shards of the
// same parameters (dp x cp and dp_shard x cp, as torchtitan's dp_cp and dp_shard_cp: the cp ranks
// of a sequence share its parameters' gradients) get two communicators:
//   host   (comm, dp): MPI, for values the host holds (CPU tensors: metadata, flags, timings);
//   device (device_comm, device_dp): for the tensors the model lives in, on the mesh's device:
//          the MPI ones on a CPU run, NCCL on GPUs, or MPI staged through host memory when
//          several ranks share one GPU (DeviceComms::MpiStaged).
// Each communicator rejects a tensor on another device than its own, on every backend.
//
// Expert parallelism borrows its ranks from the ranks that share parameters (dp x cp, ordered
// dp-major as device_dp_cp()): `ep` consecutive ones of them form an expert-parallel group (each
// holds its share of every MoE layer's experts and they exchange tokens), and the ranks at the same
// place in every such group form the expert-data-parallel group (they hold the same experts and
// sum their gradients), as torchtitan's ep borrows from dp_shard x cp.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "lft/comm/mpi_communicator.h"

namespace lft {

enum class MeshDim { PP = 0, DPReplicate = 1, DPShard = 2, CP = 3, TP = 4 };
constexpr int kMeshDims = 5;
const char* mesh_dim_name(MeshDim dim);  // "pp", "dp_replicate", "dp_shard", "cp", "tp"

struct MeshShape {
  std::array<int, kMeshDims> sizes{1, 1, 1, 1, 1};

  int operator[](MeshDim d) const { return sizes[static_cast<int>(d)]; }
  int& operator[](MeshDim d) { return sizes[static_cast<int>(d)]; }
  // Expert-parallel size: not a dim of its own (it divides dp x cp, whose ranks it borrows).
  int ep = 1;

  int world_size() const { return sizes[0] * sizes[1] * sizes[2] * sizes[3] * sizes[4]; }
  int dp_size() const { return (*this)[MeshDim::DPReplicate] * (*this)[MeshDim::DPShard]; }
  // "pp=1 x dp_replicate=2 x dp_shard=2 x cp=1 x tp=2", and " (ep=2 of dp x cp)" when ep > 1.
  std::string str() const;
};

using MeshCoord = std::array<int, kMeshDims>;

// Row-major with tp fastest: rank = (((pp * R + dpr) * S + dps) * C + cp) * T + tp.
MeshCoord mesh_coord(const MeshShape& shape, int rank);
int mesh_rank(const MeshShape& shape, const MeshCoord& coord);

// How the device communicators of a mesh on a GPU move tensors.
enum class DeviceComms { Host, Nccl, MpiStaged };

class DeviceMesh {
 public:
  // Collective over `world`: splits one communicator per dim and one for dp. The shape must
  // cover exactly world.size() ranks (std::invalid_argument otherwise: callers validate first).
  // On a GPU `device`, each group also gets device communicators: NCCL (needs LFT_HAS_NCCL) or
  // MPI staged through host memory, and a local one for a group of one rank (local_communicator.h);
  // on the CPU the host communicators serve both roles.
  DeviceMesh(const MpiCommunicator& world, const MeshShape& shape, at::Device device = at::kCPU,
             DeviceComms comms = DeviceComms::Host);
  ~DeviceMesh();

  const MeshShape& shape() const { return shape_; }
  // The communicator the mesh was built over (all its ranks).
  MPI_Comm world() const { return world_; }
  const MeshCoord& coord() const { return coord_; }
  int coord(MeshDim d) const { return coord_[static_cast<int>(d)]; }
  // This rank's host group along `d` (ranks that differ only in that coordinate), ordered by it.
  MpiCommunicator& comm(MeshDim d) { return *dims_[static_cast<int>(d)]; }
  // The flattened data-parallel host group (dp_replicate x dp_shard), ordered dpr-major.
  MpiCommunicator& dp() { return *dp_; }
  int dp_rank() const { return coord(MeshDim::DPReplicate) * shape_[MeshDim::DPShard] + coord(MeshDim::DPShard); }
  // The communicators for the tensors the model lives in (on device()).
  Communicator& device_comm(MeshDim d);
  Communicator& device_dp();
  // The ranks that hold this rank's parameters (dp x cp: gradients are summed over them) and the
  // ranks a sharding engine shards them over (dp_shard x cp), ordered dp-major; with cp = 1, dp
  // and dp_shard themselves.
  Communicator& device_dp_cp();
  Communicator& device_shard_cp();
  // Expert parallelism (shape().ep > 1; else groups of this rank alone): the expert-parallel group
  // and the expert-data-parallel group (header comment).
  Communicator& device_ep();
  Communicator& device_edp();
  // Their host groups (only with shape().ep > 1), and a rank's place in dp x cp, which decides both:
  // ep group place / ep, edp group place % ep.
  MpiCommunicator& ep() { return *ep_; }
  MpiCommunicator& edp() { return *edp_; }
  static int dp_cp_place(const MeshShape& shape, const MeshCoord& c) {
    return (c[static_cast<int>(MeshDim::DPReplicate)] * shape[MeshDim::DPShard] + c[static_cast<int>(MeshDim::DPShard)]) *
               shape[MeshDim::CP] + c[static_cast<int>(MeshDim::CP)];
  }
  // A group made on request: the ranks that differ from this one only in the coordinates `dims`,
  // in mesh order, for the tensors the model lives in (as device_comm()). Collective over every
  // rank of the mesh, each asking for the same dims.
  std::unique_ptr<Communicator> make_device_group(const std::vector<MeshDim>& dims, const std::string& name) const;
  // Where the model's tensors live.
  const at::Device& device() const { return device_; }
  bool on_cuda() const { return device_.is_cuda(); }
  DeviceComms device_comms() const { return comms_; }

 private:
  static std::unique_ptr<Communicator> device_communicator(const MpiCommunicator& group, at::Device device,
                                                           DeviceComms comms);

  MeshShape shape_;
  at::Device device_;
  DeviceComms comms_;
  MPI_Comm world_;
  MeshCoord coord_{};
  std::array<std::unique_ptr<MpiCommunicator>, kMeshDims> dims_;
  std::unique_ptr<MpiCommunicator> dp_;
  std::array<std::unique_ptr<Communicator>, kMeshDims> device_dims_;  // on a GPU
  std::unique_ptr<Communicator> device_dp_;
  Communicator* device_dp_same_ = nullptr;  // device_dp() when it is a dims_ group's (one of dp_replicate, dp_shard is 1)
  std::unique_ptr<MpiCommunicator> dp_cp_, shard_cp_;  // only with cp > 1
  std::unique_ptr<Communicator> device_dp_cp_, device_shard_cp_;
  std::unique_ptr<MpiCommunicator> ep_, edp_;  // only with ep > 1
  std::unique_ptr<Communicator> device_ep_, device_edp_, lone_ep_, lone_edp_;
};

}  // namespace lft
