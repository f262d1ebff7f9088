// Built only when LFT_HAS_NCCL (CMake drops nccl_*.cpp otherwise).
#include "lft/comm/nccl_communicator.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>

#include "lft/comm/watchdog.h"
#include "lft/runtime/check.h"
#include "lft/runtime/cuda_check.h"
#include "lft/runtime/error.h"

namespace lft {
namespace {

ncclDataType_t nccl_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kByte:
    case at::kBool: return ncclUint8;
    default:
      if (t.element_size() == 1) return ncclUint8;  // float8 moves as bytes
      throw std::invalid_argument("NCCL backend: dtype " +
                                  std::string(c10::toString(t.scalar_type())) + " not supported");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

at::Device current_device() { return at::Device(at::kCUDA, c10::cuda::current_device()); }

// Every live NCCL communicator: the watchdog aborts them all when a deadline passes (a rank blocked
// in a NCCL call or a kernel waiting for a dead peer is released), and the host's waits poll their
// asynchronous errors.
struct Registry {
  std::mutex mutex;
  std::map<ncclComm_t, std::string> comms;  // the handle and the communicator's name
};

Registry& registry() {
  static Registry r;
  return r;
}

void abort_all_communicators() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& item : r.comms) ncclCommAbort(item.first);
  r.comms.clear();  // aborted: never destroyed after this
}

// A NCCL call on the host: it may block (connections are made at the first collective of a
// pair of ranks), so it runs under the watchdog.
template <class Call>
void host_call(const std::string& what, Call&& call) {
  Watchdog::Scope scope("NCCL call for " + what, Watchdog::collective_timeout(), "comm_timeout");
  call();
}

// A CUDA event owned by everyone who holds it: the timings read a span's events once they are
// complete and let them go, while the Work of the same operation may be waited (or tested) much
// later: "post A, post and wait B, then wait A" must not wait on a destroyed or recycled handle.
using SharedEvent = std::shared_ptr<CUevent_st>;

SharedEvent timing_event() {
  cudaEvent_t e = nullptr;
  LFT_CUDA_CHECK(cudaEventCreate(&e));
  return SharedEvent(e, [](cudaEvent_t done) { cudaEventDestroy(done); });
}

}  // namespace

// The device's own timings of each operation (from its start on the communicator's stream to its
// end) and of each wait (how long the compute stream stalled on it), added to the counters once
// the events are complete: the host never waits for a collective, so its clock would read ~0.
struct NcclCommunicator::Timings {
  struct Span {
    CollStats* stats;
    bool waited;  // a stall of the compute stream, else the operation itself
    SharedEvent begin, end;
  };
  std::deque<Span> pending;

  void add(CollStats* stats, bool waited, SharedEvent begin, SharedEvent end) {
    pending.push_back({stats, waited, std::move(begin), std::move(end)});
    settle(false);
  }
  // Adds the spans that are complete, in order; with `all`, waits for every one.
  void settle(bool all) {
    while (!pending.empty()) {
      Span& s = pending.front();
      if (all) {
        LFT_CUDA_CHECK(cudaEventSynchronize(s.end.get()));
      } else {
        const cudaError_t rc = cudaEventQuery(s.end.get());
        if (rc == cudaErrorNotReady) return;
        LFT_CUDA_CHECK(rc);
      }
      float ms = 0;
      LFT_CUDA_CHECK(cudaEventElapsedTime(&ms, s.begin.get(), s.end.get()));
      (s.waited ? s.stats->waited_seconds : s.stats->seconds) += 1e-3 * ms;
      pending.pop_front();  // the events live on while a Work still holds them
    }
  }
};

namespace {

// An operation on the communicator's stream, between two timing events. wait() makes the compute
// stream wait for its end; the host goes on (the step's one read of its loss and norms is where
// the host waits, under the watchdog: device_read.h).
class NcclWork final : public Work {
 public:
  NcclWork(std::string what, CollStats* stats, cudaStream_t stream, SharedEvent begin,
           NcclCommunicator::Timings& timings)
      : Work(std::move(what), stats, /*host_timed=*/false), stats_(stats), timings_(timings),
        end_(timing_event()) {
    LFT_CUDA_CHECK(cudaEventRecord(end_.get(), stream));
    timings_.add(stats, /*waited=*/false, std::move(begin), end_);
  }
  ~NcclWork() override { finish_in_destructor(); }

 protected:
  void block() override {
    cudaStream_t compute = current_stream();
    SharedEvent stall_begin = timing_event(), stall_end = timing_event();
    LFT_CUDA_CHECK(cudaEventRecord(stall_begin.get(), compute));
    LFT_CUDA_CHECK(cudaStreamWaitEvent(compute, end_.get(), 0));
    LFT_CUDA_CHECK(cudaEventRecord(stall_end.get(), compute));
    timings_.add(stats_, /*waited=*/true, std::move(stall_begin), std::move(stall_end));
  }
  bool poll() override {
    const cudaError_t rc = cudaEventQuery(end_.get());
    if (rc == cudaErrorNotReady) return false;
    LFT_CUDA_CHECK(rc);
    return true;
  }

 private:
  CollStats* stats_;
  NcclCommunicator::Timings& timings_;
  SharedEvent end_;  // shared with the timings; alive while this Work may be waited or tested
};

}  // namespace

std::string nccl_version() {
  int v = 0;
  LFT_NCCL_CHECK(ncclGetVersion(&v));
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." +
         std::to_string(v % 100);
}

NcclCommunicator::NcclCommunicator(const MpiCommunicator& bootstrap, std::string name)
    : Communicator(std::move(name), bootstrap.rank(), bootstrap.size(), current_device()),
      stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true)),
      timings_(std::make_unique<Timings>()) {
  static std::once_flag hook;
  std::call_once(hook, [] { Watchdog::add_abort_hook(&abort_all_communicators); });
  ncclUniqueId id;
  if (rank() == 0) LFT_NCCL_CHECK(ncclGetUniqueId(&id));
  Watchdog::Scope scope("creating NCCL communicator '" + this->name() + "'",
                        Watchdog::setup_timeout(), "setup_timeout");
  LFT_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, bootstrap.handle()));
  LFT_NCCL_CHECK(ncclCommInitRank(&comm_, size(), id, rank()));
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().comms.emplace(comm_, this->name());
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  // Settling waits for every operation, and a dead peer can keep one from finishing: under the
  // watchdog, which then aborts every communicator and ends the job with a report, not a hang.
  Watchdog::Scope scope("finishing NCCL communicator '" + name() + "' (its last operations, then ncclCommDestroy)",
                        Watchdog::collective_timeout(), "comm_timeout");
  timings_->settle(/*all=*/true);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.comms.erase(comm_) > 0) ncclCommDestroy(comm_);  // else the watchdog aborted it
}

void NcclCommunicator::settle_stats() { timings_->settle(/*all=*/true); }

void nccl_check_async_errors() {
  Registry& r = registry();
  std::string failed;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto& [comm, name] : r.comms) {
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess || state == ncclSuccess || state == ncclInProgress)
        continue;
      const char* last = ncclGetLastError(comm);
      failed = "NCCL communicator '" + name + "' failed: " + ncclGetErrorString(state) +
               (last != nullptr && *last != '\0' ? std::string(" (") + last + ")" : "");
      break;
    }
  }
  if (failed.empty()) return;
  abort_all_communicators();
  fatal_one(failed + ". Aborting the job: a peer rank died or its GPU failed; its own log names the cause.");
}

cudaStream_t NcclCommunicator::enter(std::initializer_list<const at::Tensor*> tensors) {
  // The collective reads what the compute stream wrote before the call.
  cudaEvent_t ready = nullptr;
  LFT_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  LFT_CUDA_CHECK(cudaEventRecord(ready, current_stream()));
  LFT_CUDA_CHECK(cudaStreamWaitEvent(stream_.stream(), ready, 0));
  LFT_CUDA_CHECK(cudaEventDestroy(ready));
  // A buffer the caller frees while the collective may still use it is not reused before then.
  for (const at::Tensor* t : tensors)
    c10::cuda::CUDACachingAllocator::recordStream(t->storage().data_ptr(), stream_);
  begin_ = timing_event();
  LFT_CUDA_CHECK(cudaEventRecord(begin_.get(), stream_.stream()));
  return stream_.stream();
}

WorkPtr NcclCommunicator::leave(CallInfo info) {
  return std::make_unique<NcclWork>(std::move(info.what), info.stats, stream_.stream(), std::move(begin_),
                                    *timings_);
}

WorkPtr NcclCommunicator::do_all_reduce(const at::Tensor& t, ReduceOp op, CallInfo info) {
  cudaStream_t stream = enter({&t});
  host_call(info.what, [&] {
    LFT_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t), nccl_op(op),
                                 comm_, stream));
  });
  return leave(std::move(info));
}

WorkPtr NcclCommunicator::do_reduce_scatter(const at::Tensor& in, const at::Tensor& out,
                                            ReduceOp op, const std::vector<int64_t>& counts,
                                            CallInfo info) {
  cudaStream_t stream = enter({&in, &out});
  host_call(info.what, [&] {
    if (counts.empty()) {
      LFT_NCCL_CHECK(ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), nccl_type(in),
                                       nccl_op(op), comm_, stream));
    } else {
      // Unequal shards: one reduce per destination rank, in one group.
      const auto* base = static_cast<const char*>(in.data_ptr());
      int64_t offset = 0;
      LFT_NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < size(); ++r) {
        LFT_NCCL_CHECK(ncclReduce(base + offset * in.element_size(), out.data_ptr(), counts[r],
                                  nccl_type(in), nccl_op(op), r, comm_, stream));
        offset += counts[r];
      }
      LFT_NCCL_CHECK(ncclGroupEnd());
    }
  });
  return leave(std::move(info));
}

WorkPtr NcclCommunicator::do_all_gather(const at::Tensor& in, const at::Tensor& out,
                                        const std::vector<int64_t>& counts, CallInfo info) {
  cudaStream_t stream = enter({&in, &out});
  host_call(info.what, [&] {
    if (counts.empty()) {
      LFT_NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in), comm_,
                                   stream));
    } else {
      // Unequal shards: every rank broadcasts its shard into place, in one group.
      auto* base = static_cast<char*>(out.data_ptr());
      int64_t offset = 0;
      LFT_NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < size(); ++r) {
        LFT_NCCL_CHECK(ncclBroadcast(in.data_ptr(), base + offset * out.element_size(), counts[r],
                                     nccl_type(in), r, comm_, stream));
        offset += counts[r];
      }
      LFT_NCCL_CHECK(ncclGroupEnd());
    }
  });
  return leave(std::move(info));
}

WorkPtr NcclCommunicator::do_broadcast(const at::Tensor& t, int root, CallInfo info) {
  cudaStream_t stream = enter({&t});
  host_call(info.what, [&] {
    LFT_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t), root, comm_,
                                 stream));
  });
  return leave(std::move(info));
}

WorkPtr NcclCommunicator::do_all_to_all(const at::Tensor& in, const at::Tensor& out,
                                        const std::vector<int64_t>& send_counts, const std::vector<int64_t>& recv_counts,
                                        CallInfo info) {
  cudaStream_t stream = enter({&in, &out});
  host_call(info.what, [&] {
    // NCCL has no all-to-all call: one send and one receive per peer (blocks of any size, empty
    // ones skipped), in one group, so that every pair's transfers run together.
    const int64_t element = in.element_size();
    const auto* src = static_cast<const char*>(in.data_ptr());
    auto* dst = static_cast<char*>(out.data_ptr());
    int64_t sent = 0, received = 0;
    LFT_NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < size(); ++r) {
      const int64_t s = send_counts[static_cast<std::size_t>(r)], g = recv_counts[static_cast<std::size_t>(r)];
      if (s > 0) LFT_NCCL_CHECK(ncclSend(src + sent * element, static_cast<size_t>(s), nccl_type(in), r, comm_, stream));
      if (g > 0) LFT_NCCL_CHECK(ncclRecv(dst + received * element, static_cast<size_t>(g), nccl_type(out), r, comm_, stream));
      sent += s;
      received += g;
    }
    LFT_NCCL_CHECK(ncclGroupEnd());
  });
  return leave(std::move(info));
}

WorkPtr NcclCommunicator::do_send(const at::Tensor& t, int dst, int /*tag*/, CallInfo info) {
  cudaStream_t stream = enter({&t});
  host_call(info.what, [&] {
    LFT_NCCL_CHECK(ncclSend(t.data_ptr(), t.numel(), nccl_type(t), dst, comm_, stream));
  });
  return leave(std::move(info));
}

WorkPtr NcclCommunicator::do_recv(const at::Tensor& t, int src, int /*tag*/, CallInfo info) {
  cudaStream_t stream = enter({&t});
  host_call(info.what, [&] {
    LFT_NCCL_CHECK(ncclRecv(t.data_ptr(), t.numel(), nccl_type(t), src, comm_, stream));
  });
  return leave(std::move(info));
}

Communicator::SendRecv NcclCommunicator::do_send_recv(const at::Tensor& send, int dst, int /*send_tag*/,
                                                      const at::Tensor& recv, int src, int /*recv_tag*/,
                                                      CallInfo send_info, CallInfo recv_info) {
  cudaStream_t stream = enter({&send, &recv});
  host_call(send_info.what, [&] {
    LFT_NCCL_CHECK(ncclGroupStart());
    LFT_NCCL_CHECK(ncclSend(send.data_ptr(), send.numel(), nccl_type(send), dst, comm_, stream));
    LFT_NCCL_CHECK(ncclRecv(recv.data_ptr(), recv.numel(), nccl_type(recv), src, comm_, stream));
    LFT_NCCL_CHECK(ncclGroupEnd());
  });
  SendRecv out;
  out.send = leave(std::move(send_info));
  // One group, one span on the device: its time is counted on the send, the receive's from the
  // group's end.
  begin_ = timing_event();
  LFT_CUDA_CHECK(cudaEventRecord(begin_.get(), stream));
  out.recv = leave(std::move(recv_info));
  return out;
}

WorkPtr NcclCommunicator::do_barrier(CallInfo info) {
  auto one = at::ones({1}, at::TensorOptions().dtype(at::kInt).device(device()));
  cudaStream_t stream = enter({&one});
  host_call(info.what, [&] {
    LFT_NCCL_CHECK(ncclAllReduce(one.data_ptr(), one.data_ptr(), 1, ncclInt32, ncclSum, comm_,
                                 stream));
  });
  return leave(std::move(info));
}

}  // namespace lft
