// Activation checkpointing: a custom autograd Function that recomputes its block in backward.
#include "lft/model/checkpoint.h"

#include <memory>
#include <utility>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <ATen/core/ivalue.h>

namespace lft::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Fn = std::function<at::Tensor(const at::Tensor&)>;

// Keeps the block alive in the autograd context (an IValue capsule) until backward.
struct FnHolder : torch::CustomClassHolder {
  explicit FnHolder(Fn f) : fn(std::move(f)) {}
  Fn fn;
};

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input,
                            c10::intrusive_ptr<FnHolder> holder) {
    at::Tensor out;
    {
      at::NoGradGuard no_grad;  // Function::apply already disables grad; be explicit
      out = holder->fn(input);
    }
    ctx->save_for_backward({input});
    ctx->saved_data["fn"] = c10::IValue::make_capsule(std::move(holder));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    auto holder = c10::static_intrusive_pointer_cast<FnHolder>(ctx->saved_data["fn"].toCapsule());
    at::Tensor x = saved[0].detach().requires_grad_(true);
    at::Tensor out;
    {
      at::AutoGradMode enable_grad(true);
      out = holder->fn(x);
    }
    // Drop the context's references early: the block may be large and backward is reentrant.
    ctx->saved_data.erase("fn");
    if (out.requires_grad()) {
      torch::autograd::backward({out}, {grad_outputs[0]});
    }
    return {x.grad(), at::Tensor()};
  }
};

}  // namespace

at::Tensor checkpoint(Fn fn, const at::Tensor& input) {
  if (!at::GradMode::is_enabled()) return fn(input);
  at::Tensor x = input;
  if (!x.requires_grad()) x = input.detach().requires_grad_(true);
  return CheckpointFunction::apply(x, c10::make_intrusive<FnHolder>(std::move(fn)));
}

}  // namespace lft::model
