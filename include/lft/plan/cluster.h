// The machines `lftrain --plan CLUSTER.toml CONFIG` plans for: nodes of devices, the memory and
// matmul rate of a device, and the links between devices (docs/plan.md, "The cluster file").
#pragma once

#include <string>

namespace lft::plan {

struct Cluster {
  std::string name;
  int nodes = 1;
  int devices_per_node = 1;      // ranks per node: one per device
  double device_memory_gib = 0;  // memory one rank may fill, GiB (2^30 bytes)
  double device_tflops = 0;      // dense matmul peak of a device in the compute dtype, TFLOP/s
  double mfu_ceiling = 0.5;      // share of device_tflops the training FLOPs run at
  double intra_node_gbps = 0;    // bus bandwidth per device between devices of a node, GB/s (1e9 B/s)
  double intra_node_latency_us = 0;
  double inter_node_gbps = 0;  // bus bandwidth per device between nodes (its share of the NICs), GB/s
  double inter_node_latency_us = 0;
  double memory_headroom = 0.1;  // share of device memory a layout must leave free
  std::string backend = "nccl";  // "nccl" or "mpi": MPI reduces 16-bit tensors as fp32 on the wire
  bool overlap_comm = true;      // collectives progress while the device computes

  int world_size() const { return nodes * devices_per_node; }
  // What a layout's per-rank estimate may reach: device_memory_gib x (1 - memory_headroom).
  double usable_memory_bytes() const;
  // 16-bit reductions travel (and are counted) as fp32: the MPI backend (docs/communication.md).
  bool reductions_upcast() const { return backend == "mpi"; }
  // The devices are CPUs: MPI is lftrain's backend for CPU tensors (NCCL's for GPUs).
  bool cpus() const { return backend == "mpi"; }
  // "h100-8x8: 8 nodes x 8 devices, 80 GiB, 989 TFLOP/s x 0.50, ..."
  std::string summary() const;
};

// Parses the text of a cluster file (one [cluster] table, docs/plan.md). Throws
// config::ConfigError naming file:line:col and the key for every unknown key, wrong type,
// value out of range and missing required key, all in one message.
Cluster parse_cluster(const std::string& text, const std::string& file_name);

// Reads and parses `path`; a missing or unreadable file is a config::ConfigError too.
Cluster read_cluster(const std::string& path);

}  // namespace lft::plan
