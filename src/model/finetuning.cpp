// Freeze and LoRA fine-tuning: which parameters train, and the adapters.
#include "lft/model/finetuning.h"
#include "lft/runtime/text.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "lft/model/families.h"
#include "lft/model/init.h"
#include "lft/model/layers.h"

namespace lft::model {
namespace {

// PEFT's target matching: the module name is the target, or ends with "." + target.
bool names_module(const std::string& module, const std::string& target) {
  return module == target || ends_with(module, "." + target);
}

std::string joined(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

struct LayerLinear {
  std::string name;
  std::shared_ptr<LinearImpl> linear;
};

// Every Linear inside the decoder layers, in model order.
std::vector<LayerLinear> layer_linears(const CausalLM& model) {
  std::vector<LayerLinear> out;
  for (const auto& item : model.named_modules()) {
    auto linear = std::dynamic_pointer_cast<LinearImpl>(item.value());
    if (linear && item.key().rfind("model.layers.", 0) == 0 && item.key().find(".lora_") == std::string::npos)
      out.push_back({item.key(), linear});
  }
  return out;
}

// The names of the modules (of any kind) outside the decoder layers that hold parameters:
// embed_tokens, norm, lm_head.
std::set<std::string> outer_modules(const CausalLM& model) {
  std::set<std::string> out;
  for (const auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    if (name.rfind("model.layers.", 0) == 0) continue;
    const std::string module = name.substr(0, name.rfind('.'));
    out.insert(module.substr(module.rfind('.') + 1));
  }
  return out;
}

// LlamaFactory's freeze tuning: the ".<layer>.<module>" fragments (and extra module names) whose
// parameters train, by substring, exactly as its _setup_freeze_tuning.
std::vector<std::string> freeze_fragments(const CausalLM& model, const FinetuningSpec& spec) {
  const std::int64_t layers = model.num_layers(), n = spec.freeze_trainable_layers;
  std::vector<std::int64_t> ids;
  if (n > 0)
    for (std::int64_t i = std::max<std::int64_t>(0, layers - n); i < layers; ++i) ids.push_back(i);
  else
    for (std::int64_t i = 0; i < std::min(-n, layers); ++i) ids.push_back(i);
  std::set<std::string> hidden;
  for (const auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    const std::string prefix = "model.layers.0.";
    if (name.rfind(prefix, 0) == 0) hidden.insert(name.substr(prefix.size(), name.find('.', prefix.size()) - prefix.size()));
  }
  std::vector<std::string> fragments;
  for (const std::string& module : spec.freeze_trainable_modules) {
    if (module != "all" && hidden.count(module) == 0)
      throw FinetuningError("freeze_trainable_modules", "freeze_trainable_modules names '" + module +
                                                            "', which the decoder layers do not have (they have: all, " +
                                                            joined(hidden) + ")");
    for (std::int64_t i : ids) fragments.push_back("." + std::to_string(i) + "." + (module == "all" ? "" : module));
  }
  const std::set<std::string> outer = outer_modules(model);
  for (const std::string& module : spec.freeze_extra_modules) {
    if (outer.count(module) == 0)
      throw FinetuningError("freeze_extra_modules", "freeze_extra_modules names '" + module +
                                                        "', which is not a module outside the decoder layers (those are: " +
                                                        joined(outer) + ")");
    fragments.push_back(module);
  }
  return fragments;
}

// The parameters of the additional_target modules, matched as PEFT matches modules_to_save: the
// module's name ends with the target ("norm" is model.norm and every layer's norms, as through
// LlamaFactory).
bool in_additional_target(const std::string& param, const FinetuningSpec& spec) {
  const std::string module = param.substr(0, param.rfind('.'));
  return std::any_of(spec.additional_target.begin(), spec.additional_target.end(),
                     [&](const std::string& t) { return ends_with(module, t); });
}

void check_additional_target(const CausalLM& model, const FinetuningSpec& spec) {
  std::set<std::string> modules;
  for (const auto& item : model.named_parameters()) modules.insert(item.key().substr(0, item.key().rfind('.')));
  for (const std::string& t : spec.additional_target) {
    const bool found = std::any_of(modules.begin(), modules.end(), [&](const std::string& m) { return ends_with(m, t); });
    if (!found)
      throw FinetuningError("additional_target", "additional_target names '" + t +
                                                     "', which is no module of the model (e.g. embed_tokens, lm_head, norm)");
    if (t.find("lora_") != std::string::npos)
      throw FinetuningError("additional_target", "additional_target names the adapter '" + t + "'");
  }
}

}  // namespace

double FinetuningSpec::lora_scaling() const {
  const double r = static_cast<double>(lora_rank);
  return use_rslora ? lora_alpha / std::sqrt(r) : lora_alpha / r;
}

namespace {
constexpr const char* kDoraMagnitude = ".lora_magnitude_vector";
}  // namespace

bool is_dora_magnitude(const std::string& name) { return ends_with(name, kDoraMagnitude); }

std::string dora_base_weight(const std::string& magnitude_name) {
  return magnitude_name.substr(0, magnitude_name.size() - std::string(kDoraMagnitude).size()) + ".weight";
}

bool is_lora_parameter(const std::string& name) {
  return ends_with(name, ".lora_A.weight") || ends_with(name, ".lora_B.weight") || is_dora_magnitude(name);
}

std::vector<std::string> lora_target_modules(const CausalLM& model, const FinetuningSpec& spec) {
  const std::vector<LayerLinear> linears = layer_linears(model);
  std::set<std::string> short_names;
  for (const LayerLinear& l : linears) short_names.insert(l.name.substr(l.name.rfind('.') + 1));
  const bool all = std::find(spec.lora_target.begin(), spec.lora_target.end(), "all") != spec.lora_target.end();
  for (const std::string& t : spec.lora_target) {
    if (t == "all") continue;
    const bool found = std::any_of(linears.begin(), linears.end(), [&](const LayerLinear& l) { return names_module(l.name, t); });
    if (!found)
      throw FinetuningError("lora_target", "lora_target names '" + t + "', which is no linear of the decoder layers (they are: all, " +
                                               joined(short_names) + ")");
  }
  std::vector<std::string> out;
  for (const LayerLinear& l : linears)
    if (all || std::any_of(spec.lora_target.begin(), spec.lora_target.end(),
                           [&](const std::string& t) { return names_module(l.name, t); }))
      out.push_back(l.name);
  return out;
}

std::vector<std::string> lora_target_names(const CausalLM& model, const FinetuningSpec& spec) {
  std::vector<std::string> out;
  for (const std::string& m : lora_target_modules(model, spec)) {
    const std::string name = m.substr(m.rfind('.') + 1);
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

namespace {

// A reward model (LlamaFactory's stage rm) trains its score head whatever the fine-tuning type
// (TRL adds the value head after the adapters, trainable); its lm_head computes nothing (no
// gradient: torch's AdamW leaves it as it is, decay included), so it is frozen.
void score_head_trains(CausalLM& model) {
  if (!model.score) return;
  for (auto& item : model.score->named_parameters()) item.value().set_requires_grad(true);
  if (model.lm_head) model.lm_head->weight.set_requires_grad(false);
}

}  // namespace

void apply_finetuning(CausalLM& model, const FinetuningSpec& spec, const c10::TensorOptions& options) {
  if (spec.type == "full") return score_head_trains(model);
  std::vector<std::string> fragments;
  if (spec.type == "lora") {
    check_additional_target(model, spec);
    const std::vector<std::string> targets = lora_target_modules(model, spec);
    for (const LayerLinear& l : layer_linears(model))
      if (std::find(targets.begin(), targets.end(), l.name) != targets.end())
        l.linear->add_lora(spec.lora_rank, spec.lora_scaling(), spec.lora_dropout, parameter_seed(l.name, 0), options,
                           spec.use_dora);
  } else if (spec.type == "freeze") {
    fragments = freeze_fragments(model, spec);
  } else {
    throw FinetuningError("finetuning_type", "finetuning_type = \"" + spec.type + "\" is not full, freeze or lora");
  }
  bool any = false;
  for (auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    const bool trains =
        spec.type == "lora"
            ? is_lora_parameter(name) || in_additional_target(name, spec)
            : std::any_of(fragments.begin(), fragments.end(), [&](const std::string& f) { return name.find(f) != std::string::npos; });
    item.value().set_requires_grad(trains);
    any = any || trains;
  }
  if (!any && !model.score)
    throw FinetuningError("freeze_trainable_layers",
                          "no parameter trains: freeze_trainable_layers = 0 and no freeze_extra_modules");
  score_head_trains(model);
}

}  // namespace lft::model
