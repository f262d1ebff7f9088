// Parameters whose memory comes and goes while the tensor stays (FSDP's storage resize).
//
// A sharded engine keeps each parameter tensor, and the storage object autograd saves by
// reference, for the whole run; it only releases and reallocates the storage's bytes. A model
// built inside an UnallocatedParameters scope starts that way: every parameter has its shape,
// dtype and device but no memory, so a rank never holds a model it only keeps a shard of.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <vector>

namespace lft::model {

// While alive (on this thread), the model's layer constructors create unallocated parameters.
class UnallocatedParameters {
 public:
  UnallocatedParameters();
  ~UnallocatedParameters();
  UnallocatedParameters(const UnallocatedParameters&) = delete;
  UnallocatedParameters& operator=(const UnallocatedParameters&) = delete;
  static bool active();

 private:
  bool previous_;
};

// A contiguous tensor of `shape` and `options` whose storage holds no bytes.
at::Tensor unallocated_tensor(const std::vector<std::int64_t>& shape, const c10::TensorOptions& options);
bool storage_allocated(const at::Tensor& t);
// Gives the storage the tensor's bytes again (uninitialised), if it has none.
void allocate_storage(const at::Tensor& t);
// Releases the storage's bytes; the tensor keeps its shape, and autograd's saved references
// to it then hold nothing.
void release_storage(const at::Tensor& t);

}  // namespace lft::model
