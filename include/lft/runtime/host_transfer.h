// Host <-> device transfers in the step's hot paths that must not stall the host needlessly.
//
// host_read: a device tensor read on the host by code that may not know the communication layer
// (the model: the MoE routing's row counts, its statistics). On a GPU such a read waits for the
// compute stream, and with it for any collective the stream waits on: when that collective cannot
// finish, the read must end the job with the watchdog's report, not hang in a CUDA call. The comm
// layer installs its reader (comm/device_read.h's read_on_host, under the watchdog) when the
// watchdog starts; until then, and in programs without it, the read is a plain copy.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace lft {

using HostReader = at::Tensor (*)(const at::Tensor& t, const std::string& what);

// `t` on the CPU (itself when it is already there); `what` names the wait in a report.
at::Tensor host_read(const at::Tensor& t, const std::string& what);

// Installs the reader host_read uses (once, at start-up, before any thread reads).
void set_host_reader(HostReader reader);

// `host` (a CPU tensor made on the host: indices, counts) on `device`. To a GPU through pinned
// memory, queued on the current stream without the host waiting (a copy from pageable memory
// waits for the GPU to catch up); the pinned block is not reused before the copy has run.
at::Tensor to_device(const at::Tensor& host, const at::Device& device);

}  // namespace lft
