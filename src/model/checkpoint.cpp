// Activation checkpointing: a custom autograd Function that recomputes its block in backward.
#include "lft/model/checkpoint.h"

#include <memory>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <ATen/core/ivalue.h>

namespace lft::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Fn = std::function<at::Tensor(const at::Tensor&)>;

// The autocast state of one device type: what the forward ran under, restored for the recompute
// (backward runs outside the forward's autocast scope; as torch.utils.checkpoint does).
struct AutocastState {
  at::DeviceType device;
  bool enabled;
  at::ScalarType dtype;

  static AutocastState of(at::DeviceType device) {
    return {device, at::autocast::is_autocast_enabled(device), at::autocast::get_autocast_dtype(device)};
  }
  void apply() const {
    at::autocast::set_autocast_dtype(device, dtype);
    at::autocast::set_autocast_enabled(device, enabled);
  }
};

constexpr at::DeviceType kAutocastDevices[] = {at::kCPU, at::kCUDA};

// Sets the forward's autocast state while it lives, and restores the backward's after.
class AutocastRestore {
 public:
  explicit AutocastRestore(const std::vector<AutocastState>& forward) {
    for (at::DeviceType d : kAutocastDevices) outer_.push_back(AutocastState::of(d));
    for (const AutocastState& s : forward) s.apply();
  }
  ~AutocastRestore() {
    for (const AutocastState& s : outer_) s.apply();
    at::autocast::clear_cache();  // the recompute's casts of the weights are not kept
  }
  AutocastRestore(const AutocastRestore&) = delete;
  AutocastRestore& operator=(const AutocastRestore&) = delete;

 private:
  std::vector<AutocastState> outer_;
};

// Keeps the block alive in the autograd context (an IValue capsule) until backward, with the
// autocast state its forward ran under.
struct FnHolder : torch::CustomClassHolder {
  explicit FnHolder(Fn f) : fn(std::move(f)) {
    for (at::DeviceType d : kAutocastDevices) autocast.push_back(AutocastState::of(d));
  }
  Fn fn;
  std::vector<AutocastState> autocast;
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
      const AutocastRestore autocast(holder->autocast);
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
