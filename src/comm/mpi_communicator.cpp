#include "lft/comm/mpi_communicator.h"

#include <ATen/ATen.h>

#include <climits>
#include <functional>
#include <stdexcept>

#include "lft/comm/mpi_progress.h"
#include "lft/comm/mpi_util.h"
#include "lft/comm/watchdog.h"
#include "lft/runtime/check.h"

namespace lft {
namespace {

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

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

int as_count(int64_t n) {
  if (n > INT_MAX)
    throw std::invalid_argument("MPI backend: a buffer of " + std::to_string(n) +
                                " elements exceeds MPI's int count; split it into buckets");
  return static_cast<int>(n);
}

void require_cpu(const at::Tensor& t) {
  if (!t.device().is_cpu())
    throw std::invalid_argument("MPI backend takes CPU tensors, got one on " + t.device().str());
}

// A posted MPI request and what to do once it completes.
class MpiWork final : public Work {
 public:
  MpiWork(std::string what, CollStats* stats, std::function<void()> on_done)
      : Work(std::move(what), stats), on_done_(std::move(on_done)) {
    MpiProgressThread::posted();
  }
  ~MpiWork() override { finish_in_destructor(); }
  MPI_Request* request() { return &request_; }

 protected:
  void block() override { LFT_MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE)); }
  bool poll() override {
    int flag = 0;
    LFT_MPI_CHECK(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
    return flag != 0;
  }
  void finish() override {
    MpiProgressThread::completed();
    if (on_done_) on_done_();
  }

 private:
  MPI_Request request_ = MPI_REQUEST_NULL;
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

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, bool owned)
    : Communicator(std::move(name), mpi_rank(comm), mpi_size(comm)), comm_(comm), owned_(owned) {}

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

std::uint64_t MpiCommunicator::wire_bytes(const at::Tensor& t, bool reduction) const {
  const std::uint64_t n = static_cast<std::uint64_t>(t.numel());
  return reduction && is_16bit_float(t) ? n * 4 : n * t.element_size();
}

WorkPtr MpiCommunicator::do_all_reduce(const at::Tensor& t, ReduceOp op, CallInfo info) {
  require_cpu(t);
  check_avg(t, op);
  at::Tensor buf = reduction_buffer(t);
  auto work = std::make_unique<MpiWork>(std::move(info.what), info.stats,
                                        finish_reduction(buf, t, op, size()));
  LFT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf.data_ptr(), as_count(buf.numel()),
                               reduction_type(buf), mpi_op(op), comm_, work->request()));
  return work;
}

WorkPtr MpiCommunicator::do_reduce_scatter(const at::Tensor& in, const at::Tensor& out,
                                           ReduceOp op, const std::vector<int64_t>& counts,
                                           CallInfo info) {
  require_cpu(in);
  require_cpu(out);
  check_avg(in, op);
  at::Tensor src = reduction_buffer(in);
  at::Tensor dst = is_16bit_float(out) ? at::empty(out.sizes(), out.options().dtype(at::kFloat)) : out;
  auto done = finish_reduction(dst, out, op, size());
  // The fp32 input copy and the counts must live until completion: the callback holds them.
  auto c = std::make_shared<std::vector<int>>();
  for (int64_t n : counts) c->push_back(as_count(n));
  auto work = std::make_unique<MpiWork>(std::move(info.what), info.stats,
                                        [src, c, done]() mutable { done(); });
  if (counts.empty()) {
    LFT_MPI_CHECK(MPI_Ireduce_scatter_block(src.data_ptr(), dst.data_ptr(), as_count(dst.numel()),
                                            reduction_type(src), mpi_op(op), comm_,
                                            work->request()));
  } else {
    LFT_MPI_CHECK(MPI_Ireduce_scatter(src.data_ptr(), dst.data_ptr(), c->data(),
                                      reduction_type(src), mpi_op(op), comm_, work->request()));
  }
  return work;
}

WorkPtr MpiCommunicator::do_all_gather(const at::Tensor& in, const at::Tensor& out,
                                       const std::vector<int64_t>& counts, CallInfo info) {
  require_cpu(in);
  require_cpu(out);
  const int64_t elem = in.element_size();
  const int my_bytes = as_count(in.numel() * elem);
  if (counts.empty()) {
    auto work = std::make_unique<MpiWork>(std::move(info.what), info.stats, nullptr);
    LFT_MPI_CHECK(MPI_Iallgather(in.data_ptr(), my_bytes, MPI_BYTE, out.data_ptr(), my_bytes,
                                 MPI_BYTE, comm_, work->request()));
    return work;
  }
  // MPI may read the count and displacement arrays until completion: the callback keeps them.
  auto c = std::make_shared<std::vector<int>>();
  for (int64_t n : counts) c->push_back(as_count(n * elem));
  auto d = std::make_shared<std::vector<int>>(displacements(*c));
  auto work = std::make_unique<MpiWork>(std::move(info.what), info.stats, [c, d]() {});
  LFT_MPI_CHECK(MPI_Iallgatherv(in.data_ptr(), my_bytes, MPI_BYTE, out.data_ptr(), c->data(),
                                d->data(), MPI_BYTE, comm_, work->request()));
  return work;
}

WorkPtr MpiCommunicator::do_broadcast(const at::Tensor& t, int root, CallInfo info) {
  require_cpu(t);
  auto work = std::make_unique<MpiWork>(std::move(info.what), info.stats, nullptr);
  LFT_MPI_CHECK(MPI_Ibcast(t.data_ptr(), as_count(t.numel() * t.element_size()), MPI_BYTE, root,
                           comm_, work->request()));
  return work;
}

WorkPtr MpiCommunicator::do_send(const at::Tensor& t, int dst, int tag, CallInfo info) {
  require_cpu(t);
  auto work = std::make_unique<MpiWork>(std::move(info.what), info.stats, nullptr);
  LFT_MPI_CHECK(MPI_Isend(t.data_ptr(), as_count(t.numel() * t.element_size()), MPI_BYTE, dst,
                          tag, comm_, work->request()));
  return work;
}

WorkPtr MpiCommunicator::do_recv(const at::Tensor& t, int src, int tag, CallInfo info) {
  require_cpu(t);
  auto work = std::make_unique<MpiWork>(std::move(info.what), info.stats, nullptr);
  LFT_MPI_CHECK(MPI_Irecv(t.data_ptr(), as_count(t.numel() * t.element_size()), MPI_BYTE, src,
                          tag, comm_, work->request()));
  return work;
}

WorkPtr MpiCommunicator::do_barrier(CallInfo info) {
  auto work = std::make_unique<MpiWork>(std::move(info.what), info.stats, nullptr);
  LFT_MPI_CHECK(MPI_Ibarrier(comm_, work->request()));
  return work;
}

}  // namespace lft
