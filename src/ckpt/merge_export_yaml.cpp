// LlamaFactory v1's export_lora.yaml read as lfmerge's options (merge.h, read_export_yaml).
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <yaml-cpp/yaml.h>

#include "lft/ckpt/checkpoint_files.h"
#include "lft/ckpt/merge.h"
#include "lft/runtime/error.h"
#include "merge_internal.h"

namespace lft::ckpt {
namespace {

[[noreturn]] void refuse(const std::string& file, const YAML::Node& node, const std::string& key, const std::string& what,
                         const std::string& hint) {
  const YAML::Mark m = node.Mark();
  throw UsageError(file + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1) + ": " + key + ": " +
                   what + "\n  hint: " + hint);
}

std::string scalar(const std::string& file, const YAML::Node& node, const std::string& key) {
  if (!node.IsScalar()) refuse(file, node, key, "is not a single value", "write e.g. " + key + ": value");
  return node.Scalar();
}

// An lftrain checkpoint (COMPLETE inside), a run's output_dir (its `latest` checkpoint), or a
// PEFT adapter folder (merged onto `model`).
std::string checkpoint_of(const std::string& file, const YAML::Node& node, const std::string& path) {
  const std::string key = "peft_config.adapter_name_or_path";
  if (is_complete(path) || merge_detail::is_peft_adapter_folder(path)) return path;
  std::ifstream latest(path + "/latest");
  std::string name;
  if (std::getline(latest, name) && !name.empty() && is_complete(path + "/" + name)) return path + "/" + name;
  refuse(file, node, key,
         path + " is neither an lftrain checkpoint (no COMPLETE), a run's output_dir (no latest), nor a PEFT "
                "adapter folder (no adapter_config.json)",
         "give the lftrain run's output_dir, one of its checkpoint-<step> folders, or a PEFT adapter folder");
}

}  // namespace

MergeOptions read_export_yaml(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw UsageError(path + ": not a YAML file lfmerge can read: " + e.what());
  }
  if (!root.IsMap()) throw UsageError(path + ": not a mapping of keys (LlamaFactory's export_lora.yaml)");
  const YAML::Node peft = root["peft_config"];
  if (!peft || !peft.IsMap())
    throw UsageError(path + ": no peft_config mapping\n  hint: LlamaFactory v1's export file: model: BASE, peft_config: "
                     "{name: lora, adapter_name_or_path: RUN, export_dir: OUT}");
  MergeOptions o;
  o.dtype_from_base = true;
  static const std::set<std::string> known_top{"model", "peft_config", "model_class", "trust_remote_code"};
  for (const auto& item : root) {
    const std::string key = item.first.as<std::string>();
    if (!known_top.count(key))
      refuse(path, item.first, key, "is not a key of an export file lfmerge reads",
             "an export file has model and peft_config (model_class and trust_remote_code are accepted)");
  }
  if (root["model_class"] && scalar(path, root["model_class"], "model_class") != "llm")
    refuse(path, root["model_class"], "model_class", "lfmerge exports causal language models (llm) only",
           "remove model_class");
  if (root["model"]) o.expected_model = scalar(path, root["model"], "model");
  bool adapter = false;
  for (const auto& item : peft) {
    const std::string key = item.first.as<std::string>(), full = "peft_config." + key;
    const YAML::Node& v = item.second;
    if (key == "name") {
      if (scalar(path, v, full) != "lora")
        refuse(path, v, full, "lfmerge merges LoRA (and freeze or full) checkpoints", "write name: lora");
    } else if (key == "adapter_name_or_path") {
      o.checkpoint = checkpoint_of(path, v, scalar(path, v, full));
      adapter = true;
    } else if (key == "export_dir") {
      o.out_dir = scalar(path, v, full);
    } else if (key == "export_size") {
      o.max_shard_bytes = parse_byte_size(scalar(path, v, full) + "GB");
    } else if (key == "infer_dtype") {
      const std::string d = scalar(path, v, full);
      o.dtype_from_base = d == "auto";
      if (d != "auto") o.dtype = parse_export_dtype(d);
    } else if (key == "export_legacy_format") {
      if (v.IsScalar() && (v.Scalar() == "true" || v.Scalar() == "True"))
        refuse(path, v, full, "lfmerge writes safetensors only", "remove export_legacy_format");
    } else if (key == "export_hub_model_id") {
      if (!v.IsNull()) refuse(path, v, full, "lfmerge writes a local folder; it does not upload", "remove it");
    } else if (key == "r" || key == "lora_alpha" || key == "lora_dropout" || key == "target_modules") {
      // training keys of a shared file: the checkpoint knows its adapters
    } else {
      refuse(path, item.first, full, "is not a key of an export file lfmerge reads",
             "peft_config takes name, adapter_name_or_path, export_dir, export_size and infer_dtype");
    }
  }
  if (!adapter)
    throw UsageError(path + ": peft_config has no adapter_name_or_path (the lftrain run or checkpoint to export, or a "
                     "PEFT adapter folder)");
  if (merge_detail::is_peft_adapter_folder(o.checkpoint) && o.expected_model.empty())
    throw UsageError(path + ": peft_config.adapter_name_or_path " + o.checkpoint + " is a PEFT adapter folder, merged onto "
                     "`model`, which the file does not give\n  hint: add model: BASE_MODEL_FOLDER");
  if (o.out_dir.empty()) throw UsageError(path + ": peft_config has no export_dir (the folder to write)");
  return o;
}

}  // namespace lft::ckpt
