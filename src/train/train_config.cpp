// The trainer's decoder: the configuration's keys read into TrainOptions (train_options.h). With
// training_data.cpp (the data pipeline's keys), the only files of src/train that read keys.
#include "lft/train/train_options.h"

#include <algorithm>
#include <numeric>

#include "lft/model/families.h"
#include "lft/runtime/log.h"

namespace lft::train {

TrainOptions train_options(const config::Config& cfg, const engine::RunPlan& plan) {
  TrainOptions o;
  o.stage = cfg.string("stage");
  if (cfg.is_set("model_name_or_path")) o.model_folder = cfg.string("model_name_or_path");
  o.vocab_source = cfg.is_set("model_name_or_path") ? cfg.where("model_name_or_path") : cfg.where("model.vocab_size");
  if (cfg.is_set("ref_model")) o.ref_model = cfg.string("ref_model");
  o.output_dir = cfg.string("output_dir");
  o.seed = static_cast<std::uint64_t>(cfg.integer("seed"));
  o.max_steps = cfg.integer("max_steps");
  o.epochs = cfg.real("num_train_epochs");
  o.sample_per_rank = cfg.string("sample_order") == "per_rank";
  o.dynamic_batching = plan.dynamic_batching;
  o.pad_multiple = cfg.integer("pad_to_multiple_of");
  // Sequence parallelism splits each row over the tp ranks: a row padded to cutoff_len splits if
  // cutoff_len does (checked with the plan); a shorter one (pad_to_multiple_of, or a joined
  // padding_free row of any length) is padded to a multiple of tp too.
  const bool sequence_parallel = plan.parallel.megatron && plan.parallel.megatron->sequence_parallel;
  if (sequence_parallel && (o.pad_multiple != 0 || plan.joined_micro_batches))
    o.pad_multiple = std::lcm(std::max<std::int64_t>(o.pad_multiple, 1), static_cast<std::int64_t>(plan.mesh[MeshDim::TP]));
  o.adamw.beta1 = cfg.real("adam_beta1");
  o.adamw.beta2 = cfg.real("adam_beta2");
  o.adamw.eps = cfg.real("adam_epsilon");
  o.adamw.weight_decay = cfg.real("weight_decay");
  o.adamw.decay_all = cfg.boolean("decay_all_parameters");
  o.use_muon = cfg.boolean("use_muon");
  o.muon.momentum = cfg.real("muon_momentum");
  o.muon.nesterov = cfg.boolean("muon_nesterov");
  o.muon.ns_steps = cfg.integer("muon_ns_steps");
  o.muon_adapters = cfg.boolean("muon_adapters");
  o.muon.weight_decay = o.adamw.weight_decay;
  o.muon.adamw_beta1 = o.adamw.beta1;
  o.muon.adamw_beta2 = o.adamw.beta2;
  o.muon.adamw_eps = o.adamw.eps;
  o.lr.name = cfg.string("lr_scheduler_type");
  o.lr.base_lr = cfg.real("learning_rate");
  for (const std::string& key : optim::lr_scheduler_kwarg_names())
    if (cfg.is_set("lr_scheduler_kwargs." + key)) o.lr.kwargs[key] = cfg.real("lr_scheduler_kwargs." + key);
  o.warmup_steps = cfg.integer("warmup_steps");
  o.warmup_ratio = cfg.real("warmup_ratio");
  o.max_grad_norm = cfg.real("max_grad_norm");
  o.logging_steps = cfg.integer("logging_steps");
  o.save_every_steps = cfg.string("save_strategy") == "steps";
  o.save_steps = cfg.integer("save_steps");
  o.eval_steps = cfg.integer("eval_steps");
  o.async_checkpoint = cfg.boolean("async_checkpoint");
  o.per_rank_checkpoints = cfg.string("checkpoint_format") == "per_rank";
  o.save_total_limit = cfg.integer("save_total_limit");
  if (cfg.is_set("resume_from_checkpoint")) o.resume_from_checkpoint = cfg.string("resume_from_checkpoint");
  o.plot_loss = cfg.boolean("plot_loss");
  o.preference = PreferenceOptions::from(cfg);
  o.data = data_options(cfg);
  return o;
}

PreferenceOptions PreferenceOptions::from(const config::Config& cfg) {
  PreferenceOptions o;
  o.loss = cfg.string("pref_loss");
  o.beta = cfg.real("pref_beta");
  o.ftx = cfg.real("pref_ftx");
  o.simpo_gamma = cfg.real("simpo_gamma");
  o.label_smoothing = cfg.real("dpo_label_smoothing");
  if (cfg.is_set("ld_alpha")) o.ld_alpha = cfg.real("ld_alpha");
  o.reward_model = cfg.string("stage") == "rm";
  o.token_weighted = cfg.string("pref_loss_weighting") == "tokens";
  return o;
}

void note_family_template(const config::Config& cfg, const model::ModelConfig& model) {
  if (cfg.string("stage") == "pt" || cfg.is_set("template")) return;
  const model::FamilySpec* family = model::find_family(model.model_type);
  if (family == nullptr || family->chat_template.empty() || family->chat_template == cfg.string("template")) return;
  log0("note: `template` is not set, so conversations are rendered with template = \"" + cfg.string("template") +
       "\"; " + model.model_type + " chat models use template = \"" + family->chat_template + "\"");
}

}  // namespace lft::train
