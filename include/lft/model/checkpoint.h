// Activation (gradient) checkpointing for LibTorch C++, which has no torch.utils.checkpoint.
#pragma once

#include <functional>

#include <ATen/core/Tensor.h>

namespace lft::model {

// Returns fn(input), keeping none of fn's intermediate activations: forward runs fn without
// recording a graph and saves only `input`; backward recomputes fn(input) with grad enabled on a
// detached copy of the input and runs torch::autograd::backward on it, which accumulates the
// gradients of the parameters fn uses into their .grad and fires every hook registered on them
// (as a normal backward does; the DDP engine relies on this), then passes the input's gradient on.
// This is the "reentrant" scheme of torch.utils.checkpoint(use_reentrant=True), without RNG state
// restore: fn must be deterministic (its dropout is seeded). The recompute runs under the autocast
// state (CPU and CUDA) of the forward, so a bf16 forward is recomputed in bf16.
//
// When grad mode is off, simply returns fn(input). When the input does not require grad (e.g. a
// frozen embedding under LoRA), it is replaced by a detached leaf that does, so the output still
// requires grad and fn's parameter gradients are still computed.
// fn is copied and kept alive until backward has run; it must capture what it needs by value.
at::Tensor checkpoint(std::function<at::Tensor(const at::Tensor&)> fn, const at::Tensor& input);

}  // namespace lft::model
