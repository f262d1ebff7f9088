// "none": one rank, the whole model, no communication.
#pragma once

#include "lft/engine/engine.h"

namespace lft::engine {

class NoneEngine final : public Engine {
 public:
  explicit NoneEngine(const EngineContext& ctx);
  const char* name() const override { return "none"; }
  void prepare(model::CausalLM& model) override;
  void begin_micro_batch(bool) override {}
  void finish_gradients() override {}
  std::vector<at::Tensor> parameters() override { return params_; }
  std::vector<std::string> parameter_names() override { return names_; }
  std::vector<TensorBox> parameter_boxes() override { return whole_boxes(params_); }
  at::Tensor grad_norm_squared() override { return local_grad_norm_squared(params_, device_); }
  std::vector<Communicator*> communicators() const override { return {}; }

 private:
  at::Device device_;
  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
};

}  // namespace lft::engine
