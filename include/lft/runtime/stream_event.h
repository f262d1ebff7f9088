// The point on the device where an operation was queued, for work that completes on the host at
// once but on the device later: a local communicator's copy queued on the side stream (offload's
// host-to-device copy and its all-gather at world 1). Recorded on the calling thread's current
// CUDA stream when made; `order_current_stream` makes the stream current at that later moment
// (the compute stream) wait for it, and the tensors it names (null: none) are recorded on the
// posting stream so the allocator does not hand their memory out while that stream may still read
// or write them (a tensor made on the compute stream and dropped after posting). For a
// CPU device it holds nothing and is complete.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <initializer_list>
#include <memory>

namespace lft {

class PostedOnStream {
 public:
  PostedOnStream(const c10::Device& device, std::initializer_list<const at::Tensor*> used);
  ~PostedOnStream();
  PostedOnStream(const PostedOnStream&) = delete;
  PostedOnStream& operator=(const PostedOnStream&) = delete;

  bool complete() const;              // the host's non-blocking test
  void order_current_stream() const;  // the current stream waits for the posting point

 private:
  struct Event;
  std::unique_ptr<Event> event_;  // null on the CPU
};

}  // namespace lft
