// The Communicator interface: collectives over one group of ranks, blocking and non-blocking,
// with counters (stats.h), a watchdog deadline on every wait (watchdog.h) and a sequence number
// per call. SPMD rule: every rank of the group calls the same collectives in the same order.
// Tensors must be contiguous and on the communicator's device(): a tensor on any other device is
// an error on every backend (host values such as losses, norms and flags go through the mesh's
// host communicators, device tensors through its device communicators; device_mesh.h).
// A Communicator and the Work it returns are used from one thread at a time.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lft/comm/stats.h"

namespace lft {

enum class ReduceOp { Sum, Avg, Max };
const char* reduce_op_name(ReduceOp op);

// A posted operation. wait() blocks (under the watchdog) until it is complete and its result is
// in place; the destructor waits too, since buffers must outlive the operation.
class Work {
 public:
  virtual ~Work() = default;
  void wait();
  // Drives progress without blocking; true once complete (then wait() returns at once).
  bool test();
  const std::string& what() const { return what_; }

 protected:
  // host_timed: seconds and waited_seconds are the host's (false: the backend adds them from
  // the device's own timings).
  Work(std::string what, CollStats* stats, bool host_timed = true);
  virtual void block() = 0;     // wait for the backend
  virtual bool poll() = 0;      // the backend's non-blocking test
  virtual void finish() {}      // after completion: copy back, divide for Avg
  void finish_in_destructor();  // derived destructors call this

 private:
  void complete();
  std::string what_;
  CollStats* stats_;
  std::chrono::steady_clock::time_point start_;
  bool host_timed_;
  bool done_ = false;
};

using WorkPtr = std::unique_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  // Where the tensors it takes live: the CPU (MPI), a GPU (NCCL, or MPI staged through host
  // memory when several ranks share one GPU).
  const at::Device& device() const { return device_; }
  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_.reset(); }
  // Adds the timings a backend measures on the device (CUDA events) once they are known; call
  // before reading seconds and waited_seconds. A no-op where the host measures them.
  virtual void settle_stats() {}
  // Whether waited_seconds is the device's (the compute stream's stalls: NCCL, where the host
  // never blocks in wait()) rather than the host's time in wait().
  virtual bool times_on_device() const { return false; }
  virtual const char* backend() const = 0;
  // Whether reduce_scatter carries 16-bit floats as they are and sums them in fp32 (into an fp32
  // `out`): the sum of 16-bit gradients in fp32 at half the bytes of converting them first (MPI).
  // NCCL sums 16-bit inputs in 16 bits, so its callers convert to fp32 before.
  virtual bool sums_16bit_into_fp32() const { return false; }

  // In place: every rank's `t` becomes the reduction over the group.
  WorkPtr all_reduce_async(const at::Tensor& t, ReduceOp op = ReduceOp::Sum);
  // `in` holds every rank's shard back to back; `out` gets this rank's shard of the reduction.
  // counts empty: equal shards (in.numel() == size() * out.numel()); else counts[r] elements for
  // rank r (unequal shards). `out` may be fp32 for a 16-bit `in` where sums_16bit_into_fp32().
  WorkPtr reduce_scatter_async(const at::Tensor& in, const at::Tensor& out,
                               ReduceOp op = ReduceOp::Sum, const std::vector<int64_t>& counts = {});
  // `out` gets every rank's `in`, in rank order. counts as for reduce_scatter.
  WorkPtr all_gather_async(const at::Tensor& in, const at::Tensor& out,
                           const std::vector<int64_t>& counts = {});
  WorkPtr broadcast_async(const at::Tensor& t, int root);
  // `in` holds size() equal blocks back to back; block r goes to rank r, and `out` (the size of
  // `in`) gets rank r's block for this rank at block r (Ulysses' sequence <-> head exchange).
  // With counts, the blocks are uneven: send_counts[r] elements of `in` for rank r, recv_counts[r]
  // of `out` from rank r (each rank's send count for this rank is its recv count here), back to
  // back in rank order (the expert-parallel row exchange: one MPI_Ialltoallv, or on NCCL one
  // group of a send and a receive per peer). Counted as every all-to-all: the bytes of `in`.
  WorkPtr all_to_all_async(const at::Tensor& in, const at::Tensor& out, const std::vector<int64_t>& send_counts = {},
                           const std::vector<int64_t>& recv_counts = {});
  WorkPtr send_async(const at::Tensor& t, int dst, int tag = 0);
  WorkPtr recv_async(const at::Tensor& t, int src, int tag = 0);
  WorkPtr barrier_async();
  // A send to `dst` and a receive from `src` posted together: NCCL groups them, so that two
  // pipeline stages exchanging with each other cannot each block on its own send first.
  struct SendRecv {
    WorkPtr send, recv;
  };
  SendRecv send_recv_async(const at::Tensor& send, int dst, int send_tag, const at::Tensor& recv, int src,
                           int recv_tag);

  void all_reduce(const at::Tensor& t, ReduceOp op = ReduceOp::Sum) { all_reduce_async(t, op)->wait(); }
  void reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op = ReduceOp::Sum,
                      const std::vector<int64_t>& counts = {}) {
    reduce_scatter_async(in, out, op, counts)->wait();
  }
  void all_gather(const at::Tensor& in, const at::Tensor& out,
                  const std::vector<int64_t>& counts = {}) {
    all_gather_async(in, out, counts)->wait();
  }
  void broadcast(const at::Tensor& t, int root) { broadcast_async(t, root)->wait(); }
  void all_to_all(const at::Tensor& in, const at::Tensor& out, const std::vector<int64_t>& send_counts = {},
                  const std::vector<int64_t>& recv_counts = {}) {
    all_to_all_async(in, out, send_counts, recv_counts)->wait();
  }
  void send(const at::Tensor& t, int dst, int tag = 0) { send_async(t, dst, tag)->wait(); }
  void recv(const at::Tensor& t, int src, int tag = 0) { recv_async(t, src, tag)->wait(); }
  void barrier() { barrier_async()->wait(); }

 protected:
  Communicator(std::string name, int rank, int size, at::Device device);

  // What a backend gets with every call: the watchdog's description and the counters to fill.
  struct CallInfo {
    std::string what;
    CollStats* stats;
  };
  virtual WorkPtr do_all_reduce(const at::Tensor& t, ReduceOp op, CallInfo info) = 0;
  virtual WorkPtr do_reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op,
                                    const std::vector<int64_t>& counts, CallInfo info) = 0;
  virtual WorkPtr do_all_gather(const at::Tensor& in, const at::Tensor& out,
                                const std::vector<int64_t>& counts, CallInfo info) = 0;
  virtual WorkPtr do_broadcast(const at::Tensor& t, int root, CallInfo info) = 0;
  // send_counts / recv_counts: every rank's, in elements (equal blocks filled in by the caller).
  virtual WorkPtr do_all_to_all(const at::Tensor& in, const at::Tensor& out, const std::vector<int64_t>& send_counts,
                                const std::vector<int64_t>& recv_counts, CallInfo info) = 0;
  virtual WorkPtr do_send(const at::Tensor& t, int dst, int tag, CallInfo info) = 0;
  virtual WorkPtr do_recv(const at::Tensor& t, int src, int tag, CallInfo info) = 0;
  virtual WorkPtr do_barrier(CallInfo info) = 0;
  // Default: do_send then do_recv (MPI posts both without blocking).
  virtual SendRecv do_send_recv(const at::Tensor& send, int dst, int send_tag, const at::Tensor& recv, int src,
                                int recv_tag, CallInfo send_info, CallInfo recv_info);
  // The bytes a backend hands the wire for `t`; `reduction`: the backend's reduction operator runs
  // over it (MPI's all-reduce of 16-bit floats travels as fp32).
  virtual std::uint64_t wire_bytes(const at::Tensor& t, bool reduction) const;

 private:
  CallInfo begin(CollKind kind, std::uint64_t payload_bytes, const std::string& detail);
  // A send's or receive's checks, and its counters and description ("to 1, tag 3, ").
  void require_point_to_point(CollKind kind, const at::Tensor& t) const;
  CallInfo begin_point_to_point(CollKind kind, const at::Tensor& t, int peer, int tag);
  void require_device(const at::Tensor& t, const char* what) const;

  std::string name_;
  int rank_;
  int size_;
  at::Device device_;
  std::uint64_t sequence_ = 0;
  CommStats stats_;
};

}  // namespace lft
