#include "lft/engine/parallelize.h"

#include <optional>

#include <ATen/ATen.h>

#include "lft/comm/mpi_communicator.h"
#include "lft/engine/expert_parallel.h"
#include "lft/engine/registry.h"
#include "lft/model/adapter_weights.h"
#include "lft/model/finetuning.h"
#include "lft/model/hf_checkpoint.h"
#include "lft/model/init.h"
#include "lft/model/layers.h"
#include "lft/model/parameter_storage.h"
#include "lft/model/quantized_base.h"
#include "lft/model/score_head.h"

namespace lft::engine {

namespace {

std::unique_ptr<model::WeightSource> base_and_adapters(const RunPlan& plan, model::CausalLM& model, const std::string& folder) {
  const double norm = plan.model.initial_norm_weight();
  std::unique_ptr<model::WeightSource> base;
  if (folder.empty())
    base = std::make_unique<model::InitWeights>(model, plan.seed, norm);
  else
    base = std::make_unique<model::HfWeights>(
        folder, model,
        [](const std::string& name) { return model::is_lora_parameter(name) || model::is_score_head_parameter(name); },
        [&plan](const std::string& name) {  // transformers' token classification drops the LM head
          return plan.model.score_head == model::ScoreHead::TokenClassification && name == "lm_head.weight";
        });
  if (plan.finetuning.type != "lora") return base;
  if (plan.adapter_folder.empty())
    return std::make_unique<model::FinetuningWeights>(model, std::move(base),
                                                      std::make_unique<model::InitWeights>(model, plan.seed, norm));
  auto adapter = std::make_shared<const model::PeftAdapter>(plan.adapter_folder);
  adapter->check_shapes(model);
  return std::make_unique<model::FinetuningWeights>(model, std::move(base),
                                                    std::make_unique<model::PeftAdapterWeights>(adapter), adapter);
}

}  // namespace

std::unique_ptr<model::WeightSource> starting_weights(const RunPlan& plan, model::CausalLM& model,
                                                      const std::string& folder) {
  std::unique_ptr<model::WeightSource> weights = base_and_adapters(plan, model, folder);
  if (plan.model.score_head == model::ScoreHead::None) return weights;
  // A reward model's head: TRL's value_head.safetensors as LlamaFactory finds it, a saved `score`,
  // else a new one.
  return std::make_unique<model::ScoreHeadWeights>(
      model, plan.model, std::move(weights), model::score_head_file(plan.model.score_head, folder, plan.adapter_folder),
      plan.seed);
}

ParallelModel parallelize(const RunPlan& plan, DeviceMesh& mesh, const c10::Device& device, const std::string& folder) {
  ParallelModel out;
  out.engine = engine_info(plan.parallel.preset).create(EngineContext{mesh, plan});
  // 4. expert parallel: the experts taken out of the data-parallel engine's hands (its prepare).
  if (plan.mesh.ep > 1) out.engine = std::make_unique<ExpertParallelEngine>(EngineContext{mesh, plan}, std::move(out.engine));
  // 1-2. float8, then LoRA / freeze. A sharding engine reads only its share of the starting
  // weights, into parameters that have no memory yet: no rank ever holds the whole model.
  {
    std::optional<model::UnallocatedParameters> unallocated;
    if (out.engine->reads_weight_shards()) unallocated.emplace();
    out.model = create_run_model(plan, at::TensorOptions().device(device));
  }
  // 5. context parallel; 7. recompute: how the forward runs.
  if (plan.mesh[MeshDim::CP] > 1) {
    out.cp = std::make_unique<CommSequenceExchange>(mesh.device_comm(MeshDim::CP), plan.parallel.cp_ring);
    out.model->set_context_parallel(out.cp.get());
  }
  out.model->set_gradient_checkpointing(plan.gradient_checkpointing);
  // QLoRA: the base linears quantized from the starting weights before the engine places the
  // parameters (they stop being parameters); DoRA's magnitudes then start from the dequantized
  // weights, as PEFT's over a 4-bit base.
  const std::unique_ptr<model::WeightSource> weights = starting_weights(plan, *out.model, folder);
  // Every rank quantizes its share of the linears, then the ranks exchange them (the whole 4-bit
  // base is on every rank).
  std::unique_ptr<MpiCommunicator> world;
  if (plan.finetuning.quantization_bit != 0) world = std::make_unique<MpiCommunicator>(mesh.world(), "quantize", false);
  const model::QuantizeTogether together{world ? world->rank() : 0, world ? world->size() : 1,
                                         [&](model::Quantized4bit& q, int owner) {
                                           for (at::Tensor* t : {&q.packed, &q.absmax, &q.quantized_absmax, &q.absmax_scale})
                                             if (t->defined()) world->broadcast(*t, owner);
                                           at::Tensor offset = at::full({1}, q.absmax_offset, at::kFloat);
                                           world->broadcast(offset, owner);
                                           q.absmax_offset = offset.item<float>();
                                         }};
  const model::QuantizedBase quantized =
      model::quantize_base_linears(*out.model, *weights, plan.finetuning, plan.compute, device, &together);
  if (quantized.linears > 0) {
    if (auto* finetuning = dynamic_cast<model::FinetuningWeights*>(weights.get()))
      finetuning->take_dora_norms_from(*out.model);
  }
  // 3, 6, 8. tensor + sequence parallel, pipeline stages, data parallel: the engine places the
  // parameters and reads their starting weights.
  out.engine->prepare_from(*out.model, *weights);
  return out;
}

struct BaseModelScope::Off {
  model::AdaptersOffScope adapters_off;
};

BaseModelScope::BaseModelScope(const RunPlan& plan) {
  if (plan.finetuning.type == "lora") off_ = std::make_unique<Off>();
}

BaseModelScope::~BaseModelScope() = default;

}  // namespace lft::engine
