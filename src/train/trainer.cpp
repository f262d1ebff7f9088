// Building a Trainer (data, model, engine, weights, optimizer, schedule, resume) and its loop.
#include "lft/train/trainer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <numeric>
#include <optional>

#include "lft/ckpt/checkpoint.h"
#include "lft/comm/mpi_util.h"
#include "lft/comm/watchdog.h"
#include "lft/data/tokenizer.h"
#include "lft/engine/parallelize.h"
#include "lft/model/score_head.h"
#include "lft/model/families.h"
#include "lft/model/hf_checkpoint.h"
#include "lft/runtime/error.h"
#include "lft/runtime/host_transfer.h"
#include "lft/runtime/memory.h"
#include "lft/runtime/log.h"
#include "lft/runtime/signals.h"
#include "lft/train/example_print.h"
#include "lft/train/loss_plots.h"
#include "lft/train/make_optimizer.h"
#include "lft/train/metrics.h"
#include "lft/train/training_log.h"
#include "trainer_state.h"

namespace lft::train {
namespace {

// DeepSpeed's fp16 block when the engine is deepspeed, else DeepSpeed's defaults.
LossScaleOptions loss_scale_options(const engine::RunPlan& plan) {
  LossScaleOptions o;
  if (!plan.deepspeed) return o;
  const config::DeepSpeedConfig& ds = *plan.deepspeed;
  o.initial_scale = std::ldexp(1.0, ds.initial_scale_power);
  o.static_scale = ds.loss_scale;
  o.window = ds.loss_scale_window;
  o.hysteresis = ds.hysteresis;
  o.min_scale = ds.min_loss_scale;
  return o;
}

void check_vocabulary(const TrainOptions& o, const model::ModelConfig& model, const data::Tokenizer& tok) {
  if (model.vocab_size >= tok.vocab_size()) return;
  throw config::ConfigError("config error: " + o.vocab_source +
                            ": the " + tok.name() + " tokenizer has " + std::to_string(tok.vocab_size()) +
                            " ids but the model's vocab_size is " + std::to_string(model.vocab_size));
}

}  // namespace

engine::MicroBatch Trainer::State::device_batch(const data::Batch& b, const std::vector<std::int64_t>& sequences) const {
  engine::MicroBatch m;
  const at::Device device = torch_device();
  m.input_ids = to_device(b.input_ids, device);
  if (data->segments() && b.segment_ids.defined()) m.segment_ids = to_device(b.segment_ids, device);
  // A reward model weighs only each sequence's last token, whose score the head puts there.
  m.weights = to_device(preference && preference->reward_model ? last_token_weights(b.token_mask) : b.weights, device);
  // LD-DPO weighs the policy's tokens (a training step's batch: `sequences` given), not the
  // reference's.
  if (preference && preference->ld_alpha >= 0 && !sequences.empty())
    m.weights = length_desensitized_weights(m.weights, preference->ld_alpha);
  if (model->config().moe.any() && b.token_mask.defined()) m.token_mask = to_device(b.token_mask, device);
  if (preference && preference->uses_reference() && !sequences.empty())
    m.reference_logps = to_device(reference_of(sequences).to(at::kFloat), device);
  return m;
}

namespace {

at::Tensor values_of(const std::vector<double>& table, const std::vector<std::int64_t>& indices) {
  at::Tensor out = at::empty({static_cast<std::int64_t>(indices.size())}, at::kDouble);
  double* p = out.data_ptr<double>();
  for (std::size_t k = 0; k < indices.size(); ++k) p[k] = table.at(static_cast<std::size_t>(indices[k]));
  return out;
}

}  // namespace

at::Tensor Trainer::State::reference_of(const std::vector<std::int64_t>& sequences) const {
  return values_of(reference_logps, sequences);
}

at::Tensor Trainer::State::lengths_of(const std::vector<std::int64_t>& sequences) const {
  return values_of(answer_lengths, sequences);
}

namespace {


}  // namespace

namespace {

// LlamaFactory's "trainable params" line, for freeze and LoRA runs (from the meta model's shapes).
std::string trainable_summary(const engine::RunPlan& plan) {
  if (plan.finetuning.type == "full") return "";
  const auto m = engine::create_run_model(plan, at::TensorOptions().device(at::kMeta));
  double all = 0, trained = 0;
  for (const auto& item : m->named_parameters()) {
    all += static_cast<double>(item.value().numel());
    if (item.value().requires_grad()) trained += static_cast<double>(item.value().numel());
  }
  char text[160];
  std::snprintf(text, sizeof text, "\nfinetuning %s: trainable params %.0f || all params %.0f || trainable%% %.4f",
                plan.finetuning.type.c_str(), trained, all, 100.0 * trained / all);
  return text;
}

// "3 safetensors files, 1.19 GB": what reading a model folder costs.
std::string weight_files_summary(const std::string& folder) {
  std::int64_t files = 0;
  double bytes = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    if (entry.path().extension() != ".safetensors") continue;
    ++files;
    bytes += static_cast<double>(entry.file_size(ec));
  }
  char text[96];
  std::snprintf(text, sizeof text, "%lld safetensors file%s, %.2f GB", static_cast<long long>(files),
                files == 1 ? "" : "s", bytes / 1e9);
  return text;
}


}  // namespace

Trainer::Trainer(const config::Config& cfg, const engine::RunPlan& plan, DeviceMesh& mesh,
                 const DeviceChoice& device)
    : s_(std::make_unique<State>(cfg, plan, mesh, device)) {
  State& s = *s_;
  if (plan.compute == at::kHalf) s.scaler = std::make_unique<LossScaler>(loss_scale_options(plan));
  s.data = std::make_unique<TrainingData>(s.options.data, mesh.world());
  s.data->set_pad_to_multiple_of(s.options.pad_multiple);
  if (s.options.async_checkpoint) s.async_saver = std::make_unique<ckpt::AsyncSaver>(mesh.world());
  check_vocabulary(s.options, plan.model, s.data->tokenizer());
  note_family_template(cfg, plan.model);
  // LlamaFactory prints the first training example once the data is ready.
  if (world_rank_or_minus_one() == 0 && s.data->num_sequences() > 0) {
    try {
      log0(format_training_example(*s.data, 0, "training example:", s.options.stage == "pt"));
    } catch (const std::exception& e) {
      log0(std::string("warning: cannot print the first training example: ") + e.what());
    }
  }
  // dynamic_batching draws each rank's stream in the per-rank order: the sampler (which then
  // counts epochs) records it, so a resume on another data-parallel size is refused.
  const bool dynamic = s.options.dynamic_batching;
  s.sampler = std::make_unique<data::GlobalSampler>(
      s.data->num_samples(), plan.global_batch, s.options.seed,
      s.options.sample_per_rank || dynamic
          ? static_cast<int>(plan.global_batch / (plan.micro_batch * plan.accumulation))
          : 0);
  // LlamaFactory main's v1 leaves examples with nothing to train within cutoff_len out of each
  // rank's stream with its normal batching (its padding_free and dynamic strategies keep them).
  if (s.options.sample_per_rank && !dynamic && !s.data->joins_micro_batches()) {
    std::vector<bool> left_out = s.data->samples_main_leaves_out();
    const auto n = std::count(left_out.begin(), left_out.end(), true);
    if (n > 0) {
      s.sampler->skip_samples(std::move(left_out));
      log0("data       " + std::to_string(n) + " sequence(s) with nothing to train within cutoff_len left out of the "
           "sample streams, as LlamaFactory main leaves them out");
    }
  }
  if (dynamic) {
    std::vector<std::int64_t> lengths;
    for (std::int64_t i = 0; i < s.data->num_samples(); ++i) lengths.push_back(s.data->real_tokens({i}));
    s.dynamic = std::make_unique<data::DynamicBatches>(std::move(lengths), s.options.seed,
                                                       mesh.shape().dp_size(), plan.micro_batch, plan.accumulation,
                                                       plan.seq_len, s.data->joins_micro_batches());
  }
  const std::int64_t max_steps = s.options.max_steps;
  s.total = max_steps > 0 ? max_steps
                          : static_cast<std::int64_t>(std::ceil(s.options.epochs *
                                                                static_cast<double>(s.sampler->steps_per_epoch())));
  {
    const std::string& folder = s.options.model_folder;
    const std::string what = folder.empty() ? "the initial weights" : folder;
    Watchdog::Scope scope("loading " + what, Watchdog::setup_timeout(), "setup_timeout");
    const auto start = Clock::now();
    log0(folder.empty() ? "weights: initialising from seed " + std::to_string(s.options.seed) + " ..."
                        : "weights: reading " + folder + " (" + weight_files_summary(folder) + ") ...");
    engine::ParallelModel laid = engine::parallelize(plan, mesh, s.torch_device(), folder);
    s.model = std::move(laid.model);
    s.engine = std::move(laid.engine);
    s.cp = std::move(laid.cp);
    log0("weights: ready in " + format_seconds(seconds_since(start)));
    if (plan.model.score_head != model::ScoreHead::None) {
      const bool value_head = plan.model.score_head == model::ScoreHead::ValueHead;
      const std::optional<std::string> head = model::score_head_file(plan.model.score_head, folder, plan.adapter_folder);
      const std::string seed = "; seed " + std::to_string(plan.seed) + ")";
      log0(std::string("weights: the ") + (value_head ? "value head (v_head.summary) " : "score head (score, token classification) ") +
           (head         ? "from " + *head
            : value_head ? "new (no " + std::string(model::kValueHeadFile) + " beside the model or adapter" + seed
                         : "new (normal, std 1 / (10 hidden), bias 0" + seed));
    }
  }
  // The starting weights' identity, which a resume must match where the run reads them again: the
  // frozen base of LoRA and freeze, and the reference model of a full-parameter DPO run (its
  // reference log-probabilities are computed from the starting weights at every start). The
  // seed's initialisation of an inline [model], or the model folder's bytes.
  // A reward model's lm_head stays frozen (its loss never reads it): a resume and lfmerge read it there too.
  const bool reads_start_again = plan.finetuning.type != "full" || plan.model.score_head != model::ScoreHead::None ||
                                 (s.options.stage == "dpo" && s.options.preference.uses_reference() && s.options.ref_model.empty());
  if (reads_start_again && s.options.model_folder.empty())
    s.base_model_hash = "seed " + std::to_string(s.options.seed);
  if (reads_start_again && !s.options.model_folder.empty()) {
    // World rank 0 reads the base's files once; the others take its hash (or its error).
    std::string hash;
    if (world_rank_or_minus_one() == 0) {
      try {
        hash = model::model_folder_hash(s.options.model_folder);
      } catch (const std::exception& e) {
        hash = std::string("!") + e.what();
      }
    }
    hash = all_gather_bytes(mesh.world(), hash).front();
    if (!hash.empty() && hash[0] == '!') throw config::ConfigError(hash.substr(1));
    s.base_model_hash = hash;
  }
  for (Communicator* c : s.counted_communicators()) c->reset_stats();  // count training only
  s.optimizer = make_optimizer(*s.engine, s.options);
  optim::LrScheduleSpec lr = s.options.lr;
  lr.warmup_steps = optim::resolve_warmup_steps(s.options.warmup_steps, s.options.warmup_ratio, s.total);
  lr.total_steps = s.total;
  try {
    s.schedule = std::make_unique<optim::LrSchedule>(lr);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());  // the config's fault, seen alike by every rank
  }
  resume_if_asked();
  if (s.data->pairs()) prepare_preference();
  const model::ModelConfig& m = plan.model;
  const std::int64_t q = m.num_attention_heads * m.head_dim();
  s.flop_shape.layers = m.num_hidden_layers;
  s.flop_shape.layers_matmul_params = m.token_matmul_parameters();
  s.flop_shape.head_params = m.vocab_size * m.hidden_size;
  s.flop_shape.attention_width = q;
  s.flop_shape.recompute = plan.gradient_checkpointing;
}

Trainer::~Trainer() = default;

std::int64_t Trainer::total_steps() const { return s_->total; }
std::int64_t Trainer::current_step() const { return s_->step; }
engine::Engine& Trainer::engine() { return *s_->engine; }
model::CausalLM& Trainer::model() { return *s_->model; }

std::string Trainer::describe() const {
  const State& s = *s_;
  return "model      " + s.plan.model.summary() + trainable_summary(s.plan) + "\ndata       " + s.data->describe() + "; " +
         std::to_string(s.sampler->steps_per_epoch()) + " steps per epoch\n" + "training   " +
         std::to_string(s.total) + " steps of " + std::to_string(s.plan.global_batch) +
         (!s.data->pairs()                       ? std::string(" sequences")
          : s.options.preference.reward_model
              ? std::string(" pairs (reward model: ") +
                    (s.plan.model.score_head == model::ScoreHead::TokenClassification ? "score, token classification"
                                                                                      : "value head") +
                    ", pairwise loss" + (s.options.preference.token_weighted ? ", micro-batches weighed by tokens)" : ")")
                                              : " pairs (pref_loss " + s.options.preference.loss + ")") +
         (s.plan.compute == at::kBFloat16 ? ", bf16 compute over fp32 weights"
          : s.scaler ? ", fp16 compute over fp32 weights, loss scale " + std::to_string(s.scaler->scale())
                     : ", fp32") +
         (s.plan.fp8 ? "; float8 linears" : "") + "\noptimizer  " + s.optimizer->describe();
}

bool Trainer::stop_requested() {
  at::Tensor any = at::full({1}, static_cast<std::int64_t>(stop_signal_received()), at::kLong);
  s_->world.all_reduce(any, ReduceOp::Max);
  return any.item<std::int64_t>() != 0;
}

void Trainer::lock_output_dir() {
  State& s = *s_;
  std::string error;
  if (world_rank_or_minus_one() == 0) {
    try {
      s.lock = std::make_unique<OutputLock>(s.options.output_dir);
    } catch (const UsageError& e) {
      error = e.what();
    }
  }
  Watchdog::Scope scope("agreeing on the output_dir lock", Watchdog::setup_timeout(), "setup_timeout");
  error = agree_on_error(s.mesh.world(), error);
  if (!error.empty()) throw UsageError(error);
}

int Trainer::run() {
  State& s = *s_;
  lock_output_dir();
  log0(describe());
  const std::string& out_dir = s.options.output_dir;
  std::optional<TrainingLog> log_file;  // on one rank
  if (s.mesh.dp().rank() == 0 && s.mesh.coord() == MeshCoord{}) {
    try {
      log_file.emplace(out_dir, s.step);
    } catch (const UsageError& e) {
      fatal_one(e.what());  // only this rank knows: end the job from here
    }
  }
  const auto start = Clock::now();
  const std::int64_t first_step = s.step;  // after a resume, the ETA is from this process's steps
  double window_loss = 0.0, window_seconds = 0.0;
  RoutingWindow routing_window;
  StepFlops window_flops;
  std::int64_t window_steps = 0, window_tokens = 0, window_padded = 0;
  const std::int64_t every = s.options.logging_steps;
  const bool saving = s.options.save_every_steps;
  const std::int64_t save_every = s.options.save_steps;
  const std::int64_t eval_every = s.data->has_eval() ? s.options.eval_steps : 0;
  auto log_eval = [&] {
    const double loss = evaluate();
    log0("eval at step " + std::to_string(s.step) + ": eval_loss " + std::to_string(loss) + " over " +
         std::to_string(s.data->eval().num_sequences()) + " held-out sequences");
    if (log_file) log_file->write_eval(s.step, s.total, loss);
  };
  if (saving) {
    const std::int64_t first = s.step, total = s.total;
    ckpt::check_save_targets(s.mesh.world(), out_dir, [&](std::int64_t step) {
      return step > first && (step == total || (save_every > 0 && step % save_every == 0 && step < total));
    });
  }
  set_graceful_stop(true);
  while (s.step < s.total) {
    if (stop_requested()) {
      save();
      log0("stopped on a signal at step " + std::to_string(s.step) + " after saving; exit status " +
           std::to_string(kCheckpointedExitCode) + " asks the batch script to requeue the job");
      return kCheckpointedExitCode;
    }
    const StepResult r = step();
    if (r.step == first_step + 1 && r.step % every != 0 && r.step != s.total)
      log0("step " + std::to_string(r.step) + "/" + std::to_string(s.total) + " took " + format_seconds(r.seconds) +
           " (this run's first; a line every " + std::to_string(every) + " steps)");
    if (saving && save_every > 0 && r.step % save_every == 0 && r.step != s.total) save(/*background=*/true);
    window_loss += r.loss;
    routing_window.add(r.aux_loss, r.expert_rows, r.expert_dropped);
    window_seconds += r.seconds;
    window_tokens += r.tokens;
    window_padded += r.padded_tokens;
    const StepFlops flops = step_flops(s.flop_shape, r.tokens, r.attention_pairs);
    window_flops.model += flops.model;
    window_flops.hardware += flops.hardware;
    ++window_steps;
    if (r.step % every != 0 && r.step != s.total) continue;
    LogRecord rec;
    rec.step = r.step;
    rec.total_steps = s.total;
    rec.loss = window_loss / static_cast<double>(window_steps);
    rec.lr = r.lr;
    rec.grad_norm = r.grad_norm;
    rec.epoch = static_cast<double>(r.step) / static_cast<double>(s.sampler->steps_per_epoch());
    rec.elapsed_s = seconds_since(start);
    rec.remaining_s = remaining_seconds(rec.elapsed_s, r.step - first_step, s.total - r.step);
    rec.tokens_per_s = static_cast<double>(window_tokens) / window_seconds;
    rec.flops_per_s = window_flops.model / window_seconds;
    rec.hardware_flops_per_s = window_flops.hardware / window_seconds;
    rec.padding = window_padded > 0 ? 1.0 - static_cast<double>(window_tokens) / static_cast<double>(window_padded) : 0.0;
    if (s.preference) rec.extra = s.preference_metrics.take();
    routing_window.take(rec);
    log0(to_console_line(rec));
    if (log_file) log_file->write(rec);
    window_loss = window_seconds = 0.0;
    window_steps = window_tokens = window_padded = 0;
    window_flops = StepFlops{};
    if (eval_every > 0 && r.step % eval_every == 0 && r.step != s.total) log_eval();
  }
  if (s.data->has_eval()) log_eval();
  set_graceful_stop(false);
  if (saving) save();
  log0("done: " + std::to_string(s.total) + " steps in " + format_duration(seconds_since(start)) + "; log in " +
       out_dir + "/trainer_log.jsonl");
  log0(run_summary());
  // plot_loss after everything is saved, on the rank that wrote trainer_log.jsonl (world rank 0,
  // mesh coordinate 0), as LlamaFactory plots on world process 0. A failed plot loses nothing.
  if (log_file && s.options.plot_loss) {
    try {
      plot_losses(out_dir, log_file->path(), [](const std::string& line) { log0(line); }, s.options.stage);
    } catch (const std::exception& e) {
      log0(std::string("warning: plot_loss: ") + e.what());
    }
  }
  return 0;
}

}  // namespace lft::train
