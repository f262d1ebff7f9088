#include "lft/mesh/device_mesh.h"

#include <stdexcept>

#include "lft/build_config.h"
#include "lft/comm/local_communicator.h"
#if LFT_HAS_NCCL
#include "lft/comm/nccl_communicator.h"
#endif

namespace lft {

const char* mesh_dim_name(MeshDim dim) {
  switch (dim) {
    case MeshDim::PP: return "pp";
    case MeshDim::DPReplicate: return "dp_replicate";
    case MeshDim::DPShard: return "dp_shard";
    case MeshDim::CP: return "cp";
    case MeshDim::TP: return "tp";
  }
  return "?";
}

std::string MeshShape::str() const {
  std::string out;
  for (int d = 0; d < kMeshDims; ++d) {
    if (d > 0) out += " x ";
    out += std::string(mesh_dim_name(static_cast<MeshDim>(d))) + "=" + std::to_string(sizes[d]);
  }
  if (ep > 1) out += " (ep=" + std::to_string(ep) + " of dp x cp)";
  return out;
}

MeshCoord mesh_coord(const MeshShape& shape, int rank) {
  MeshCoord c{};
  for (int d = kMeshDims - 1; d >= 0; --d) {
    c[d] = rank % shape.sizes[d];
    rank /= shape.sizes[d];
  }
  return c;
}

int mesh_rank(const MeshShape& shape, const MeshCoord& coord) {
  int rank = 0;
  for (int d = 0; d < kMeshDims; ++d) rank = rank * shape.sizes[d] + coord[d];
  return rank;
}

DeviceMesh::DeviceMesh(const MpiCommunicator& world, const MeshShape& shape, at::Device device,
                       DeviceComms comms)
    : shape_(shape), device_(device), comms_(comms), world_(world.handle()) {
  if (device.is_cpu() != (comms == DeviceComms::Host))
    throw std::invalid_argument("DeviceMesh: a mesh on " + device.str() +
                                (device.is_cpu() ? " uses the host communicators" : " needs NCCL or staged MPI communicators"));
  if (shape.world_size() != world.size())
    throw std::invalid_argument("mesh " + shape.str() + " covers " +
                                std::to_string(shape.world_size()) + " ranks, the world has " +
                                std::to_string(world.size()));
  coord_ = mesh_coord(shape, world.rank());
  for (int d = 0; d < kMeshDims; ++d) {
    // Ranks that share every other coordinate form the group; the color is that coordinate
    // tuple with this dim zeroed, flattened.
    MeshCoord key_coord = coord_;
    key_coord[d] = 0;
    dims_[d] = world.split(mesh_rank(shape, key_coord), coord_[d],
                           mesh_dim_name(static_cast<MeshDim>(d)));
  }
  MeshCoord dp_color = coord_;
  dp_color[static_cast<int>(MeshDim::DPReplicate)] = 0;
  dp_color[static_cast<int>(MeshDim::DPShard)] = 0;
  dp_ = world.split(mesh_rank(shape, dp_color), dp_rank(), "dp");
  const int cp = shape[MeshDim::CP], cp_coord = coord(MeshDim::CP);
  if (cp > 1) {
    MeshCoord color = dp_color;
    color[static_cast<int>(MeshDim::CP)] = 0;
    dp_cp_ = world.split(mesh_rank(shape, color), dp_rank() * cp + cp_coord, "dp_cp");
    color = coord_;
    color[static_cast<int>(MeshDim::DPShard)] = 0;
    color[static_cast<int>(MeshDim::CP)] = 0;
    shard_cp_ = world.split(mesh_rank(shape, color), coord(MeshDim::DPShard) * cp + cp_coord, "dp_shard_cp");
  }
  const int ep = shape.ep;
  if (ep > 1) {
    const int dp_cp = shape.dp_size() * cp, place = dp_cp_place(shape, coord_);  // in device_dp_cp()
    if (dp_cp % ep != 0)
      throw std::invalid_argument("mesh " + shape.str() + ": ep does not divide dp x cp = " + std::to_string(dp_cp));
    MeshCoord color = dp_color;
    color[static_cast<int>(MeshDim::CP)] = 0;
    const int outside = mesh_rank(shape, color);  // the pp and tp coordinates
    ep_ = world.split(outside * dp_cp + place / ep, place % ep, "ep");
    edp_ = world.split(outside * dp_cp + place % ep, place / ep, "edp");
  }
  if (comms == DeviceComms::Host) return;
#if !LFT_HAS_NCCL
  if (comms == DeviceComms::Nccl) throw std::invalid_argument("DeviceMesh: NCCL communicators need a build with NCCL");
#endif
  for (int d = 0; d < kMeshDims; ++d) device_dims_[d] = device_communicator(*dims_[d], device, comms);
  // With dp_replicate = 1 the dp group is the dp_shard group (with dp_shard = 1, dp_replicate),
  // the same ranks in the same order: one communicator serves both (a NCCL communicator costs
  // start-up time and device memory).
  if (shape[MeshDim::DPReplicate] == 1) {
    device_dp_same_ = device_dims_[static_cast<int>(MeshDim::DPShard)].get();
  } else if (shape[MeshDim::DPShard] == 1) {
    device_dp_same_ = device_dims_[static_cast<int>(MeshDim::DPReplicate)].get();
  } else {
    device_dp_ = device_communicator(*dp_, device, comms);
  }
  if (dp_cp_) {
    device_dp_cp_ = device_communicator(*dp_cp_, device, comms);
    device_shard_cp_ = device_communicator(*shard_cp_, device, comms);
  }
  if (ep_) {
    device_ep_ = device_communicator(*ep_, device, comms);
    device_edp_ = device_communicator(*edp_, device, comms);
  }
}

// A group of one rank computes its collectives locally: no NCCL communicator (start-up time and
// device memory) and no staging through host memory for it.
std::unique_ptr<Communicator> DeviceMesh::device_communicator(const MpiCommunicator& group, at::Device device,
                                                              DeviceComms comms) {
  if (group.size() == 1) return std::make_unique<LocalCommunicator>(group.name(), device);
  if (comms == DeviceComms::MpiStaged) return group.on_device(device);
#if LFT_HAS_NCCL
  return std::make_unique<NcclCommunicator>(group, group.name());
#else
  throw std::logic_error("DeviceMesh: no NCCL in this build");
#endif
}

DeviceMesh::~DeviceMesh() = default;

std::unique_ptr<Communicator> DeviceMesh::make_device_group(const std::vector<MeshDim>& dims,
                                                           const std::string& name) const {
  MeshCoord color = coord_;
  for (MeshDim d : dims) color[static_cast<int>(d)] = 0;
  const MpiCommunicator world(world_, "world", /*owned=*/false);
  std::unique_ptr<MpiCommunicator> host = world.split(mesh_rank(shape_, color), mesh_rank(shape_, coord_), name);
  if (comms_ == DeviceComms::Host) return host;
  return device_communicator(*host, device_, comms_);  // needs the host group only while it is made
}

Communicator& DeviceMesh::device_comm(MeshDim d) {
  const int i = static_cast<int>(d);
  return device_dims_[i] ? *device_dims_[i] : static_cast<Communicator&>(*dims_[i]);
}

Communicator& DeviceMesh::device_dp() {
  if (device_dp_same_ != nullptr) return *device_dp_same_;
  return device_dp_ ? *device_dp_ : static_cast<Communicator&>(*dp_);
}

Communicator& DeviceMesh::device_dp_cp() {
  if (!dp_cp_) return device_dp();
  return device_dp_cp_ ? *device_dp_cp_ : static_cast<Communicator&>(*dp_cp_);
}

Communicator& DeviceMesh::device_ep() {
  if (ep_) return device_ep_ ? *device_ep_ : static_cast<Communicator&>(*ep_);
  if (!lone_ep_) lone_ep_ = std::make_unique<LocalCommunicator>("ep", device_);
  return *lone_ep_;
}

Communicator& DeviceMesh::device_edp() {
  if (edp_) return device_edp_ ? *device_edp_ : static_cast<Communicator&>(*edp_);
  return device_dp_cp();  // ep = 1: the experts are held as every other parameter
}

Communicator& DeviceMesh::device_shard_cp() {
  if (!shard_cp_) return device_comm(MeshDim::DPShard);
  return device_shard_cp_ ? *device_shard_cp_ : static_cast<Communicator&>(*shard_cp_);
}

}  // namespace lft
