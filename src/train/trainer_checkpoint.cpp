// The trainer's checkpoint hand-off: what it saves (the engine's tensors with their boxes, the
// optimizer's state, the progress) and how a run resumes.
#include "lft/ckpt/checkpoint.h"

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "lft/ckpt/checkpoint_files.h"
#include "lft/comm/mpi_util.h"
#include "lft/model/finetuning.h"
#include "lft/runtime/log.h"
#include "trainer_state.h"

namespace lft::train {
namespace {

// Whether two paths name the same existing file or folder.
bool same_path(const std::string& a, const std::string& b) {
  char ra[PATH_MAX], rb[PATH_MAX];
  return realpath(a.c_str(), ra) != nullptr && realpath(b.c_str(), rb) != nullptr && std::string(ra) == rb;
}

// "saved <folder> in 3.278 s<how>: 7.15 GB at 2.18 GB/s" (GB = 10^9 bytes, as disks are rated).
// Only the logging rank lists the state's files: every rank doing it would cost a parallel file
// system ranks x files metadata calls per save.
void log_saved(bool logging_rank, const std::string& folder, double seconds, const std::string& how) {
  if (!logging_rank) return;
  const double gb = static_cast<double>(ckpt::state_bytes(folder)) / 1e9;
  char rate[64];
  std::snprintf(rate, sizeof(rate), "%.2f GB at %.2f GB/s", gb, seconds > 0 ? gb / seconds : 0.0);
  log0("saved " + folder + " in " + std::to_string(seconds).substr(0, 5) + " s" + how + ": " + rate);
}

}  // namespace

std::vector<ckpt::HeldTensor> Trainer::held_tensors() {
  State& s = *s_;
  const auto params = s.engine->parameters();
  const auto names = s.engine->parameter_names();
  const auto boxes = s.engine->parameter_boxes();
  std::vector<ckpt::HeldTensor> held;
  for (std::size_t i = 0; i < params.size(); ++i) held.push_back({names[i], params[i], boxes[i]});
  return held;
}

ckpt::RunInfo Trainer::run_info() const {
  const State& s = *s_;
  ckpt::RunInfo info;
  info.engine = s.plan.parallel.engine();
  info.mesh.assign(s.mesh.shape().sizes.begin(), s.mesh.shape().sizes.end());
  info.world_size = s.mesh.shape().world_size();
  info.config_text = s.cfg.source_text();
  info.config_file = s.cfg.source_name();
  for (const auto& o : s.cfg.overrides()) info.config_text += "\n# override: " + o;
  info.global_batch = s.plan.global_batch;
  info.seed = static_cast<std::int64_t>(s.options.seed);
  const model::FinetuningSpec& f = s.plan.finetuning;
  info.finetuning_type = f.type;
  info.base_model = s.options.model_folder;
  info.base_model_hash = s.base_model_hash;  // full: empty, but for a DPO run's reference (trainer.cpp)
  if (f.type == "full") return info;
  if (f.type != "lora") return info;
  info.lora_rank = f.lora_rank;
  info.lora_alpha = f.lora_alpha;
  info.lora_scaling = f.lora_scaling();
  info.lora_dropout = f.lora_dropout;
  info.use_rslora = f.use_rslora;
  info.use_dora = f.use_dora;
  info.quantization_bit = f.quantization_bit;
  if (f.quantization_bit != 0) {
    info.quantization_type = f.quantization_type;
    info.double_quantization = f.double_quantization;
  }
  for (const std::string& name : model::lora_target_names(*s.model, f))
    info.lora_target += (info.lora_target.empty() ? "" : ",") + name;
  for (const std::string& name : f.additional_target)
    info.additional_target += (info.additional_target.empty() ? "" : ",") + name;
  return info;
}

void Trainer::resume_if_asked() {
  State& s = *s_;
  if (s.options.resume_from_checkpoint.empty()) return;
  const auto folder =
      ckpt::find_checkpoint(s.mesh.world(), s.options.output_dir, s.options.resume_from_checkpoint);
  if (!folder) {
    log0("resume: no complete checkpoint in " + s.options.output_dir + "; starting from step 0");
    return;
  }
  log0("resume: reading " + *folder + " ...");
  const auto start = Clock::now();
  const ckpt::Progress p = ckpt::load_checkpoint(s.mesh.world(), *folder, run_info(), held_tensors(), *s.optimizer);
  s.engine->parameters_updated();
  const double seconds = seconds_since(start);
  s.sampler->restore(p.sampler);
  s.step = p.step;
  s.tokens_seen = p.tokens_seen;
  if (same_path(*folder, s.options.output_dir + "/" + ckpt::checkpoint_name(p.step))) s.saved_step = p.step;
  if (s.scaler && p.loss_scale > 0) s.scaler->restore(p.loss_scale);
  log0("resume: " + *folder + " at step " + std::to_string(p.step) + " (epoch " + std::to_string(p.sampler.epoch) +
       ", " + std::to_string(s.sampler->consumed_samples()) + " samples consumed), loaded in " +
       std::to_string(seconds).substr(0, 5) + " s");
}

std::string Trainer::save(bool background) {
  State& s = *s_;
  if (s.async_saver) s.async_saver->wait();
  ckpt::SaveOptions o;
  o.output_dir = s.options.output_dir;
  if (s.step == s.saved_step) {  // a stop signal right after a save, or a finished run resumed
    const std::string folder = o.output_dir + "/" + ckpt::checkpoint_name(s.step);
    log0("step " + std::to_string(s.step) + " is already saved in " + folder);
    return folder;
  }
  o.per_rank = s.options.per_rank_checkpoints;
  o.total_limit = s.options.save_total_limit;
  ckpt::Progress p;
  p.step = s.step;
  p.tokens_seen = s.tokens_seen;
  if (s.scaler) p.loss_scale = s.scaler->scale();
  p.sampler = s.sampler->state();
  const auto start = Clock::now();
  const bool logging_rank = mpi_rank(s.mesh.world()) == 0;
  if (background && s.async_saver) {
    const double blocked = s.async_saver->start(o, run_info(), p, held_tensors(), *s.optimizer,
                                                [logging_rank](const std::string& folder, double seconds) {
                                                  log_saved(logging_rank, folder, seconds, " (in the background)");
                                                });
    s.saved_step = s.step;
    log0("checkpoint of step " + std::to_string(s.step) + ": training blocked " + std::to_string(blocked).substr(0, 5) +
         " s to copy the state; writing it in the background");
    return o.output_dir + "/" + ckpt::checkpoint_name(s.step);
  }
  const std::string folder = ckpt::save_checkpoint(s.mesh.world(), o, run_info(), p, held_tensors(), *s.optimizer);
  s.saved_step = s.step;
  log_saved(logging_rank, folder, seconds_since(start), "");
  return folder;
}

}  // namespace lft::train
