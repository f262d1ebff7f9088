// PEFT adapter folders, and the starting weights of a fine-tuning run.
#include "lft/model/adapter_weights.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include "lft/config/config.h"
#include "lft/model/finetuning.h"
#include "lft/model/layers.h"
#include "lft/runtime/json_nesting.h"

namespace lft::model {
namespace {

using config::ConfigError;

std::vector<std::string> string_list(const nlohmann::json& j, const std::string& file, const char* field) {
  if (!j.contains(field) || j[field].is_null()) return {};
  const nlohmann::json& v = j[field];
  if (v.is_string()) return {v.get<std::string>()};
  std::vector<std::string> out;
  if (v.is_array())
    for (const auto& item : v) {
      if (!item.is_string()) throw ConfigError(file + ": field '" + field + "' must list strings");
      out.push_back(item.get<std::string>());
    }
  else
    throw ConfigError(file + ": field '" + field + "' must be a string or a list of strings");
  return out;
}

}  // namespace

PeftAdapter::PeftAdapter(const std::string& folder) : folder_(folder), file_(folder + "/adapter_model.safetensors") {
  const std::string config_file = folder + "/adapter_config.json";
  std::ifstream in(config_file);
  if (!in) throw ConfigError(config_file + ": cannot be read (is " + folder + " a PEFT adapter folder?)");
  std::stringstream text;
  text << in.rdbuf();
  if (const std::string deep = json_too_deep(text.str()); !deep.empty()) throw ConfigError(config_file + ": " + deep);
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw ConfigError(config_file + ": not valid JSON");
  const std::string type = j.value("peft_type", std::string());
  if (type != "LORA") throw ConfigError(config_file + ": peft_type \"" + type + "\": lftrain loads LoRA adapters only");
  if (j.value("fan_in_fan_out", false)) throw ConfigError(config_file + ": fan_in_fan_out = true is not supported");
  if (!j.contains("r") || !j["r"].is_number_integer() || j["r"].get<std::int64_t>() < 1)
    throw ConfigError(config_file + ": field 'r' must be a positive integer");
  rank = j["r"].get<std::int64_t>();
  lora_alpha = j.contains("lora_alpha") && j["lora_alpha"].is_number() ? j["lora_alpha"].get<double>() : 8.0;
  lora_dropout = j.contains("lora_dropout") && j["lora_dropout"].is_number() ? j["lora_dropout"].get<double>() : 0.0;
  use_rslora = j.value("use_rslora", false);
  use_dora = j.value("use_dora", false);
  target_modules = string_list(j, config_file, "target_modules");
  modules_to_save = string_list(j, config_file, "modules_to_save");
  if (target_modules.empty()) throw ConfigError(config_file + ": field 'target_modules' is empty");
  header_ = read_safetensors_header(file_);
}

FinetuningSpec adapter_spec(const PeftAdapter& adapter) {
  FinetuningSpec spec;
  spec.type = "lora";
  spec.lora_rank = adapter.rank;
  spec.lora_alpha = adapter.lora_alpha;
  spec.use_rslora = adapter.use_rslora;
  spec.use_dora = adapter.use_dora;
  spec.lora_target = adapter.target_modules;
  spec.additional_target = adapter.modules_to_save;
  return spec;
}

bool PeftAdapter::has(const std::string& name) const { return header_.find(kPeftPrefix + name) != nullptr; }

namespace {

std::string shape_text(at::IntArrayRef shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

void PeftAdapter::check_shapes(const torch::nn::Module& model) const {
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const SafetensorsEntry* e = header_.find(kPeftPrefix + item.key());
    if (e == nullptr || item.value().sizes().equals(e->shape)) continue;
    throw ConfigError(file_ + ": tensor '" + e->name + "' has shape " + shape_text(e->shape) + ", the model's " +
                      item.key() + " " + shape_text(item.value().sizes()) +
                      ": size mismatch (is the adapter for this base model?)");
  }
}

void PeftAdapter::read_rows(const std::string& name, std::int64_t row_begin, std::int64_t rows, at::Tensor out) const {
  const SafetensorsEntry* e = header_.find(kPeftPrefix + name);
  if (e == nullptr) throw ConfigError(file_ + ": no tensor '" + kPeftPrefix + name + "' for the model's " + name);
  // The whole shape was checked against the model (check_shapes); these rows must lie inside it.
  const std::vector<std::int64_t> have = out.sizes().vec();
  const bool fits = e->shape.size() == have.size() &&
                    std::equal(have.begin() + (have.empty() ? 0 : 1), have.end(), e->shape.begin() + (have.empty() ? 0 : 1)) &&
                    (e->shape.empty() || (row_begin >= 0 && row_begin + rows <= e->shape[0]));
  if (!fits)
    throw ConfigError(file_ + ": tensor '" + e->name + "' does not fit the model's " + name +
                      " (is the adapter for this base model?)");
  at::NoGradGuard no_grad;
  out.copy_(read_safetensors_rows(file_, header_, e->name, row_begin, rows).view(out.sizes()));
}

FinetuningWeights::FinetuningWeights(const torch::nn::Module& model, std::unique_ptr<WeightSource> base,
                                     std::unique_ptr<WeightSource> adapters, std::shared_ptr<const PeftAdapter> adapter)
    : base_(std::move(base)), adapters_(std::move(adapters)), adapter_(std::move(adapter)) {
  const auto params = model.named_parameters(/*recurse=*/true);
  for (const auto& item : params)
    if (is_dora_magnitude(item.key()))
      dora_in_features_[item.key()] = params[dora_base_weight(item.key())].size(1);
}

void FinetuningWeights::read_rows(const std::string& name, std::int64_t row_begin, std::int64_t rows,
                                  at::Tensor out) const {
  if (is_dora_magnitude(name) && !(adapter_ && adapter_->has(name))) {
    at::NoGradGuard no_grad;
    at::Tensor weight;
    if (const auto q = quantized_.find(name); q != quantized_.end()) {
      weight = q->second->base_weight(at::kFloat).narrow(0, row_begin, rows);
    } else {
      weight = at::empty({rows, dora_in_features_.at(name)}, at::kFloat);
      base_->read_rows(dora_base_weight(name), row_begin, rows, weight);
    }
    out.copy_(at::linalg_vector_norm(weight, 2, {1}));
    return;
  }
  const bool from_adapters = is_lora_parameter(name) || (adapter_ && adapter_->has(name));
  (from_adapters ? adapters_ : base_)->read_rows(name, row_begin, rows, out);
}

void FinetuningWeights::take_dora_norms_from(const torch::nn::Module& model) {
  for (const auto& item : model.named_modules()) {
    auto linear = std::dynamic_pointer_cast<const LinearImpl>(item.value());
    if (linear && linear->quantized && linear->lora_magnitude_vector.defined())
      quantized_[item.key() + ".lora_magnitude_vector"] = linear;
  }
}

std::string FinetuningWeights::describe() const { return base_->describe() + " + adapters from " + adapters_->describe(); }

}  // namespace lft::model
