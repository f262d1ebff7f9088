// lfmerge on a PEFT LoRA adapter folder: the adapter merged onto its base model folder, as
// LlamaFactory main's `llamafactory-cli merge` does with such a folder (PeftModel.from_pretrained,
// merge_and_unload, save_pretrained). merge_internal.h: peft_folder_plan.
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "lft/ckpt/checkpoint_files.h"
#include "lft/config/config.h"
#include "lft/model/adapter_weights.h"
#include "lft/model/families.h"
#include "lft/model/finetuning.h"
#include "lft/model/hf_checkpoint.h"
#include "lft/runtime/error.h"
#include "lft/runtime/text.h"
#include "merge_internal.h"

namespace lft::ckpt::merge_detail {
namespace {

// A whole tensor of the adapter file (its parameter name, without PEFT's prefix).
at::Tensor adapter_tensor(const model::PeftAdapter& adapter, const std::string& name) {
  const model::SafetensorsEntry* e = adapter.header().find(model::kPeftPrefix + name);
  at::Tensor out = at::empty(e->shape, at::kFloat);
  adapter.read_rows(name, 0, e->shape.empty() ? 1 : e->shape[0], out);
  return out;
}

}  // namespace

bool is_peft_adapter_folder(const std::string& path) {
  return path_exists(path + "/adapter_config.json") && !is_complete(path);
}

ExportPlan peft_folder_plan(const MergeOptions& o) {
  const std::string& folder = o.checkpoint;
  if (o.expected_model.empty())
    throw UsageError(folder + " is a PEFT adapter folder: lfmerge merges it onto the base model it was trained on; "
                     "name that folder (--base MODEL, or export_lora.yaml's model)");
  if (o.format != ExportFormat::HuggingFace)
    throw UsageError(folder + " is a PEFT adapter folder: it exports as the merged model (--format hf); as an "
                     "adapter it is in PEFT's format already");
  ExportPlan p;
  std::shared_ptr<const model::PeftAdapter> adapter;
  std::shared_ptr<model::HfWeights> base;
  try {
    adapter = std::make_shared<const model::PeftAdapter>(folder);
    p.run.model_folder = o.expected_model;
    p.run.config = model::ModelConfig::from_hf_folder(o.expected_model);
    // The base model with the adapter's LoRA linears and whole modules, on the meta device: the
    // names and shapes the adapter must fit.
    const auto meta = at::TensorOptions().device(at::kMeta).dtype(at::kFloat);
    const std::shared_ptr<model::CausalLM> m = model::create_causal_lm(p.run.config, meta);
    model::apply_finetuning(*m, model::adapter_spec(*adapter), meta);
    adapter->check_shapes(*m);
    const auto params = m->named_parameters(/*recurse=*/true);
    std::vector<std::string> strangers;
    for (const model::SafetensorsEntry& e : adapter->header().tensors)
      if (e.name.rfind(model::kPeftPrefix, 0) != 0 || params.find(e.name.substr(std::string(model::kPeftPrefix).size())) == nullptr)
        strangers.push_back(e.name);
    if (!strangers.empty())
      throw UsageError(folder + "/adapter_model.safetensors holds " + std::to_string(strangers.size()) +
                       " tensor(s) that are no adapter or module of " + o.expected_model + "'s model, e.g. '" +
                       strangers.front() + "': is the adapter for this base model?");
    base = std::make_shared<model::HfWeights>(o.expected_model, *m, model::is_lora_parameter);
    for (const auto& item : params) {
      if (model::is_lora_parameter(item.key())) continue;
      p.exported.tensors.push_back({item.key(), item.value().sizes().vec(), at::kFloat});
    }
  } catch (const config::ConfigError& e) {
    throw UsageError(e.what());
  } catch (const model::FinetuningError& e) {
    throw UsageError(folder + "/adapter_config.json: " + e.what());
  }
  sort_export_order(p.exported.tensors);
  const double scaling = model::adapter_spec(*adapter).lora_scaling();  // PEFT's, of the adapter's r and alpha
  p.exported.load = [adapter, base, scaling](const TensorInfo& t) {
    // A module PEFT saved whole (modules_to_save) is the adapter's; the others are the base's,
    // with W + scaling * B @ A where the adapter has a LoRA pair.
    if (adapter->has(t.name)) return adapter_tensor(*adapter, t.name);
    at::Tensor w = at::empty(t.shape, at::kFloat);
    base->read_rows(t.name, 0, t.shape.empty() ? 1 : t.shape[0], w);
    const std::string linear = t.name.substr(0, t.name.size() - std::string(".weight").size());
    if (!ends_with(t.name, ".weight") || !adapter->has(linear + ".lora_A.weight")) return w;
    return merge_lora_weight(w, adapter_tensor(*adapter, linear + ".lora_A.weight"),
                             adapter_tensor(*adapter, linear + ".lora_B.weight"), scaling,
                             adapter->use_dora ? adapter_tensor(*adapter, linear + ".lora_magnitude_vector") : at::Tensor());
  };
  p.exported.origin = "PEFT adapter " + folder + " (LoRA r=" + std::to_string(adapter->rank) +
                      (adapter->use_dora ? ", DoRA" : "") + ") merged onto the base model " + o.expected_model +
                      " (W + " + number_text(scaling) + " * B @ A, in float32" +
                      (adapter->modules_to_save.empty() ? "" : "; its modules_to_save taken whole") + ")";
  p.what = "PEFT adapter " + folder;
  return p;
}

}  // namespace lft::ckpt::merge_detail
