// lfmerge: freeze and LoRA checkpoints. The whole model they stand for (the base model's weights,
// the trained tensors over them, W + scaling * B @ A beside each LoRA adapter), one tensor at a
// time; and the adapters alone in PEFT's layout (--format peft).
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "lft/ckpt/merge.h"
#include "lft/model/adapter_weights.h"
#include "lft/model/hf_checkpoint.h"
#include "lft/model/init.h"
#include "lft/model/prequantized.h"
#include "lft/model/safetensors.h"
#include "lft/model/score_head.h"
#include "lft/runtime/error.h"
#include "merge_internal.h"

namespace lft::ckpt::merge_detail {
namespace {

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const std::size_t begin = item.find_first_not_of(" \t"), end = item.find_last_not_of(" \t");
    if (begin != std::string::npos) out.push_back(item.substr(begin, end - begin + 1));
  }
  return out;
}

std::string join(const std::vector<std::string>& names, const std::string& separator) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : separator) + n;
  return out;
}

// "model.norm.weight" -> "model.norm".
std::string module_of(const std::string& parameter) {
  return parameter.substr(0, parameter.rfind('.'));
}

std::string adapter_tensor(const std::string& parameter, char matrix) {
  if (matrix == 'M') return module_of(parameter) + ".lora_magnitude_vector";
  return module_of(parameter) + ".lora_" + matrix + ".weight";
}

bool is_linear(const std::string& parameter, const std::vector<std::int64_t>& shape) {
  return shape.size() == 2 && parameter != "model.embed_tokens.weight";
}

// The tensors a checkpoint holds whole (not LoRA adapters).
std::vector<std::string> whole_tensors(const std::vector<TensorInfo>& stored) {
  std::vector<std::string> out;
  for (const TensorInfo& t : stored)
    if (!adapter_name(t.name)) out.push_back(t.name);
  return out;
}

// The checkpoint was trained over `folder`: it must still hold the same bytes.
void check_base_folder(const Finetuning& ft, const std::string& checkpoint) {
  const std::string& folder = ft.base_model;
  const std::string what = checkpoint + " holds only what its " + ft.type +
                           " run trained; the other weights are those of its base model " + folder;
  const std::string peft =
      ft.type == "lora" ? ", or export the adapters alone with --format peft" : "";
  if (!is_directory(folder))
    throw UsageError(what +
                     ", which does not exist: restore that folder, or start lfmerge in the "
                     "directory the training run was started in" +
                     peft);
  const std::string hash = model::model_folder_hash(folder);
  if (hash != ft.base_model_hash)
    throw UsageError(what + ", and its files have changed since the run: they hash to " + hash +
                     ", the run's base hashed to " + ft.base_model_hash +
                     ". Merged onto other weights the model would be wrong: restore the exact base "
                     "the run trained on in " +
                     folder + peft);
}

// The weights of the base a freeze or LoRA run started from, for the parameters its checkpoint
// does not hold: its model folder's, or init_parameter's for an inline [model].
class BaseWeights {
 public:
  // `needed`: name -> shape. UsageError when the folder is not the run's base or lacks a tensor.
  BaseWeights(const Finetuning& ft, const std::string& checkpoint,
              const std::map<std::string, std::vector<std::int64_t>>& needed)
      : folder_(ft.base_model), seed_(static_cast<std::uint64_t>(ft.seed)) {
    if (folder_.empty()) return;
    check_base_folder(ft, checkpoint);
    if (model::read_prequantization(folder_))
      throw UsageError(checkpoint + " trained over " + folder_ +
                       ", which holds 4-bit weights saved by bitsandbytes: a merged model needs the full-precision "
                       "weights they were quantized from. Export the adapter alone with --format peft (PEFT loads it "
                       "over that folder), or merge it over the full-precision original with PEFT");
    for (const std::string& file : model::hf_weight_files(folder_)) {
      const auto& header =
          headers_.emplace(file, model::read_safetensors_header(file)).first->second;
      for (const model::SafetensorsEntry& e : header.tensors) file_of_.emplace(e.name, file);
    }
    check_holds(needed);
  }

  at::Tensor read(const std::string& name, const std::vector<std::int64_t>& shape) const {
    if (folder_.empty()) return model::init_parameter(name, shape, seed_);
    const std::string& file = file_of_.at(name);
    return model::read_safetensors_tensor(file, headers_.at(file), name);
  }

  std::string describe() const {
    return folder_.empty()
               ? "initialisation of the inline [model] (seed " + std::to_string(seed_) + ")"
               : "model " + folder_;
  }

 private:
  void check_holds(const std::map<std::string, std::vector<std::int64_t>>& needed) const {
    std::vector<std::string> problems;
    for (const auto& [name, shape] : needed) {
      const auto it = file_of_.find(name);
      const model::SafetensorsEntry* e =
          it == file_of_.end() ? nullptr : headers_.at(it->second).find(name);
      if (e == nullptr)
        problems.push_back("'" + name + "' is missing");
      else if (e->shape != shape)
        problems.push_back("'" + name + "' has shape " + shape_text(e->shape) +
                           ", the run's model " + shape_text(shape));
      else if (!at::isFloatingType(e->scalar_type))
        problems.push_back("'" + name + "' has dtype " + e->dtype + ", not a floating-point one");
    }
    if (problems.empty()) return;
    throw UsageError("the base model " + folder_ +
                     " does not hold the weights of the run's model: " + join(problems, "; ") +
                     ". Is it the folder the run trained on?");
  }

  std::string folder_;
  std::uint64_t seed_;
  std::map<std::string, model::SafetensorsHeader> headers_;  // per file
  std::map<std::string, std::string> file_of_;               // tensor -> file
};

struct MergedModel {
  const Source* source;
  std::set<std::string> whole;    // parameters the checkpoint holds whole
  std::set<std::string> adapted;  // parameters with LoRA adapters
  double scaling;
  bool dora;
  BaseWeights base;
};

at::Tensor load_merged(const MergedModel& m, const TensorInfo& t) {
  const StoreReader& reader = m.source->reader;
  const at::Tensor w = m.whole.count(t.name) != 0 ? reader.read_full("model/" + t.name)
                                                  : m.base.read(t.name, t.shape);
  if (m.adapted.count(t.name) == 0) return w;
  const at::Tensor a = reader.read_full("model/" + adapter_tensor(t.name, 'A'));
  const at::Tensor b = reader.read_full("model/" + adapter_tensor(t.name, 'B'));
  return merge_lora_weight(w, a, b, m.scaling, m.dora ? reader.read_full("model/" + adapter_tensor(t.name, 'M')) : at::Tensor());
}

ExportTensors whole_model(const Source& source, const RunModel& run, const Finetuning& ft,
                          const std::vector<TensorInfo>& stored) {
  std::set<std::string> whole, adapted;
  for (const TensorInfo& t : stored) {
    if (const auto a = adapter_name(t.name))
      adapted.insert(a->parameter);
    else
      whole.insert(t.name);
  }
  ExportTensors out;
  std::map<std::string, std::vector<std::int64_t>> from_base;
  for (const auto& [name, shape] : expected_parameter_shapes(run.config)) {
    out.tensors.push_back({name, shape, at::kFloat});
    if (whole.count(name) == 0) from_base.emplace(name, shape);
  }
  sort_export_order(out.tensors);
  auto merged = std::make_shared<const MergedModel>(MergedModel{
      &source, whole, adapted, ft.lora_scaling, ft.use_dora, BaseWeights(ft, source.folder, from_base)});
  out.load = [merged](const TensorInfo& t) { return load_merged(*merged, t); };
  out.origin = ft.type + " checkpoint: " + std::to_string(whole.size()) + " of the " +
               std::to_string(out.tensors.size()) +
               " tensors from the checkpoint, the others from the base " + merged->base.describe();
  if (!adapted.empty())
    out.origin += std::string(ft.use_dora ? "; DoRA" : "; LoRA") + " adapters merged into " +
                  std::to_string(adapted.size()) + " (W + " + number_text(ft.lora_scaling) + " * B @ A" +
                  (ft.use_dora ? ", each row rescaled to its magnitude" : "") + ", in float32)";
  if (!ft.quantized_base.empty())
    out.origin += "; trained over a " + ft.quantized_base + " base, merged onto the full-precision base weights (as "
                  "LlamaFactory advises for QLoRA adapters), not the dequantized ones";
  return out;
}

// PEFT's rule for a list of target_modules: the module's name, or its last dotted parts.
bool peft_targets(const std::string& module, const std::vector<std::string>& targets) {
  for (const std::string& t : targets) {
    const std::string suffix = "." + t;
    if (module == t || (module.size() > suffix.size() &&
                        module.compare(module.size() - suffix.size(), suffix.size(), suffix) == 0))
      return true;
  }
  return false;
}

// PEFT loads only the adapters of modules that target_modules names: the others would be lost.
void check_peft_targets(const Source& source, const Finetuning& ft,
                        const std::vector<TensorInfo>& stored) {
  std::set<std::string> outside;
  for (const TensorInfo& t : stored)
    if (const auto a = adapter_name(t.name))
      if (!peft_targets(module_of(a->parameter), ft.lora_target))
        outside.insert(module_of(a->parameter));
  if (outside.empty()) return;
  throw UsageError(
      source.state + " has LoRA adapters beside " + *outside.begin() +
      (outside.size() > 1 ? " and " + std::to_string(outside.size() - 1) + " more" : "") +
      ", which its lora_target (\"" + join(ft.lora_target, ",") +
      "\") does not name: PEFT would not load them. Export the merged model with "
      "--format hf instead");
}

ExportTensors peft_tensors(const Source& source, const Finetuning& ft,
                           const std::vector<TensorInfo>& stored) {
  check_peft_targets(source, ft, stored);
  ExportTensors out;
  for (TensorInfo t : stored) {
    if (model::is_value_head_parameter(t.name)) continue;  // value_head.safetensors (merge.cpp)
    t.name = model::kPeftPrefix + t.name;
    out.tensors.push_back(std::move(t));
  }
  const std::size_t prefix = std::string(model::kPeftPrefix).size();
  out.load = [src = &source, prefix](const TensorInfo& t) {
    return src->reader.read_full("model/" + t.name.substr(prefix));
  };
  return out;
}

}  // namespace

std::string number_text(double value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

at::Tensor merge_lora_weight(const at::Tensor& w, const at::Tensor& a, const at::Tensor& b, double scaling,
                             const at::Tensor& magnitude) {
  const at::Tensor merged = w.to(at::kFloat) + at::matmul(b.to(at::kFloat), a.to(at::kFloat)) * scaling;
  if (!magnitude.defined()) return merged;
  // PEFT's DoRA merge: each row of W + scaling BA rescaled to its trained magnitude.
  return (magnitude.to(at::kFloat) / at::linalg_vector_norm(merged, 2, {1})).view({-1, 1}) * merged;
}

Finetuning read_finetuning(const Source& source) {
  Finetuning ft;
  const RunInfo& run = source.manifest->run;
  // A full run records its base only when it reads it again (a DPO reference, a reward model's
  // frozen lm_head).
  if (run.finetuning_type == "full" && run.base_model_hash.empty()) return ft;
  ft.type = run.finetuning_type;
  ft.base_model = run.base_model;
  ft.base_model_hash = run.base_model_hash;
  if (ft.base_model.empty()) ft.seed = run.seed;
  if (ft.type != "lora") return ft;
  ft.lora_rank = run.lora_rank;
  ft.lora_scaling = run.lora_scaling;
  ft.lora_dropout = run.lora_dropout;
  ft.use_rslora = run.use_rslora;
  ft.use_dora = run.use_dora;
  if (run.quantization_bit != 0)
    ft.quantized_base = std::to_string(run.quantization_bit) + "-bit " + run.quantization_type +
                        (run.double_quantization ? " (double quantization)" : "");
  ft.lora_target = split_names(run.lora_target);
  if (ft.lora_rank < 1 || !std::isfinite(ft.lora_scaling))
    throw UsageError(source.state + " has lora_rank " + std::to_string(ft.lora_rank) +
                     " and lora_scaling " + number_text(ft.lora_scaling) +
                     ": not a LoRA checkpoint lfmerge can merge");
  return ft;
}

bool is_finetuning_attribute(const std::string& key) {
  static const std::set<std::string> keys = {
      "finetuning_type", "base_model",   "base_model_hash", "lora_rank",   "lora_alpha",
      "lora_scaling",    "lora_dropout", "use_rslora",      "lora_target", "additional_target",
      "use_dora",        "quantization_bit", "quantization_type", "double_quantization"};
  return keys.count(key) != 0;
}

std::optional<AdapterName> adapter_name(const std::string& tensor) {
  for (const char matrix : {'A', 'B', 'M'}) {
    const std::string suffix = matrix == 'M' ? std::string(".lora_magnitude_vector") : std::string(".lora_") + matrix + ".weight";
    if (tensor.size() > suffix.size() &&
        tensor.compare(tensor.size() - suffix.size(), suffix.size(), suffix) == 0)
      return AdapterName{tensor.substr(0, tensor.size() - suffix.size()) + ".weight", matrix};
  }
  return std::nullopt;
}

std::vector<std::string> adapter_problems(
    const std::vector<TensorInfo>& tensors,
    const std::map<std::string, std::vector<std::int64_t>>& expected, std::int64_t rank, bool dora) {
  std::vector<std::string> problems;
  std::map<std::string, std::string> matrices;  // parameter -> the adapter matrices held
  for (const TensorInfo& t : tensors) {
    const auto a = adapter_name(t.name);
    if (!a) continue;
    matrices[a->parameter] += a->matrix;
    const std::string id = "tensor '/model/" + t.name + "'";
    const auto it = expected.find(a->parameter);
    if (it == expected.end() || !is_linear(it->first, it->second)) {
      problems.push_back(id + " is a LoRA adapter of '" + a->parameter +
                         "', which is not a linear layer of the run's model");
      continue;
    }
    const std::vector<std::int64_t>& w = it->second;
    const std::vector<std::int64_t> want = a->matrix == 'A'   ? std::vector<std::int64_t>{rank, w[1]}
                                           : a->matrix == 'B' ? std::vector<std::int64_t>{w[0], rank}
                                                              : std::vector<std::int64_t>{w[0]};
    const std::string what = a->matrix == 'M' ? std::string("the DoRA magnitude") : std::string("lora_") + a->matrix;
    if (!at::isFloatingType(t.dtype))
      problems.push_back(id + " has dtype " + dtype_name(t.dtype) + ", not a floating-point one");
    else if (t.shape != want)
      problems.push_back(id + " has shape " + shape_text(t.shape) + "; " + what + " of rank " +
                         std::to_string(rank) + " (lora_rank) beside '" + a->parameter + "' " + shape_text(w) +
                         " is " + shape_text(want));
  }
  for (const auto& [parameter, held] : matrices) {
    const bool a = held.find('A') != std::string::npos, b = held.find('B') != std::string::npos,
               m = held.find('M') != std::string::npos;
    if (a != b) problems.push_back("'" + parameter + "' has a lora_" + (a ? "A" : "B") + " but no lora_" + (a ? "B" : "A"));
    if (dora && !m) problems.push_back("'" + parameter + "' has no DoRA magnitude (lora_magnitude_vector), and the run used DoRA");
    if (!dora && m) problems.push_back("'" + parameter + "' has a DoRA magnitude, and the run did not use DoRA (no use_dora)");
  }
  return problems;
}

ExportTensors plan_export_tensors(const Source& source, const RunModel& run,
                                  const Finetuning& finetuning,
                                  const std::vector<TensorInfo>& stored, ExportFormat format) {
  if (format == ExportFormat::Peft) {
    if (finetuning.type != "lora")
      throw UsageError(
          "--format peft exports LoRA adapters; this checkpoint has finetuning_type = " +
          finetuning.type + ": export it with --format hf");
    return peft_tensors(source, finetuning, stored);
  }
  bool all_stored = finetuning.type == "full";
  if (all_stored) {
    std::set<std::string> names;
    for (const TensorInfo& t : stored) names.insert(t.name);
    for (const auto& item : expected_parameter_shapes(run.config))
      if (names.count(item.first) == 0) all_stored = false;  // frozen_in_full_run: from the base
  }
  if (!all_stored) return whole_model(source, run, finetuning, stored);
  ExportTensors out;
  out.tensors = stored;
  out.load = [src = &source](const TensorInfo& t) {
    return src->reader.read_full("model/" + t.name);
  };
  return out;
}

std::string peft_adapter_config(const Finetuning& ft, const std::vector<TensorInfo>& stored) {
  // PEFT derives the scaling from lora_alpha, r and use_rslora: give it the alpha that yields the
  // scaling the run trained with.
  const double r = static_cast<double>(ft.lora_rank);
  const double alpha = ft.lora_scaling * (ft.use_rslora ? std::sqrt(r) : r);
  // modules_to_save as full module paths: PEFT matches them as name suffixes, so "norm" would
  // also take every layer's input_layernorm, and then refuse a file without their weights.
  std::vector<std::string> modules;
  for (const std::string& name : whole_tensors(stored))
    if (!model::is_value_head_parameter(name) && std::find(modules.begin(), modules.end(), module_of(name)) == modules.end())
      modules.push_back(module_of(name));

  nlohmann::json j;  // sorted keys, as PEFT writes them
  for (const char* key :
       {"alora_invocation_tokens", "arrow_config", "auto_mapping", "corda_config", "eva_config",
        "exclude_modules", "kasa_config", "layer_replication", "layers_pattern",
        "layers_to_transform", "lora_ga_config", "megatron_config", "monteclora_config", "revision",
        "target_parameters", "trainable_token_indices", "use_bdlora", "velora_config"})
    j[key] = nullptr;
  for (const char* key : {"alpha_pattern", "loftq_config", "rank_pattern"})
    j[key] = nlohmann::json::object();
  j["base_model_name_or_path"] =
      ft.base_model.empty() ? nlohmann::json(nullptr) : nlohmann::json(ft.base_model);
  j["bias"] = "none";
  j["ensure_weight_tying"] = false;
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  if (std::abs(alpha - std::round(alpha)) <= 1e-9 * std::max(1.0, std::abs(alpha)))
    j["lora_alpha"] = std::llround(alpha);
  else
    j["lora_alpha"] = alpha;
  j["lora_bias"] = false;
  j["lora_dropout"] = ft.lora_dropout;
  j["megatron_core"] = "megatron.core";
  j["modules_to_save"] = modules.empty() ? nlohmann::json(nullptr) : nlohmann::json(modules);
  j["peft_type"] = "LORA";
  j["peft_version"] = "0.21.2";
  j["qalora_group_size"] = 16;
  j["r"] = ft.lora_rank;
  j["target_modules"] = ft.lora_target;
  // A token-classification reward model's adapter (its trained `score` among modules_to_save) goes
  // onto ...ForTokenClassification.
  const bool token_cls = std::any_of(stored.begin(), stored.end(), [](const TensorInfo& t) { return t.name == "score.weight"; });
  j["task_type"] = token_cls ? "TOKEN_CLS" : "CAUSAL_LM";
  j["use_dora"] = ft.use_dora;
  j["use_qalora"] = false;
  j["use_rslora"] = ft.use_rslora;
  return j.dump(2) + "\n";
}

}  // namespace lft::ckpt::merge_detail
