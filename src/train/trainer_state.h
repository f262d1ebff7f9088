// What a Trainer holds, shared by the files that implement it: trainer.cpp (building, the loop),
// train_step.cpp (one optimizer step), evaluation.cpp, trainer_checkpoint.cpp (save and resume)
// and run_summary.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "lft/ckpt/async_save.h"
#include "lft/comm/mpi_communicator.h"
#include "lft/config/config.h"
#include "lft/data/dynamic_batches.h"
#include "lft/data/sampler.h"
#include "lft/engine/context_parallel.h"
#include "lft/engine/engine.h"
#include "lft/engine/run_plan.h"
#include "lft/mesh/device_mesh.h"
#include "lft/model/causal_lm.h"
#include "lft/model/weight_source.h"
#include "lft/optim/lr_schedule.h"
#include "lft/optim/optimizer.h"
#include "lft/runtime/device.h"
#include "lft/train/loss_scaler.h"
#include "lft/train/output_lock.h"
#include "lft/train/preference.h"
#include "lft/train/train_options.h"
#include "lft/train/metrics.h"
#include "lft/train/trainer.h"
#include "lft/train/training_data.h"

namespace lft::train {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Trainer::State {
  const config::Config& cfg;  // for the training data (training_data.cpp) and the checkpoint's copy of the file
  const engine::RunPlan& plan;
  const TrainOptions options;
  DeviceMesh& mesh;
  DeviceChoice device;
  MpiCommunicator world;  // every rank: the stop signal, the summary
  std::unique_ptr<OutputLock> lock;  // world rank 0: this run owns output_dir
  std::shared_ptr<model::CausalLM> model;
  std::unique_ptr<engine::CommSequenceExchange> cp;  // [mesh] cp > 1: the sequences' exchange
  // What the run summary counts: the engine's communicators and the cp group's.
  // Each once: one communicator can serve two groups of the same ranks (DeviceMesh::device_dp).
  std::vector<Communicator*> counted_communicators() const {
    std::vector<Communicator*> out;
    std::vector<Communicator*> all = engine->communicators();
    if (cp) all.push_back(&cp->communicator());
    for (Communicator* c : all)
      if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
    return out;
  }
  std::unique_ptr<TrainingData> data;
  std::unique_ptr<data::GlobalSampler> sampler;
  // batching_strategy = "dynamic_batching": the micro-batches of each step (the sampler then only
  // counts epochs), and the step its cut has reached (a resumed run replays it up to its step).
  std::unique_ptr<data::DynamicBatches> dynamic;
  std::int64_t dynamic_step = 0;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<optim::LrSchedule> schedule;
  std::int64_t total = 1, step = 0, tokens_seen = 0;
  std::unique_ptr<ckpt::AsyncSaver> async_saver;  // async_checkpoint: periodic saves in the background
  std::int64_t saved_step = -1;  // the step whose checkpoint output_dir holds from this run (or its resume)
  std::unique_ptr<LossScaler> scaler;  // fp16 only
  FlopShape flop_shape;  // metrics.h: the model and hardware FLOPs of a step
  std::string base_model_hash;  // freeze/lora from a model folder: model_folder_hash of it
  double step_seconds = 0.0;  // of the steps run by this process
  // stage dpo: the loss, each sequence's reference log-probability (NaN where no remaining step
  // reads it) and trained-token count, and the metrics since the last logged step.
  std::optional<PreferenceOptions> preference;
  std::vector<double> reference_logps;
  std::vector<double> answer_lengths;
  PreferenceMetrics preference_metrics;

  State(const config::Config& c, const engine::RunPlan& p, DeviceMesh& m, const DeviceChoice& d)
      : cfg(c), plan(p), options(train_options(c, p)), mesh(m), device(d), world(m.world(), "world", false) {}
  at::Device torch_device() const { return device.torch_device(); }
  // On the compute device; with stage dpo the reference log-probabilities of `sequences` too.
  engine::MicroBatch device_batch(const data::Batch& b, const std::vector<std::int64_t>& sequences = {}) const;
  // The reference log-probabilities and answer lengths of `sequences` ([n] double, CPU).
  at::Tensor reference_of(const std::vector<std::int64_t>& sequences) const;
  at::Tensor lengths_of(const std::vector<std::int64_t>& sequences) const;
};

}  // namespace lft::train
