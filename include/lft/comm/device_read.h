// The host's waits for the GPU: a device tensor (the step's losses and gradient norm, the MoE's
// rows per expert, ...) copied to host memory, with the host waiting under the watchdog, so a
// collective on a GPU that cannot finish ends the job with a report here instead of hanging in a
// CUDA call. The model reaches it through runtime/host_transfer.h (installed by Watchdog::start).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace lft {

// `t` on the CPU (itself when it is already there). `what` names the wait in the watchdog's report.
at::Tensor read_on_host(const at::Tensor& t, const std::string& what);

}  // namespace lft
