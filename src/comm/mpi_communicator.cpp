#include "lft/comm/mpi_communicator.h"

#include <ATen/ATen.h>

#include <array>
#include <climits>
#include <functional>
#include <memory>
#include <stdexcept>
#include <vector>

#include "lft/comm/mpi_progress.h"
#include "lft/comm/mpi_util.h"
#include "lft/comm/watchdog.h"
#include "lft/runtime/check.h"

namespace lft {
namespace {

// The point-to-point tag of the reduce-scatter's exchanges: above those the engines use
// (megatron_internal.h's pipeline and tied-embedding tags) and within the 32767 MPI guarantees.
// Exchanges of successive reduce-scatters match in posting order, which is the same on every rank.
constexpr int kReduceScatterTag = 32767;

bool is_16bit_float(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
}

// The MPI datatype a reduction over `t` runs in (16-bit floats are upcast before).
MPI_Datatype reduction_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kInt: return MPI_INT32_T;
    case at::kLong: return MPI_INT64_T;
    default:
      throw std::invalid_argument("MPI reduction: dtype " +
                                  std::string(c10::toString(t.scalar_type())) + " not supported");
  }
}

// The MPI datatype `t` travels as where this process reduces it (16-bit floats as they are).
MPI_Datatype transfer_type(const at::Tensor& t) { return is_16bit_float(t) ? MPI_UINT16_T : reduction_type(t); }

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

int as_count(int64_t n) {
  if (n > INT_MAX)
    throw std::invalid_argument("MPI backend: a buffer of " + std::to_string(n) +
                                " elements exceeds MPI's int count; split it into buckets");
  return static_cast<int>(n);
}

// Posted MPI requests and what to do once they all complete.
class MpiWork final : public Work {
 public:
  MpiWork(std::string what, CollStats* stats, std::function<void()> on_done, int requests = 1)
      : Work(std::move(what), stats), requests_(static_cast<std::size_t>(requests), MPI_REQUEST_NULL),
        on_done_(std::move(on_done)) {
    MpiProgressThread::posted();
  }
  ~MpiWork() override { finish_in_destructor(); }
  MPI_Request* request(int i = 0) { return &requests_.at(static_cast<std::size_t>(i)); }

 protected:
  void block() override {
    LFT_MPI_CHECK(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
  }
  bool poll() override {
    int flag = 0;
    LFT_MPI_CHECK(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag, MPI_STATUSES_IGNORE));
    return flag != 0;
  }
  void finish() override {
    MpiProgressThread::completed();
    if (on_done_) on_done_();
  }

 private:
  std::vector<MPI_Request> requests_;
  std::function<void()> on_done_;
};

// The buffer a reduction runs in: `t` itself, or an fp32 copy of a 16-bit tensor.
at::Tensor reduction_buffer(const at::Tensor& t) {
  return is_16bit_float(t) ? t.to(at::kFloat) : t;
}

void check_avg(const at::Tensor& t, ReduceOp op) {
  if (op == ReduceOp::Avg && !at::isFloatingType(t.scalar_type()))
    throw std::invalid_argument("avg reduction needs a floating-point tensor");
}

// After the reduction: divide for Avg, round back into a 16-bit destination.
std::function<void()> finish_reduction(at::Tensor buffer, at::Tensor dest, ReduceOp op, int n) {
  return [buffer, dest, op, n]() mutable {
    if (op == ReduceOp::Avg) buffer.div_(n);
    if (!buffer.is_same(dest)) dest.copy_(buffer);
  };
}

// A GPU communicator of a run whose ranks share one GPU: MPI moves host copies of the tensors.
// Inputs are copied out before posting (the copy waits for the compute stream), outputs copied
// back once the operation completes. On a CPU communicator the tensors travel as they are.
class HostStage {
 public:
  explicit HostStage(bool staged) : staged_(staged) {}
  at::Tensor in(const at::Tensor& t) const { return staged_ ? t.cpu() : t; }
  at::Tensor out(const at::Tensor& t) {
    if (!staged_) return t;
    at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU));
    back_.emplace_back(t, host);
    return host;
  }
  at::Tensor in_out(const at::Tensor& t) {
    if (!staged_) return t;
    at::Tensor host = t.cpu();
    back_.emplace_back(t, host);
    return host;
  }
  // `done`, then the copies back to the device.
  std::function<void()> then(std::function<void()> done) const {
    if (back_.empty()) return done;
    return [done = std::move(done), back = back_]() {
      if (done) done();
      for (const auto& [device, host] : back) device.copy_(host);
    };
  }

 private:
  bool staged_;
  std::vector<std::pair<at::Tensor, at::Tensor>> back_;  // (device tensor, host copy)
};

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, bool owned, at::Device device)
    : Communicator(std::move(name), mpi_rank(comm), mpi_size(comm), device), comm_(comm), owned_(owned) {}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized) MPI_Comm_free(&comm_);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key,
                                                        std::string name) const {
  MPI_Comm sub = MPI_COMM_NULL;
  {
    Watchdog::Scope scope("creating communicator '" + name + "' (MPI_Comm_split of '" +
                              this->name() + "')",
                          Watchdog::setup_timeout(), "setup_timeout");
    LFT_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
  }
  return std::make_unique<MpiCommunicator>(sub, std::move(name), true);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::on_device(at::Device device) const {
  MPI_Comm dup = MPI_COMM_NULL;
  {
    Watchdog::Scope scope("creating communicator '" + name() + "' on " + device.str() + " (MPI_Comm_dup)",
                          Watchdog::setup_timeout(), "setup_timeout");
    LFT_MPI_CHECK(MPI_Comm_dup(comm_, &dup));
  }
  return std::make_unique<MpiCommunicator>(dup, name(), true, device);
}

bool MpiCommunicator::staged() const { return !device().is_cpu(); }

std::uint64_t MpiCommunicator::wire_bytes(const at::Tensor& t, bool reduction) const {
  const std::uint64_t n = static_cast<std::uint64_t>(t.numel());
  return reduction && is_16bit_float(t) ? n * 4 : n * t.element_size();
}

WorkPtr MpiCommunicator::do_all_reduce(const at::Tensor& t, ReduceOp op, CallInfo info) {
  check_avg(t, op);
  HostStage stage(staged());
  const at::Tensor host = stage.in_out(t);
  at::Tensor buf = reduction_buffer(host);
  auto work = std::make_unique<MpiWork>(std::move(info.what), info.stats,
                                        stage.then(finish_reduction(buf, host, op, size())));
  LFT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf.data_ptr(), as_count(buf.numel()),
                               reduction_type(buf), mpi_op(op), comm_, work->request()));
  return work;
}

// Reduce-scatter as direct exchanges: each rank sends every other rank that rank's piece of its
// input, receives its own piece from each, and sums the pieces in rank order once all have
// arrived (the same order, so the same bits, on every rank). Open MPI's non-blocking
// reduce-scatter (libnbc) instead reduces the whole buffer on one rank, in a temporary buffer of
// the whole size, and scatters the result: measured on 2 ranks for 622 MB of fp32, 0.46 s where
// the exchanges take 0.10 s, the first call 4 s (the temporary's pages), and all the reduction's
// memory traffic on rank 0. 16-bit pieces travel as they are and are summed in fp32 (each
// widened exactly), the same sums as widening them before sending, at half the bytes.
WorkPtr MpiCommunicator::do_reduce_scatter(const at::Tensor& in, const at::Tensor& out,
                                           ReduceOp op, const std::vector<int64_t>& counts,
                                           CallInfo info) {
  check_avg(in, op);
  HostStage stage(staged());
  const at::Tensor host_out = stage.out(out);
  const at::Tensor src = stage.in(in).view({-1});
  const at::Tensor dst = is_16bit_float(host_out) ? at::empty(host_out.sizes(), host_out.options().dtype(at::kFloat)) : host_out;
  const int n = size(), me = rank();
  std::vector<int64_t> count(static_cast<std::size_t>(n), dst.numel()), offset(static_cast<std::size_t>(n), 0);
  if (!counts.empty()) count = counts;
  for (int r = 1; r < n; ++r) offset[r] = offset[r - 1] + count[r - 1];
  const int64_t mine = count[me];
  // The other ranks' pieces of this rank's part, in rank order without this rank.
  const at::Tensor received = at::empty({(n - 1) * mine}, src.options());
  auto piece = [src, received, offset, me, mine](int r) {
    return r == me ? src.narrow(0, offset[me], mine) : received.narrow(0, (r < me ? r : r - 1) * mine, mine);
  };
  auto reduce = [piece, flat = dst.view({-1}), op, n]() mutable {
    int r = 1;
    if (n == 1 || piece(0).scalar_type() != flat.scalar_type()) {
      flat.copy_(piece(0));  // 16-bit pieces: each is widened, then summed in fp32
    } else {
      if (op == ReduceOp::Max) at::maximum_out(flat, piece(0), piece(1));
      else at::add_out(flat, piece(0), piece(1));
      r = 2;
    }
    for (; r < n; ++r) {
      if (op == ReduceOp::Max) at::maximum_out(flat, flat, piece(r));
      else flat.add_(piece(r));
    }
  };
  auto done = stage.then(finish_reduction(dst, host_out, op, n));
  auto work = std::make_unique<MpiWork>(std::move(info.what), info.stats,
                                        [reduce, done]() mutable {
                                          reduce();
                                          done();
                                        },
                                        2 * (n - 1));
  const MPI_Datatype type = transfer_type(src);
  const std::size_t elem = static_cast<std::size_t>(src.element_size());
  int k = 0;
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    LFT_MPI_CHECK(MPI_Irecv(piece(r).data_ptr(), as_count(mine), type, r, kReduceScatterTag, comm_, work->request(k++)));
  }
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    char* from = static_cast<char*>(src.data_ptr()) + elem * static_cast<std::size_t>(offset[r]);
    LFT_MPI_CHECK(MPI_Isend(from, as_count(count[r]), type, r, kReduceScatterTag, comm_, work->request(k++)));
  }
  return work;
}

WorkPtr MpiCommunicator::do_all_gather(const at::Tensor& in, const at::Tensor& out,
                                       const std::vector<int64_t>& counts, CallInfo info) {
  HostStage stage(staged());
  const at::Tensor src = stage.in(in), dst = stage.out(out);
  const int64_t elem = in.element_size();
  const int my_bytes = as_count(in.numel() * elem);
  if (counts.empty()) {
    auto work = std::make_unique<MpiWork>(std::move(info.what), info.stats, stage.then([src] {}));
    LFT_MPI_CHECK(MPI_Iallgather(src.data_ptr(), my_bytes, MPI_BYTE, dst.data_ptr(), my_bytes,
                                 MPI_BYTE, comm_, work->request()));
    return work;
  }
  // MPI may read the count and displacement arrays until completion: the callback keeps them.
  auto c = std::make_shared<std::vector<int>>();
  for (int64_t n : counts) c->push_back(as_count(n * elem));
  auto d = std::make_shared<std::vector<int>>(displacements(*c));
  auto work = std::make_unique<MpiWork>(std::move(info.what), info.stats, stage.then([src, c, d]() {}));
  LFT_MPI_CHECK(MPI_Iallgatherv(src.data_ptr(), my_bytes, MPI_BYTE, dst.data_ptr(), c->data(),
                                d->data(), MPI_BYTE, comm_, work->request()));
  return work;
}

WorkPtr MpiCommunicator::do_all_to_all(const at::Tensor& in, const at::Tensor& out,
                                       const std::vector<int64_t>& send_counts, const std::vector<int64_t>& recv_counts,
                                       CallInfo info) {
  HostStage stage(staged());
  const at::Tensor src = stage.in(in), dst = stage.out(out);
  // Byte counts and displacements, alive until the operation completes (MPI reads them then).
  auto bytes = [&](const std::vector<int64_t>& counts) {
    std::vector<int> b;
    for (const int64_t c : counts) b.push_back(as_count(c * in.element_size()));
    return b;
  };
  auto counts = std::make_shared<std::array<std::vector<int>, 4>>();
  (*counts)[0] = bytes(send_counts);
  (*counts)[1] = displacements((*counts)[0]);
  (*counts)[2] = bytes(recv_counts);
  (*counts)[3] = displacements((*counts)[2]);
  auto work = std::make_unique<MpiWork>(std::move(info.what), info.stats, stage.then([src, counts] {}));
  LFT_MPI_CHECK(MPI_Ialltoallv(src.data_ptr(), (*counts)[0].data(), (*counts)[1].data(), MPI_BYTE, dst.data_ptr(),
                               (*counts)[2].data(), (*counts)[3].data(), MPI_BYTE, comm_, work->request()));
  return work;
}

WorkPtr MpiCommunicator::do_broadcast(const at::Tensor& t, int root, CallInfo info) {
  HostStage stage(staged());
  const at::Tensor host = stage.in_out(t);
  auto work = std::make_unique<MpiWork>(std::move(info.what), info.stats, stage.then(nullptr));
  LFT_MPI_CHECK(MPI_Ibcast(host.data_ptr(), as_count(t.numel() * t.element_size()), MPI_BYTE, root,
                           comm_, work->request()));
  return work;
}

WorkPtr MpiCommunicator::do_send(const at::Tensor& t, int dst, int tag, CallInfo info) {
  const at::Tensor host = HostStage(staged()).in(t);  // the callback keeps the host copy alive
  auto work = std::make_unique<MpiWork>(std::move(info.what), info.stats, [host] {});
  LFT_MPI_CHECK(MPI_Isend(host.data_ptr(), as_count(t.numel() * t.element_size()), MPI_BYTE, dst,
                          tag, comm_, work->request()));
  return work;
}

WorkPtr MpiCommunicator::do_recv(const at::Tensor& t, int src, int tag, CallInfo info) {
  HostStage stage(staged());
  const at::Tensor host = stage.out(t);
  auto work = std::make_unique<MpiWork>(std::move(info.what), info.stats, stage.then(nullptr));
  LFT_MPI_CHECK(MPI_Irecv(host.data_ptr(), as_count(t.numel() * t.element_size()), MPI_BYTE, src,
                          tag, comm_, work->request()));
  return work;
}

WorkPtr MpiCommunicator::do_barrier(CallInfo info) {
  auto work = std::make_unique<MpiWork>(std::move(info.what), info.stats, nullptr);
  LFT_MPI_CHECK(MPI_Ibarrier(comm_, work->request()));
  return work;
}

}  // namespace lft
