#include "lft/runtime/host_transfer.h"

#include <ATen/ATen.h>

#include <atomic>

namespace lft {
namespace {

at::Tensor plain_copy(const at::Tensor& t, const std::string&) { return t.cpu(); }

std::atomic<HostReader> reader{&plain_copy};

}  // namespace

at::Tensor host_read(const at::Tensor& t, const std::string& what) {
  if (t.device().is_cpu()) return t;
  return reader.load()(t, what);
}

void set_host_reader(HostReader r) { reader.store(r != nullptr ? r : &plain_copy); }

at::Tensor to_device(const at::Tensor& host, const at::Device& device) {
  if (device.is_cpu()) return host;
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

}  // namespace lft
