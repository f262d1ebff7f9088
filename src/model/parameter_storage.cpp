#include "lft/model/parameter_storage.h"

#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>

namespace lft::model {
namespace {

thread_local bool unallocated_scope = false;

}  // namespace

UnallocatedParameters::UnallocatedParameters() : previous_(unallocated_scope) { unallocated_scope = true; }
UnallocatedParameters::~UnallocatedParameters() { unallocated_scope = previous_; }
bool UnallocatedParameters::active() { return unallocated_scope; }

at::Tensor unallocated_tensor(const std::vector<std::int64_t>& shape, const c10::TensorOptions& options) {
  const at::Tensor probe = at::empty({0}, options);  // the allocator and dispatch keys of `options`
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, probe.storage().allocator(), /*resizable=*/true);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), probe.key_set(), probe.dtype());
  t.unsafeGetTensorImpl()->set_sizes_contiguous(shape);
  return t;
}

bool storage_allocated(const at::Tensor& t) {
  return t.numel() == 0 || t.storage().data() != nullptr;
}

void allocate_storage(const at::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  const auto bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
  if (storage->nbytes() == bytes && storage->data() != nullptr) return;
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
}

void release_storage(const at::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::DataPtr(nullptr, t.device()));
  storage->set_nbytes(0);
}

}  // namespace lft::model
