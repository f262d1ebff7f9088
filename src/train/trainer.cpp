#include "lft/train/trainer.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>

#include "lft/ckpt/checkpoint.h"
#include "lft/ckpt/checkpoint_files.h"
#include "lft/comm/mpi_communicator.h"
#include "lft/comm/watchdog.h"
#include "lft/data/corpus.h"
#include "lft/data/packed_dataset.h"
#include "lft/data/sampler.h"
#include "lft/data/tokenizer.h"
#include "lft/engine/registry.h"
#include "lft/model/hf_checkpoint.h"
#include "lft/model/init.h"
#include "lft/model/families.h"
#include "lft/model/model_config.h"
#include "lft/model/parameter_storage.h"
#include "lft/optim/adamw.h"
#include "lft/optim/lr_schedule.h"
#include "lft/runtime/check.h"
#include "lft/runtime/error.h"
#include "lft/runtime/log.h"
#include "lft/runtime/memory.h"
#include "lft/runtime/signals.h"
#include "lft/train/loss_scaler.h"
#include "lft/train/metrics.h"
#include "lft/train/training_data.h"
#include "lft/config/deepspeed.h"

namespace lft::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// DeepSpeed's fp16 block when the engine is deepspeed, else DeepSpeed's defaults.
LossScaleOptions loss_scale_options(const config::Config& cfg, DeviceMesh& mesh) {
  LossScaleOptions o;
  if (cfg.string("distributed") != "deepspeed") return o;
  const config::DeepSpeedConfig ds = config::read_deepspeed_config(cfg, mesh.shape().dp_size());
  o.initial_scale = std::ldexp(1.0, ds.initial_scale_power);
  o.static_scale = ds.loss_scale;
  o.window = ds.loss_scale_window;
  o.hysteresis = ds.hysteresis;
  o.min_scale = ds.min_loss_scale;
  return o;
}

}  // namespace

struct Trainer::State {
  const config::Config& cfg;
  DeviceMesh& mesh;
  DeviceChoice device;
  model::ModelConfig model_config;
  std::shared_ptr<model::CausalLM> model;
  std::unique_ptr<TrainingData> data;
  std::unique_ptr<data::GlobalSampler> sampler;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<optim::AdamW> optimizer;
  std::unique_ptr<optim::LrSchedule> schedule;
  std::int64_t micro = 1, accum = 1, global = 1, total = 1, step = 0, tokens_seen = 0;
  at::ScalarType compute = at::kFloat;  // bf16 / fp16: autocast
  std::unique_ptr<LossScaler> scaler;    // fp16 only
  double flops_per_token = 0.0;
  double step_seconds = 0.0;  // of the steps run by this process

  State(const config::Config& c, DeviceMesh& m, const DeviceChoice& d) : cfg(c), mesh(m), device(d) {}
  at::Device torch_device() const {
    return device.cuda ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device.index)) : at::Device(at::kCPU);
  }
  engine::MicroBatch device_batch(const data::Batch& b) const {
    engine::MicroBatch m;
    m.input_ids = b.input_ids.to(torch_device());
    if (data->segments() && b.segment_ids.defined()) m.segment_ids = b.segment_ids.to(torch_device());
    m.weights = b.weights.to(torch_device());
    return m;
  }
};

Trainer::Trainer(const config::Config& cfg, DeviceMesh& mesh, const DeviceChoice& device)
    : s_(std::make_unique<State>(cfg, mesh, device)) {
  State& s = *s_;
  s.compute = cfg.boolean("bf16") ? at::kBFloat16 : cfg.boolean("fp16") ? at::kHalf : at::kFloat;
  if (s.compute == at::kHalf) s.scaler = std::make_unique<LossScaler>(loss_scale_options(cfg, mesh));
  s.model_config = model::ModelConfig::from_run_config(cfg);
  s.micro = cfg.integer("per_device_train_batch_size");
  s.accum = cfg.integer("gradient_accumulation_steps");
  s.global = s.micro * s.accum * mesh.shape().dp_size();
  s.data = std::make_unique<TrainingData>(cfg, mesh.world());
  const data::Tokenizer& tok = s.data->tokenizer();
  if (s.model_config.vocab_size < tok.vocab_size())
    throw config::ConfigError("config error: " +
                              (cfg.is_set("model_name_or_path") ? cfg.where("model_name_or_path")
                                                                : cfg.where("model.vocab_size")) +
                              ": the " + tok.name() + " tokenizer has " +
                              std::to_string(tok.vocab_size()) + " ids but the model's vocab_size is " +
                              std::to_string(s.model_config.vocab_size));
  s.sampler = std::make_unique<data::GlobalSampler>(s.data->num_sequences(), s.global,
                                                    static_cast<std::uint64_t>(cfg.integer("seed")));
  const std::int64_t max_steps = cfg.integer("max_steps");
  s.total = max_steps > 0 ? max_steps
                          : static_cast<std::int64_t>(std::ceil(cfg.real("num_train_epochs") *
                                                                static_cast<double>(s.sampler->steps_per_epoch())));
  engine::EngineContext ctx{cfg, mesh};
  s.engine = engine::engine_for(cfg).create(ctx);
  // A sharding engine reads only its share of the starting weights, into parameters that have no
  // memory yet: no rank ever holds the whole model.
  {
    std::optional<model::UnallocatedParameters> unallocated;
    if (s.engine->reads_weight_shards()) unallocated.emplace();
    s.model = model::create_causal_lm(s.model_config, at::TensorOptions().device(s.torch_device()));
  }
  s.model->set_gradient_checkpointing(cfg.boolean("gradient_checkpointing"));
  if (cfg.is_set("model_name_or_path")) {
    const std::string folder = cfg.string("model_name_or_path");
    Watchdog::Scope scope("loading " + folder, Watchdog::setup_timeout(), "setup_timeout");
    s.engine->prepare_from(*s.model, model::HfWeights(folder, *s.model));
  } else {
    s.engine->prepare_from(*s.model, model::InitWeights(*s.model, static_cast<std::uint64_t>(cfg.integer("seed"))));
  }
  for (Communicator* c : s.engine->communicators()) c->reset_stats();  // count training only
  optim::AdamWOptions o;
  o.beta1 = cfg.real("adam_beta1");
  o.beta2 = cfg.real("adam_beta2");
  o.eps = cfg.real("adam_epsilon");
  o.weight_decay = cfg.real("weight_decay");
  s.optimizer = std::make_unique<optim::AdamW>(s.engine->parameters(), s.engine->parameter_names(), o);
  s.schedule = std::make_unique<optim::LrSchedule>(
      cfg.real("learning_rate"), optim::lr_shape_from_name(cfg.string("lr_scheduler_type")),
      optim::resolve_warmup_steps(cfg.integer("warmup_steps"), cfg.real("warmup_ratio"), s.total),
      s.total);
  resume_if_asked();
  s.flops_per_token = flops_per_token(s.model_config.num_non_embedding_parameters(),
                                      s.model_config.num_hidden_layers, s.model_config.hidden_size,
                                      cfg.integer("cutoff_len"));
}

Trainer::~Trainer() = default;

std::int64_t Trainer::total_steps() const { return s_->total; }
std::int64_t Trainer::current_step() const { return s_->step; }
engine::Engine& Trainer::engine() { return *s_->engine; }

std::string Trainer::describe() const {
  const State& s = *s_;
  return "model      " + s.model_config.summary() + "\ndata       " + s.data->describe() + "; " +
         std::to_string(s.sampler->steps_per_epoch()) +
         " steps per epoch\n" +
         "training   " + std::to_string(s.total) + " steps of " + std::to_string(s.global) +
         " sequences" +
         (s.compute == at::kBFloat16 ? ", bf16 compute over fp32 weights"
          : s.scaler ? ", fp16 compute over fp32 weights, loss scale " + std::to_string(s.scaler->scale())
                     : ", fp32");
}

StepResult Trainer::step() {
  State& s = *s_;
  const auto start = Clock::now();
  const auto indices = s.sampler->global_batch_indices();
  // The loss is the weighted sum over every target of the global batch divided by the sum of the
  // weights (the count of trained tokens unless messages carry loss weights): each rank knows it.
  const double targets = s.data->weight_sum(indices);
  const int dp_rank = s.mesh.dp_rank(), dp_size = s.mesh.shape().dp_size();

  std::vector<engine::MicroBatch> batches;
  for (std::int64_t m = 0; m < s.accum; ++m)
    batches.push_back(s.device_batch(s.data->batch(data::local_micro_batch(indices, dp_rank, dp_size, s.micro, s.accum, m))));
  engine::MicroBatchOptions options;
  options.compute = s.compute;
  options.loss_factor = (s.scaler ? s.scaler->scale() : 1.0) / targets;
  const at::Tensor local = s.engine->run_micro_batches(*s.model, batches, options);
  s.engine->finish_gradients();

  // Per-sequence sums in one fixed global order, so every layout adds them the same way.
  at::Tensor all = at::empty({s.global}, local.options());
  s.mesh.dp().all_gather(local, all);
  double loss_sum = 0.0;
  const double* p = all.data_ptr<double>();
  for (std::int64_t i = 0; i < s.global; ++i) loss_sum += p[i];

  StepResult r;
  r.loss = loss_sum / targets;
  r.grad_norm = std::sqrt(s.engine->grad_norm_squared());
  if (s.scaler && std::isfinite(r.loss)) {
    const double scale = s.scaler->scale();
    if (!s.scaler->update(std::isfinite(r.grad_norm), s.step + 1)) {  // every rank agrees
      log0(s.scaler->last_event());
      for (auto& t : s.engine->parameters()) t.mutable_grad().reset();
      s.sampler->advance();
      r.step = ++s.step;
      r.grad_norm = 0.0;
      r.skipped = true;
      r.lr = s.schedule->lr(s.step - 1);
      r.tokens = s.global * s.data->seq_len();
      s.tokens_seen += r.tokens;
      r.seconds = seconds_since(start);
      s.step_seconds += r.seconds;
      return r;
    }
    c10::NoGradGuard no_grad;
    for (auto& t : s.engine->parameters())
      if (t.grad().defined()) t.mutable_grad().div_(scale);
    r.grad_norm /= scale;
  }
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm))
    throw RunFailure("step " + std::to_string(s.step + 1) + ": the loss is " +
                     std::to_string(r.loss) + " and the gradient norm " +
                     std::to_string(r.grad_norm) +
                     "; stopping before the update (nothing was written). Lower learning_rate, "
                     "set max_grad_norm, or check the data.");
  const double max_norm = s.cfg.real("max_grad_norm");
  if (max_norm > 0) {
    const double coef = std::min(1.0, max_norm / (r.grad_norm + 1e-6));
    c10::NoGradGuard no_grad;
    for (auto& t : s.engine->parameters())
      if (t.grad().defined()) t.mutable_grad().mul_(coef);
  }
  r.lr = s.schedule->lr(s.step);
  s.optimizer->step(r.lr);
  s.engine->parameters_updated();
  for (auto& t : s.engine->parameters()) t.mutable_grad().reset();
  s.sampler->advance();
  r.step = ++s.step;
  r.tokens = s.global * s.data->seq_len();
  s.tokens_seen += r.tokens;
  r.seconds = seconds_since(start);
  s.step_seconds += r.seconds;
  return r;
}

std::vector<ckpt::HeldTensor> Trainer::held_tensors() {
  State& s = *s_;
  const auto params = s.engine->parameters();
  const auto names = s.engine->parameter_names();
  const auto boxes = s.engine->parameter_boxes();
  std::vector<ckpt::HeldTensor> held;
  for (std::size_t i = 0; i < params.size(); ++i)
    held.push_back({names[i], params[i], boxes[i].global_shape, boxes[i].offset,
                    boxes[i].replicas, boxes[i].replica});
  return held;
}

ckpt::RunInfo Trainer::run_info() const {
  const State& s = *s_;
  ckpt::RunInfo info;
  info.engine = s.cfg.string("distributed");
  info.mesh.assign(s.mesh.shape().sizes.begin(), s.mesh.shape().sizes.end());
  info.world_size = s.mesh.shape().world_size();
  info.config_text = s.cfg.source_text();
  for (const auto& o : s.cfg.overrides()) info.config_text += "\n# override: " + o;
  info.global_batch = s.global;
  info.seed = s.cfg.integer("seed");
  return info;
}

void Trainer::resume_if_asked() {
  State& s = *s_;
  if (!s.cfg.is_set("resume_from_checkpoint")) return;
  const auto folder = ckpt::find_checkpoint(s.mesh.world(), s.cfg.string("output_dir"),
                                            s.cfg.string("resume_from_checkpoint"));
  if (!folder) {
    log0("resume: no complete checkpoint in " + s.cfg.string("output_dir") + "; starting from step 0");
    return;
  }
  const auto start = Clock::now();
  const ckpt::Progress p = ckpt::load_checkpoint(s.mesh.world(), *folder, run_info(), held_tensors(),
                                                 *s.optimizer);
  s.engine->parameters_updated();
  const double seconds = seconds_since(start);
  s.sampler->restore(p.sampler);
  s.step = p.step;
  s.tokens_seen = p.tokens_seen;
  if (s.scaler && p.loss_scale > 0) s.scaler->restore(p.loss_scale);
  log0("resume: " + *folder + " at step " + std::to_string(p.step) + " (epoch " +
       std::to_string(p.sampler.epoch) + ", " + std::to_string(s.sampler->consumed_samples()) +
       " samples consumed), loaded in " + std::to_string(seconds).substr(0, 5) + " s");
}

std::string Trainer::save() {
  State& s = *s_;
  ckpt::SaveOptions o;
  o.output_dir = s.cfg.string("output_dir");
  o.per_rank = s.cfg.string("checkpoint_format") == "per_rank";
  o.total_limit = s.cfg.integer("save_total_limit");
  ckpt::Progress p;
  p.step = s.step;
  p.tokens_seen = s.tokens_seen;
  if (s.scaler) p.loss_scale = s.scaler->scale();
  p.sampler = s.sampler->state();
  const auto start = Clock::now();
  const std::string folder =
      ckpt::save_checkpoint(s.mesh.world(), o, run_info(), p, held_tensors(), *s.optimizer);
  log0("saved " + folder + " in " + std::to_string(seconds_since(start)).substr(0, 5) + " s");
  return folder;
}

double Trainer::evaluate() {
  State& s = *s_;
  const data::SftDataset& eval = s.data->eval();
  const std::int64_t n = eval.num_sequences(), dp = s.mesh.shape().dp_size(), rank = s.mesh.dp_rank();
  // Every rank runs the same number of forwards (sharded engines gather collectively); a rank
  // past the end repeats sequence 0 with weight 0.
  const std::int64_t chunks = (n + dp * s.micro - 1) / (dp * s.micro);
  double sums[2] = {0.0, 0.0};  // weighted loss, weight
  c10::NoGradGuard no_grad;
  for (std::int64_t c = 0; c < chunks; ++c) {
    std::vector<std::int64_t> indices;
    for (std::int64_t j = 0; j < s.micro; ++j) {
      const std::int64_t i = (c * dp + rank) * s.micro + j;
      if (i < n) indices.push_back(i);
    }
    const double keep = indices.empty() ? 0.0 : 1.0;
    if (indices.empty()) indices.push_back(0);
    const data::Batch b = eval.batch(indices);
    engine::MicroBatchOptions options;
    options.compute = s.compute;
    options.backward = false;
    sums[0] += keep * s.engine->run_micro_batches(*s.model, {s.device_batch(b)}, options).sum().item<double>();
    sums[1] += keep * b.weights.to(at::kDouble).sum().item<double>();
  }
  LFT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, s.mesh.dp().handle()));
  return sums[0] / sums[1];
}

void Trainer::log_eval(std::ofstream& log_file) {
  State& s = *s_;
  const double loss = evaluate();
  log0("eval at step " + std::to_string(s.step) + ": eval_loss " + std::to_string(loss) + " over " +
       std::to_string(s.data->eval().num_sequences()) + " held-out sequences");
  if (log_file)
    log_file << "{\"current_steps\": " << s.step << ", \"total_steps\": " << s.total
             << ", \"eval_loss\": " << loss << ", \"step\": " << s.step << "}\n" << std::flush;
}

// Agreed over every rank at a step boundary: did any rank get a stop signal?
static bool stop_requested(MPI_Comm world) {
  int mine = stop_signal_received(), any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, world);
  return any != 0;
}

int Trainer::run() {
  State& s = *s_;
  log0(describe());
  const std::string out_dir = s.cfg.string("output_dir");
  std::ofstream log_file;
  if (s.mesh.dp().rank() == 0 && s.mesh.coord() == MeshCoord{}) {
    ckpt::make_directories(out_dir);
    const std::string path = out_dir + "/trainer_log.jsonl";
    // A resumed run keeps the records up to its checkpoint and continues the same file.
    std::string kept;
    if (s.step > 0) {
      std::ifstream old(path);
      for (std::string line; std::getline(old, line);)
        if (line.find("\"step\":") != std::string::npos &&
            std::stoll(line.substr(line.find("\"step\":") + 7)) <= s.step)
          kept += line + "\n";
    }
    log_file.open(path, std::ios::trunc);
    log_file << kept;
    if (!log_file) fatal_one("cannot write " + out_dir + "/trainer_log.jsonl");
  }
  const auto start = Clock::now();
  double window_loss = 0.0, window_seconds = 0.0;
  std::int64_t window_steps = 0, window_tokens = 0;
  const std::int64_t every = s.cfg.integer("logging_steps");
  const bool saving = s.cfg.string("save_strategy") == "steps";
  const std::int64_t save_every = s.cfg.integer("save_steps");
  const std::int64_t eval_every = s.data->has_eval() ? s.cfg.integer("eval_steps") : 0;
  set_graceful_stop(true);
  while (s.step < s.total) {
    if (stop_requested(s.mesh.world())) {
      save();
      log0("stopped on a signal at step " + std::to_string(s.step) + " after saving; exit status " +
           std::to_string(kCheckpointedExitCode) + " asks the batch script to requeue the job");
      return kCheckpointedExitCode;
    }
    const StepResult r = step();
    if (saving && save_every > 0 && r.step % save_every == 0 && r.step != s.total) save();
    window_loss += r.loss;
    window_seconds += r.seconds;
    window_tokens += r.tokens;
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
    rec.remaining_s = rec.elapsed_s / static_cast<double>(r.step) * static_cast<double>(s.total - r.step);
    rec.tokens_per_s = static_cast<double>(window_tokens) / window_seconds;
    rec.flops_per_s = rec.tokens_per_s * s.flops_per_token;
    log0(to_console_line(rec));
    if (log_file) log_file << to_json_line(rec) << "\n" << std::flush;
    window_loss = window_seconds = 0.0;
    window_steps = window_tokens = 0;
    if (eval_every > 0 && r.step % eval_every == 0 && r.step != s.total) log_eval(log_file);
  }
  if (s.data->has_eval()) log_eval(log_file);
  set_graceful_stop(false);
  if (saving) save();
  log0("done: " + std::to_string(s.total) + " steps in " + format_duration(seconds_since(start)) +
       "; log in " + out_dir + "/trainer_log.jsonl");
  log0(run_summary());
  return 0;
}

std::string Trainer::run_summary() {
  State& s = *s_;
  // Peak memory of every rank, gathered to all (the world is the mesh's dp x pp x tp).
  MpiCommunicator world(s.mesh.world(), "world", false);
  at::Tensor mine = at::tensor({static_cast<double>(peak_rss_bytes()),
                                static_cast<double>(cpu_peak_bytes_in_use())}, at::kDouble);
  at::Tensor all = at::empty({2 * world.size()}, at::kDouble);
  world.all_gather(mine, all);
  auto per_rank = [&](int column) {
    std::string line;
    for (int r = 0; r < world.size(); ++r)
      line += (r ? ", " : "") + std::string("rank ") + std::to_string(r) + " " +
              std::to_string(static_cast<long>(all[2 * r + column].item<double>() / (1024.0 * 1024.0))) + " MiB";
    return line;
  };
  std::string out = "summary:\n  peak RSS   " + per_rank(0);
  if (cpu_memory_counter_installed()) out += "\n  peak CPU tensors " + per_rank(1);
  const double steps = static_cast<double>(std::max<std::int64_t>(1, s.step));
  double in_flight = 0.0;
  for (Communicator* c : s.engine->communicators())
    for (int k = 0; k < kCollKindCount; ++k) {
      const auto kind = static_cast<CollKind>(k);
      const CollStats& st = c->stats()[kind];
      if (st.calls == 0) continue;
      in_flight += st.seconds;
      out += "\n  comm       '" + c->name() + "' " + coll_kind_name(kind) + ": " +
             std::to_string(static_cast<double>(st.calls) / steps).substr(0, 5) + " calls, " +
             format_bytes(static_cast<double>(st.bytes) / steps) + " per step (bus " +
             format_bytes(bus_bytes(kind, static_cast<double>(st.bytes) / steps, c->size())) + ")";
    }
  out += "\n  exposed    " + std::to_string(1e3 * s.engine->exposed_comm_seconds() / steps).substr(0, 6) +
         " ms of communication per step, of " + std::to_string(1e3 * in_flight / steps).substr(0, 6) +
         " ms in flight";
  out += s.engine->summary(steps, s.step_seconds);
  return out;
}

}  // namespace lft::train
