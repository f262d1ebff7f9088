// "ddp": data parallel. Every rank holds the whole model; gradients are summed over the dp group
// in buckets of about `ddp_bucket_cap_mb`, launched from gradient hooks while backward is still
// running (parameters in reverse order, as their gradients become ready), and only on the last
// micro-batch of an accumulation (no_sync for the others): GradientBuckets over dp x cp.
#pragma once

#include <memory>
#include <string>

#include "lft/engine/engine.h"
#include "lft/engine/gradient_buckets.h"

namespace lft::engine {

class DdpEngine final : public Engine {
 public:
  // `name`: the engine the config asked for (ddp, or fsdp NO_SHARD and ZeRO-0, which are this).
  explicit DdpEngine(const EngineContext& ctx, std::string name = "ddp");
  const char* name() const override { return name_.c_str(); }
  void prepare(model::CausalLM& model) override;
  void begin_micro_batch(bool sync) override;
  void finish_gradients() override;
  std::vector<at::Tensor> parameters() override { return params_; }
  std::vector<std::string> parameter_names() override { return names_; }
  std::vector<TensorBox> parameter_boxes() override { return whole_boxes(params_, comm_.size(), comm_.rank()); }
  // Gradients are identical on every rank after the all-reduce: the local norm is the norm.
  at::Tensor grad_norm_squared() override { return local_grad_norm_squared(params_, comm_.device()); }
  std::vector<Communicator*> communicators() const override { return {&comm_}; }
  std::size_t bucket_count() const { return buckets_->bucket_count(); }

 private:
  std::string name_;
  Communicator& comm_;
  double bucket_bytes_;
  bool sync_ = true;
  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  std::unique_ptr<GradientBuckets> buckets_;
};

}  // namespace lft::engine
