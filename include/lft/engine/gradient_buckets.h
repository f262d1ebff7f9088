// Data parallelism's gradient all-reduce as one component: the trained parameters' gradients go
// into buckets of about `bucket_bytes` (parameters in reverse order, the order backward produces
// their gradients), and each bucket is all-reduced asynchronously over `comm` from autograd hooks
// as soon as the last of its gradients of the step has arrived, so the reduction overlaps the rest
// of backward. ddp (and fsdp NO_SHARD, ZeRO-0) is this over dp x cp; megatron uses it over its dp
// group.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "lft/comm/communicator.h"

namespace lft::engine {

class GradientBuckets {
 public:
  // Registers a gradient hook on each of `params` (all trained; they must outlive this object's
  // use). reduce_dtype: the buckets' dtype (megatron: float32); none: the parameters'.
  GradientBuckets(Communicator& comm, std::vector<at::Tensor> params, double bucket_bytes,
                  std::optional<at::ScalarType> reduce_dtype = std::nullopt);
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // The next `backwards` backward passes make this step's gradients: a parameter's bucket slot
  // is filled at the last of them (its gradient accumulated over the earlier ones by autograd).
  // 0: the next backward passes only accumulate (no_sync).
  void expect_backwards(int backwards);
  // Launches the buckets still waiting (a parameter without a gradient this step adds what it
  // has, or zeros), waits for all, and sets every parameter's gradient to the sum over `comm`.
  void finish();
  std::size_t bucket_count() const { return buckets_.size(); }
  // Buckets whose all-reduce has been launched and not yet finished.
  std::size_t buckets_in_flight() const;

 private:
  struct Bucket {
    at::Tensor buffer;                // flat, the gradients being reduced
    std::vector<std::size_t> params;  // indices into params_
    std::size_t pending = 0;          // gradients still to arrive this step
    WorkPtr work;                     // the in-flight all-reduce
  };
  void on_gradient(std::size_t param, const at::Tensor& grad);
  at::Tensor slot(std::size_t param);
  void launch(Bucket& bucket);
  void drive_progress();

  Communicator& comm_;
  std::vector<at::Tensor> params_;
  std::vector<std::size_t> bucket_of_;   // per parameter
  std::vector<std::int64_t> offset_of_;  // per parameter, in its bucket
  std::vector<int> backwards_left_;      // per parameter, this step
  std::vector<Bucket> buckets_;
};

}  // namespace lft::engine
