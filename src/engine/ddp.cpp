#include "lft/engine/ddp.h"

#include <c10/core/GradMode.h>

#include "lft/engine/run_plan.h"
#include "lft/model/causal_lm.h"

#include <utility>

namespace lft::engine {

DdpEngine::DdpEngine(const EngineContext& ctx, std::string name)
    : name_(std::move(name)),
      comm_(ctx.mesh.device_dp_cp()), bucket_bytes_(ctx.plan.parallel.bucket_bytes) {}

void DdpEngine::prepare(model::CausalLM& model) {
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    names_.push_back(item.key());
    params_.push_back(item.value());
  }
  // Every rank starts from rank 0's weights (they are equal by construction; this makes it so).
  {
    c10::NoGradGuard no_grad;
    for (auto& p : params_) comm_.broadcast(p, 0);
  }
  buckets_ = std::make_unique<GradientBuckets>(comm_, params_, bucket_bytes_);
}

void DdpEngine::begin_micro_batch(bool sync) {
  sync_ = sync;
  buckets_->expect_backwards(sync ? 1 : 0);
}

void DdpEngine::finish_gradients() {
  if (sync_) buckets_->finish();
}

}  // namespace lft::engine
