// The planner's decoder: what it reads of a configuration (the model, the sequence length, the
// precision, the bucket size, the global batch), beside the engine layer's decoders that resolve
// each candidate layout's plan.
#include "planner_config.h"

#include "lft/engine/mesh_plan.h"
#include "lft/engine/parallel_config.h"
#include "lft/engine/run_plan.h"
#include "lft/plan/planner.h"

namespace lft::plan {

ConfigSettings config_settings(const config::Config& cfg) {
  ConfigSettings s;
  s.seq_len = cfg.integer("cutoff_len");
  s.compute_bytes = cfg.boolean("bf16") || cfg.boolean("fp16") ? 2 : 4;
  s.ddp_bucket_bytes = cfg.real("ddp_bucket_cap_mb") * 1024.0 * 1024.0;
  return s;
}

std::shared_ptr<model::CausalLM> meta_model(const config::Config& cfg) {
  engine::RunPlan p;
  p.model = model::ModelConfig::from_run_config(cfg);
  p.fp8 = cfg.boolean("fp8");
  p.finetuning = engine::finetuning_spec(cfg);
  return engine::checked_meta_model(cfg, p);
}

StepInput step_input(const PlanRequest& r, const ModelShape& shape, const config::Config& cfg, const Layout& l) {
  StepInput in;
  in.cluster = r.cluster;
  in.model = shape;
  in.layout = l;
  const ConfigSettings s = config_settings(cfg);
  in.seq_len = s.seq_len;
  in.compute_bytes = s.compute_bytes;
  in.ddp_bucket_bytes = s.ddp_bucket_bytes;
  return in;
}

std::int64_t config_global_batch(const config::Config& cfg, int world) {
  // none runs one rank: the batch of a multi-rank plan is counted as ddp's.
  const engine::EngineInfo& asked = engine::engine_for(cfg);
  const engine::EngineInfo& info = asked.preset == engine::EnginePreset::None ? engine::engine_info(engine::EnginePreset::Ddp) : asked;
  const MeshShape mesh = engine::plan_mesh(cfg, info, world);
  return cfg.integer("per_device_train_batch_size") * cfg.integer("gradient_accumulation_steps") * mesh.dp_size();
}

}  // namespace lft::plan
