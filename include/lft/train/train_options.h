// What the trainer reads of the configuration, decoded once (train_config.cpp, the decoder): the
// stage, where the weights come from and the output goes, the length of the run, the optimizer
// and its schedule, logging, saving and resuming, the DPO loss. The trainer's files read these,
// not the configuration's keys (docs/architecture.md, "The parallel plan").
#pragma once

#include <cstdint>
#include <string>

#include "lft/config/config.h"
#include "lft/engine/run_plan.h"
#include "lft/optim/adamw.h"
#include "lft/optim/lr_schedule.h"
#include "lft/optim/muon.h"
#include "lft/train/data_options.h"
#include "lft/train/preference.h"

namespace lft::train {

struct TrainOptions {
  std::string stage = "sft";       // pt | sft | dpo
  std::string model_folder;        // model_name_or_path ("" for an inline [model])
  std::string vocab_source;        // where the model's vocabulary is set, for messages (file:line)
  std::string ref_model;           // stage dpo: ref_model ("" when not set)
  std::string output_dir;
  std::uint64_t seed = 0;
  std::int64_t max_steps = -1;     // > 0: the run's length; else `epochs` of the data
  double epochs = 0;
  bool sample_per_rank = false;    // sample_order = "per_rank"
  bool dynamic_batching = false;   // batching_strategy = "dynamic_batching" or "dynamic_padding_free"
  // What micro-batches are padded to a multiple of: pad_to_multiple_of, and with sequence
  // parallelism also of tp (each rank takes an equal slice of every sequence).
  std::int64_t pad_multiple = 0;
  optim::AdamWOptions adamw;
  bool use_muon = false;  // Muon for the matrices, its AdamW for the rest (muon.h); else AdamW
  optim::MuonOptions muon;
  bool muon_adapters = true;  // LoRA's factors take Muon (classic); false: AdamW (v1)
  // lr_scheduler_type, learning_rate, lr_scheduler_kwargs; the steps are the run's (resolve
  // warm-up with warmup_steps / warmup_ratio once the run's length is known).
  optim::LrScheduleSpec lr;
  std::int64_t warmup_steps = 0;
  double warmup_ratio = 0;
  double max_grad_norm = 0;
  std::int64_t logging_steps = 1;
  bool save_every_steps = false;   // save_strategy = "steps"
  std::int64_t save_steps = 0;
  std::int64_t eval_steps = 0;
  bool async_checkpoint = false;
  bool per_rank_checkpoints = false;  // checkpoint_format = "per_rank"
  std::int64_t save_total_limit = 0;
  std::string resume_from_checkpoint;  // "" when not set
  bool plot_loss = false;
  PreferenceOptions preference;        // stage dpo
  DataOptions data;                    // what the training data is (data_options.h)
};

// The trainer's options of `cfg` for `plan`.
TrainOptions train_options(const config::Config& cfg, const engine::RunPlan& plan);

// A note in the log when a conversation run leaves `template` unset and the model's family has
// a chat template of its own (the classic trainer's default is "default").
void note_family_template(const config::Config& cfg, const model::ModelConfig& model);

}  // namespace lft::train
