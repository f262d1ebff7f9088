#include "lft/optim/adamw.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace lft::optim {

AdamW::AdamW(std::vector<at::Tensor> params, std::vector<std::string> names, AdamWOptions options)
    : params_(std::move(params)), names_(std::move(names)), options_(options) {
  if (params_.size() != names_.size())
    throw std::invalid_argument("AdamW: one name per parameter is required");
  for (std::size_t i = 0; i < params_.size(); ++i) {
    exp_avg_.push_back(at::zeros_like(params_[i]));
    exp_avg_sq_.push_back(at::zeros_like(params_[i]));
    step_count_.push_back(at::zeros({}, params_[i].options().dtype(at::kFloat)));
    (options_.decay_all || params_[i].dim() >= 2 ? decay_ : no_decay_).push_back(i);
  }
}

void AdamW::step(double lr) {
  step_group(decay_, lr, options_.weight_decay);
  step_group(no_decay_, lr, 0.0);
  ++steps_;
}

void AdamW::step_group(const std::vector<std::size_t>& group, double lr, double weight_decay) {
  // One fused call per (device, dtype): CUDA's kernel refuses lists that mix them (the CPU's does
  // not check), and a layout may hold some pieces on the host (offload) and others on the GPU.
  struct Lists {
    at::Device device;
    at::ScalarType dtype;
    std::vector<at::Tensor> p, g, m, v, s;
  };
  std::vector<Lists> lists;
  for (std::size_t i : group) {
    const at::Tensor& grad = params_[i].grad();
    if (!grad.defined()) continue;
    const at::Tensor& param = params_[i];
    auto it = std::find_if(lists.begin(), lists.end(), [&](const Lists& l) {
      return l.device == param.device() && l.dtype == param.scalar_type();
    });
    if (it == lists.end())
      it = lists.insert(lists.end(), Lists{param.device(), param.scalar_type(), {}, {}, {}, {}, {}});
    it->p.push_back(param);
    it->g.push_back(grad);
    it->m.push_back(exp_avg_[i]);
    it->v.push_back(exp_avg_sq_[i]);
    it->s.push_back(step_count_[i]);
  }
  c10::NoGradGuard no_grad;
  for (Lists& l : lists) {
    // The fused kernel reads the step count for bias correction; the caller advances it first.
    at::_foreach_add_(l.s, 1.0);
    at::_fused_adamw_(l.p, l.g, l.m, l.v, /*max_exp_avg_sqs=*/{}, l.s, lr, options_.beta1, options_.beta2,
                      weight_decay, options_.eps, /*amsgrad=*/false, /*maximize=*/false);
  }
}

void AdamW::load_state(std::size_t param, std::size_t k, const at::Tensor& value) {
  c10::NoGradGuard no_grad;
  (k == 0 ? exp_avg_ : exp_avg_sq_).at(param).copy_(value);
}

std::vector<std::pair<std::string, double>> AdamW::hyperparameters() const {
  return {{"beta1", options_.beta1}, {"beta2", options_.beta2}, {"eps", options_.eps},
          {"weight_decay", options_.weight_decay}};
}

void AdamW::set_steps(std::int64_t steps) {
  steps_ = steps;
  for (auto& s : step_count_) s.fill_(static_cast<double>(steps));
}

std::string AdamW::describe() const {
  return "AdamW (fused; beta1 " + std::to_string(options_.beta1).substr(0, 5) + ", beta2 " +
         std::to_string(options_.beta2).substr(0, 5) + ", weight decay " + std::to_string(options_.weight_decay).substr(0, 6) +
         (options_.decay_all ? " on every tensor)" : " on matrices)");
}

std::int64_t AdamW::state_bytes() const {
  std::int64_t n = 0;
  for (std::size_t i = 0; i < params_.size(); ++i)
    n += (exp_avg_[i].numel() + exp_avg_sq_[i].numel()) * exp_avg_[i].element_size();
  return n;
}

}  // namespace lft::optim
