#include "lft/runtime/stream_event.h"

#include "lft/build_config.h"

#if LFT_HAS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace lft {

#if LFT_HAS_CUDA
struct PostedOnStream::Event {
  c10::DeviceIndex device;
  at::cuda::CUDAEvent event;
};

PostedOnStream::PostedOnStream(const c10::Device& device, std::initializer_list<const at::Tensor*> used) {
  if (!device.is_cuda()) return;
  const c10::cuda::CUDAStream posting = c10::cuda::getCurrentCUDAStream(device.index());
  for (const at::Tensor* t : used)
    if (t != nullptr && t->defined() && t->is_cuda()) c10::cuda::CUDACachingAllocator::recordStream(t->storage().data_ptr(), posting);
  event_ = std::make_unique<Event>();
  event_->device = device.index();
  event_->event.record(posting);
}

bool PostedOnStream::complete() const { return !event_ || event_->event.query(); }

void PostedOnStream::order_current_stream() const {
  if (event_) event_->event.block(c10::cuda::getCurrentCUDAStream(event_->device));
}
#else
struct PostedOnStream::Event {};

PostedOnStream::PostedOnStream(const c10::Device&, std::initializer_list<const at::Tensor*>) {}
bool PostedOnStream::complete() const { return true; }
void PostedOnStream::order_current_stream() const {}
#endif

PostedOnStream::~PostedOnStream() = default;

}  // namespace lft
