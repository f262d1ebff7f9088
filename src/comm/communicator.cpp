#include "lft/comm/communicator.h"

#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>

#include "lft/comm/fault_injection.h"
#include "lft/comm/watchdog.h"

namespace lft {
namespace {

std::uint64_t g_collective_count = 0;  // process-wide, for fault injection

std::uint64_t bytes_of(const at::Tensor& t) {
  return static_cast<std::uint64_t>(t.numel()) * t.element_size();
}

// PyTorch's user-facing names ("float32", "bfloat16"), as users see them in Python.
std::string dtype_name(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(t.scalar_type());
  }
}

void require_contiguous(const at::Tensor& t, const char* what) {
  if (!t.defined() || !t.is_contiguous())
    throw std::invalid_argument(std::string(what) + ": tensor must be defined and contiguous");
}

void require_counts(const std::vector<int64_t>& counts, int size, const char* what) {
  if (static_cast<int>(counts.size()) != size)
    throw std::invalid_argument(std::string(what) + ": counts has " +
                                std::to_string(counts.size()) + " entries for " +
                                std::to_string(size) + " ranks");
}

bool is_16bit_float(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf; }

// Checks that `whole` is the concatenation of the shards and `part` this rank's shard (of one
// dtype, or a 16-bit whole and an fp32 part where `widening`).
void require_shard_shapes(const at::Tensor& whole, const at::Tensor& part, const std::vector<int64_t>& counts,
                          int rank, int size, const char* what, bool widening = false) {
  require_contiguous(whole, what);
  require_contiguous(part, what);
  const bool widened = widening && is_16bit_float(whole) && part.scalar_type() == at::kFloat;
  if (whole.scalar_type() != part.scalar_type() && !widened)
    throw std::invalid_argument(std::string(what) + ": input " + dtype_name(whole) + " and output " + dtype_name(part) +
                                " dtypes differ" + (widening ? " (only a 16-bit input may give an fp32 output)" : ""));
  int64_t total = part.numel() * size;
  int64_t mine = part.numel();
  if (!counts.empty()) {
    require_counts(counts, size, what);
    total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    mine = counts[rank];
  }
  if (whole.numel() != total || part.numel() != mine)
    throw std::invalid_argument(std::string(what) + ": full buffer has " +
                                std::to_string(whole.numel()) + " elements and shard " +
                                std::to_string(part.numel()) + ", expected " +
                                std::to_string(total) + " and " + std::to_string(mine));
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

Work::Work(std::string what, CollStats* stats, bool host_timed)
    : what_(std::move(what)), stats_(stats), start_(std::chrono::steady_clock::now()), host_timed_(host_timed) {}

void Work::wait() {
  if (done_) return;
  const auto start = std::chrono::steady_clock::now();
  {
    Watchdog::Scope scope(what_, Watchdog::collective_timeout(), "comm_timeout");
    block();
  }
  if (host_timed_)
    stats_->waited_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  complete();
}

bool Work::test() {
  if (!done_ && poll()) complete();
  return done_;
}

void Work::finish_in_destructor() {
  if (!done_) wait();
}

void Work::complete() {
  finish();
  done_ = true;
  if (host_timed_)
    stats_->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

Communicator::Communicator(std::string name, int rank, int size, at::Device device)
    : name_(std::move(name)), rank_(rank), size_(size), device_(device) {}

void Communicator::require_device(const at::Tensor& t, const char* what) const {
  const bool same = t.device().type() == device_.type() &&
                    (!device_.has_index() || !t.device().has_index() || t.device().index() == device_.index());
  if (!same)
    throw std::invalid_argument(std::string(what) + " on communicator '" + name_ + "' [" + backend() +
                                ", rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                                "] takes tensors on " + device_.str() + ", got one on " + t.device().str() +
                                (device_.is_cpu() ? "" : " (host values go through the mesh's host communicators)"));
}

std::uint64_t Communicator::wire_bytes(const at::Tensor& t, bool /*reduction*/) const {
  return bytes_of(t);
}

Communicator::CallInfo Communicator::begin(CollKind kind, std::uint64_t payload_bytes,
                                           const std::string& detail) {
  ++sequence_;
  char text[320];
  std::snprintf(text, sizeof(text), "%s #%llu (%s%s) on communicator '%s' [%s, rank %d of %d]",
                coll_kind_name(kind), static_cast<unsigned long long>(sequence_), detail.c_str(),
                format_bytes(static_cast<double>(payload_bytes)).c_str(), name_.c_str(),
                backend(), rank_, size_);
  inject_fault_if_requested(++g_collective_count, name_, text);
  CollStats& s = stats_.at(kind);
  s.calls += 1;
  s.bytes += payload_bytes;
  return CallInfo{text, &s};
}

WorkPtr Communicator::all_reduce_async(const at::Tensor& t, ReduceOp op) {
  require_contiguous(t, "all_reduce");
  require_device(t, "all_reduce");
  auto info = begin(CollKind::AllReduce, wire_bytes(t, true),
                    std::string(reduce_op_name(op)) + ", " + dtype_name(t) + ", ");
  return do_all_reduce(t, op, std::move(info));
}

WorkPtr Communicator::reduce_scatter_async(const at::Tensor& in, const at::Tensor& out,
                                           ReduceOp op, const std::vector<int64_t>& counts) {
  require_shard_shapes(in, out, counts, rank_, size_, "reduce_scatter", sums_16bit_into_fp32());
  require_device(in, "reduce_scatter");
  require_device(out, "reduce_scatter");
  // A backend that sums 16-bit pieces in fp32 itself moves them as they are.
  auto info = begin(CollKind::ReduceScatter, wire_bytes(in, !sums_16bit_into_fp32()),
                    std::string(reduce_op_name(op)) + ", " + dtype_name(in) + ", ");
  return do_reduce_scatter(in, out, op, counts, std::move(info));
}

WorkPtr Communicator::all_gather_async(const at::Tensor& in, const at::Tensor& out,
                                       const std::vector<int64_t>& counts) {
  require_shard_shapes(out, in, counts, rank_, size_, "all_gather");
  require_device(in, "all_gather");
  require_device(out, "all_gather");
  auto info = begin(CollKind::AllGather, wire_bytes(out, false), dtype_name(in) + ", ");
  return do_all_gather(in, out, counts, std::move(info));
}

WorkPtr Communicator::broadcast_async(const at::Tensor& t, int root) {
  require_contiguous(t, "broadcast");
  require_device(t, "broadcast");
  auto info = begin(CollKind::Broadcast, wire_bytes(t, false),
                    "root " + std::to_string(root) + ", " + dtype_name(t) + ", ");
  return do_broadcast(t, root, std::move(info));
}

WorkPtr Communicator::all_to_all_async(const at::Tensor& in, const at::Tensor& out,
                                       const std::vector<int64_t>& send_counts, const std::vector<int64_t>& recv_counts) {
  require_contiguous(in, "all_to_all");
  require_contiguous(out, "all_to_all");
  require_device(in, "all_to_all");
  require_device(out, "all_to_all");
  const auto sum = [](const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); };
  const std::string tensors = "in (" + std::to_string(in.numel()) + " " + dtype_name(in) + ") and out (" +
                              std::to_string(out.numel()) + " " + dtype_name(out) + ")";
  if (send_counts.empty() != recv_counts.empty())
    throw std::invalid_argument("all_to_all on '" + name_ + "': give both send and receive counts, or neither");
  if (send_counts.empty()) {
    if (in.numel() != out.numel() || in.scalar_type() != out.scalar_type() || in.numel() % size_ != 0)
      throw std::invalid_argument("all_to_all on '" + name_ + "': " + tensors +
                                  " must have one dtype and the same number of elements, a multiple of the group's " +
                                  std::to_string(size_) + " ranks");
    const std::vector<int64_t> blocks(static_cast<std::size_t>(size_), in.numel() / size_);
    auto info = begin(CollKind::AllToAll, wire_bytes(in, false), dtype_name(in) + ", ");
    return do_all_to_all(in, out, blocks, blocks, std::move(info));
  }
  const auto n = static_cast<std::size_t>(size_);
  if (send_counts.size() != n || recv_counts.size() != n || sum(send_counts) != in.numel() ||
      sum(recv_counts) != out.numel() || in.scalar_type() != out.scalar_type())
    throw std::invalid_argument("all_to_all on '" + name_ + "': " + tensors + " must have one dtype and hold the " +
                                std::to_string(size_) + " send counts' and receive counts' elements (" +
                                std::to_string(sum(send_counts)) + " and " + std::to_string(sum(recv_counts)) + ")");
  // Counted as the even all-to-all (nccl-tests' buffer, the own block included) that sends as many
  // bytes to the other ranks: bus_bytes() is then exactly what leaves this rank, however uneven
  // the blocks (the expert exchange sends no own block).
  const double leaving = static_cast<double>(sum(send_counts) - send_counts[static_cast<std::size_t>(rank_)]) *
                         static_cast<double>(in.element_size());
  const auto payload = size_ == 1 ? std::uint64_t{0} : static_cast<std::uint64_t>(std::llround(leaving * size_ / (size_ - 1)));
  auto info = begin(CollKind::AllToAll, payload, "uneven, " + dtype_name(in) + ", ");
  return do_all_to_all(in, out, send_counts, recv_counts, std::move(info));
}

void Communicator::require_point_to_point(CollKind kind, const at::Tensor& t) const {
  const char* what = kind == CollKind::Send ? "send" : "recv";
  require_contiguous(t, what);
  require_device(t, what);
}

Communicator::CallInfo Communicator::begin_point_to_point(CollKind kind, const at::Tensor& t, int peer, int tag) {
  return begin(kind, wire_bytes(t, false),
               (kind == CollKind::Send ? "to " : "from ") + std::to_string(peer) + ", tag " + std::to_string(tag) + ", ");
}

WorkPtr Communicator::send_async(const at::Tensor& t, int dst, int tag) {
  require_point_to_point(CollKind::Send, t);
  return do_send(t, dst, tag, begin_point_to_point(CollKind::Send, t, dst, tag));
}

WorkPtr Communicator::recv_async(const at::Tensor& t, int src, int tag) {
  require_point_to_point(CollKind::Recv, t);
  return do_recv(t, src, tag, begin_point_to_point(CollKind::Recv, t, src, tag));
}

Communicator::SendRecv Communicator::send_recv_async(const at::Tensor& send, int dst, int send_tag,
                                                    const at::Tensor& recv, int src, int recv_tag) {
  // Both checked before either is counted or posted.
  require_point_to_point(CollKind::Send, send);
  require_point_to_point(CollKind::Recv, recv);
  auto send_info = begin_point_to_point(CollKind::Send, send, dst, send_tag);
  auto recv_info = begin_point_to_point(CollKind::Recv, recv, src, recv_tag);
  return do_send_recv(send, dst, send_tag, recv, src, recv_tag, std::move(send_info), std::move(recv_info));
}

Communicator::SendRecv Communicator::do_send_recv(const at::Tensor& send, int dst, int send_tag,
                                                  const at::Tensor& recv, int src, int recv_tag,
                                                  CallInfo send_info, CallInfo recv_info) {
  SendRecv out;
  out.send = do_send(send, dst, send_tag, std::move(send_info));
  out.recv = do_recv(recv, src, recv_tag, std::move(recv_info));
  return out;
}

WorkPtr Communicator::barrier_async() {
  auto info = begin(CollKind::Barrier, 0, "");
  return do_barrier(std::move(info));
}

}  // namespace lft
