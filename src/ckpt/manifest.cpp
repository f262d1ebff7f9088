#include "lft/ckpt/manifest.h"

#include "lft/build_config.h"
#include "lft/ckpt/tensor_store.h"

namespace lft::ckpt {
namespace {

// Typed reads of one group's attributes, each naming what is missing and why it must be there.
class Fields {
 public:
  Fields(const StoreReader& store, std::string where, std::string group)
      : store_(store), where_(std::move(where)), group_(std::move(group)) {}

  bool has(const std::string& key) const { return store_.has_attribute(group_, key); }
  std::int64_t integer(const std::string& key, const std::string& because = "") const {
    require(key, "integer", because);
    return store_.int_attribute(group_, key);
  }
  double real(const std::string& key, const std::string& because = "") const {
    require(key, "numeric", because);
    return store_.double_attribute(group_, key);
  }
  std::string text(const std::string& key, const std::string& because = "") const {
    require(key, "string", because);
    return store_.string_attribute(group_, key);
  }
  std::vector<std::int64_t> integers(const std::string& key) const {
    require(key, "integer vector", "");
    return store_.int_vector_attribute(group_, key);
  }

 private:
  void require(const std::string& key, const char* kind, const std::string& because) const {
    if (has(key)) return;
    throw UsageError("checkpoint error: " + where_ + " has no " + kind + " attribute '" + key + "'" +
                     (group_ == "/" ? std::string() : " in its group '" + group_ + "'") +
                     (because.empty() ? "" : " (" + because + ")") +
                     ", which its format version has: it is damaged, or not lftrain's; use the lftrain that wrote it");
  }

  const StoreReader& store_;
  std::string where_, group_;
};

void read_finetuning(const Fields& root, RunInfo& run) {
  run.finetuning_type = root.has("finetuning_type") ? root.text("finetuning_type") : "full";
  if (run.finetuning_type == "full") {
    // Optional: a full-parameter DPO run's starting weights (its reference), checked on resume.
    if (root.has("base_model_hash")) {
      run.base_model_hash = root.text("base_model_hash");
      if (root.has("base_model")) run.base_model = root.text("base_model");
    }
    return;
  }
  const std::string because = "finetuning_type = \"" + run.finetuning_type + "\"";
  if (run.finetuning_type != "freeze" && run.finetuning_type != "lora")
    throw UsageError("checkpoint error: " + because + " is not one this lftrain reads (full, freeze, lora): " +
                     "use the lftrain that wrote it");
  run.base_model = root.text("base_model", because);
  run.base_model_hash = root.text("base_model_hash", because);
  if (run.finetuning_type != "lora") return;
  run.lora_rank = root.integer("lora_rank", because);
  run.lora_alpha = root.real("lora_alpha", because);
  run.lora_scaling = root.real("lora_scaling", because);
  run.lora_dropout = root.real("lora_dropout", because);
  run.use_rslora = root.integer("use_rslora", because) != 0;
  run.use_dora = root.has("use_dora") && root.integer("use_dora") != 0;
  if (root.has("quantization_bit")) {
    run.quantization_bit = root.integer("quantization_bit");
    run.quantization_type = root.text("quantization_type", because);
    run.double_quantization = root.integer("double_quantization", because) != 0;
  }
  run.lora_target = root.text("lora_target", because);
  run.additional_target = root.has("additional_target") ? root.text("additional_target") : "";
}

}  // namespace

std::int64_t format_version_for(const RunInfo& run) { return run.use_dora ? 2 : 1; }

void write_manifest(StoreWriter& w, const Manifest& m) {
  const RunInfo& run = m.run;
  const Progress& progress = m.progress;
  w.set_attribute("/", "format", std::string(kFormatName));
  w.set_attribute("/", "format_version", m.format_version != 0 ? m.format_version : format_version_for(run));
  w.set_attribute("/", "lftrain_version", m.lftrain_version.empty() ? std::string(LFT_VERSION) : m.lftrain_version);
  w.set_attribute("/", "step", progress.step);
  w.set_attribute("/", "tokens_seen", progress.tokens_seen);
  if (progress.loss_scale > 0) w.set_attribute("/", "loss_scale", progress.loss_scale);
  w.set_attribute("/", "world_size", static_cast<std::int64_t>(run.world_size));
  w.set_attribute("/", "mesh", run.mesh);
  w.set_attribute("/", "engine", run.engine);
  w.set_attribute("/", "config", run.config_text);
  if (!run.config_file.empty()) w.set_attribute("/", "config_file", run.config_file);
  w.set_attribute("/", "global_batch", run.global_batch);
  w.set_attribute("/", "seed", run.seed);
  if (run.finetuning_type != "full") w.set_attribute("/", "finetuning_type", run.finetuning_type);
  if (run.finetuning_type != "full" || !run.base_model_hash.empty()) {
    w.set_attribute("/", "base_model", run.base_model);
    w.set_attribute("/", "base_model_hash", run.base_model_hash);
  }
  if (run.finetuning_type == "lora") {
    w.set_attribute("/", "lora_rank", run.lora_rank);
    w.set_attribute("/", "lora_alpha", run.lora_alpha);
    w.set_attribute("/", "lora_scaling", run.lora_scaling);
    w.set_attribute("/", "lora_dropout", run.lora_dropout);
    w.set_attribute("/", "use_rslora", static_cast<std::int64_t>(run.use_rslora));
    if (run.use_dora) w.set_attribute("/", "use_dora", std::int64_t{1});
    if (run.quantization_bit != 0) {
      w.set_attribute("/", "quantization_bit", run.quantization_bit);
      w.set_attribute("/", "quantization_type", run.quantization_type);
      w.set_attribute("/", "double_quantization", static_cast<std::int64_t>(run.double_quantization));
    }
    w.set_attribute("/", "lora_target", run.lora_target);
    w.set_attribute("/", "additional_target", run.additional_target);
  }
  w.set_attribute("/optim", "step", m.optimizer_steps);
  for (const auto& [key, value] : m.optimizer_hyperparameters) w.set_attribute("/optim", key, value);
  const data::SamplerState& s = progress.sampler;
  w.set_attribute("/", "data_epoch", s.epoch);
  w.set_attribute("/", "data_step_in_epoch", s.step_in_epoch);
  w.set_attribute("/", "data_seed", static_cast<std::int64_t>(s.seed));
  w.set_attribute("/", "data_num_samples", s.num_samples);
  w.set_attribute("/", "data_global_batch", s.global_batch);
  if (s.order_dp > 0) w.set_attribute("/", "data_order_dp", s.order_dp);
}

Manifest read_manifest(const StoreReader& store, const std::string& where) {
  const Fields root(store, where, "/");
  if (!root.has("format") || store.string_attribute("/", "format") != kFormatName)
    throw UsageError("checkpoint error: " + where + " is not an lftrain checkpoint (no format = \"" + kFormatName +
                     "\" attribute)");
  Manifest m;
  m.format_version = root.integer("format_version");
  if (m.format_version > kFormatVersion)
    throw CheckpointMismatch("checkpoint error: " + where + " has format version " + std::to_string(m.format_version) +
                             ", newer than this lftrain reads (" + std::to_string(kFormatVersion) +
                             "); use the lftrain that wrote it");
  m.lftrain_version = root.text("lftrain_version");
  RunInfo& run = m.run;
  run.engine = root.text("engine");
  run.mesh = root.integers("mesh");
  run.world_size = static_cast<int>(root.integer("world_size"));
  run.config_text = root.text("config");
  run.config_file = root.has("config_file") ? root.text("config_file") : "";
  run.global_batch = root.integer("global_batch");
  run.seed = root.integer("seed");
  read_finetuning(root, run);
  Progress& p = m.progress;
  p.step = root.integer("step");
  p.tokens_seen = root.integer("tokens_seen");
  p.loss_scale = root.has("loss_scale") ? root.real("loss_scale") : 0.0;
  p.sampler.epoch = root.integer("data_epoch");
  p.sampler.step_in_epoch = root.integer("data_step_in_epoch");
  p.sampler.seed = static_cast<std::uint64_t>(root.integer("data_seed"));
  p.sampler.num_samples = root.integer("data_num_samples");
  p.sampler.global_batch = root.integer("data_global_batch");
  p.sampler.order_dp = root.has("data_order_dp") ? root.integer("data_order_dp") : 0;
  const Fields optim(store, where, "optim");
  m.optimizer_steps = optim.integer("step");
  for (const char* key : kOptimizerHyperparameters)
    if (optim.has(key)) m.optimizer_hyperparameters.emplace_back(key, optim.real(key));
  return m;
}

}  // namespace lft::ckpt
