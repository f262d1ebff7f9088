// The engines behind the sharded presets (fsdp2, fsdp, deepspeed): the sharded component under
// the plan's policy, or the ddp engine under the preset's name where the policy is all-reduce.
#include "lft/engine/sharded_engines.h"

#include "lft/engine/memory_estimate.h"
#include "lft/engine/ddp.h"
#include "lft/engine/sharded.h"
#include "lft/runtime/log.h"

namespace lft::engine {
namespace {

// What offload does on this run, for the start-up log.
std::string offload_note(const EngineContext& ctx, const ShardingPlan& plan) {
  if (!ctx.mesh.on_cuda())
    return "offload: fp32 shards, gradients and AdamW state in host memory, copied to and from the "
           "compute buffers around each gather and reduce (host to host on this CPU run; nothing to pin)";
  return std::string("offload: fp32 shards, gradients and AdamW state in ") +
         (plan.pin_memory ? "pinned" : "pageable") + " host memory, copied to " + ctx.mesh.device().str() +
         " before each all-gather and back after each reduce-scatter; AdamW steps on the CPU";
}

}  // namespace

std::unique_ptr<Engine> create_sharded(const EngineContext& ctx) {
  const ParallelPlan& parallel = ctx.plan.parallel;
  for (const auto& note : parallel.notes) log0(note);
  if (!parallel.sharded) return std::make_unique<DdpEngine>(ctx, parallel.engine());  // fsdp NO_SHARD, ZeRO-0
  if (parallel.sharded->offload) log0(offload_note(ctx, *parallel.sharded));
  return std::make_unique<ShardedEngine>(ctx, *parallel.sharded);
}

MemoryEstimate estimate_sharded_engine(const RunPlan& run) {
  if (!run.parallel.sharded) return estimate_replicated(run, /*buckets=*/true);
  return estimate_sharded(run, *run.parallel.sharded);
}

}  // namespace lft::engine
