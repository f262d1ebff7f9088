// The training loop: global batch -> micro-batches -> forward/backward through the engine ->
// global-norm clipping -> AdamW -> LR schedule, with the loss as the mean over every target
// token of the global batch (not a mean of micro-batch means), so any split of the same global
// batch trains the same step. One concern a file: trainer.cpp builds it and runs the loop,
// train_step.cpp is a step, evaluation.cpp the held-out loss, trainer_checkpoint.cpp the save and
// resume hand-off, run_summary.cpp the closing report; training_log.h writes trainer_log.jsonl.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lft/ckpt/checkpoint.h"
#include "lft/config/config.h"
#include "lft/engine/engine.h"
#include "lft/engine/run_plan.h"
#include "lft/mesh/device_mesh.h"
#include "lft/runtime/device.h"

namespace lft::train {

struct StepResult {
  std::int64_t step = 0;       // 1-based, after the update
  double loss = 0.0;           // mean over the global batch's target tokens
  double grad_norm = 0.0;      // before clipping
  double lr = 0.0;
  std::int64_t tokens = 0;     // tokens of the global batch, padding not counted
  std::int64_t padded_tokens = 0;  // positions computed: tokens and the padding of each micro-batch
  std::int64_t attention_pairs = 0;  // sum of the squared lengths of the batch's attention spans
  double seconds = 0.0;
  bool skipped = false;        // fp16: the gradients overflowed; no update (loss scale lowered)
  // A mixture of experts: the step's auxiliary load-balancing loss (mean over its forwards; the
  // loss above includes it times router_aux_loss_coef when output_router_logits), and the
  // tokens each MoE layer routed to each expert ([MoE layers, experts] fp64; undefined: dense).
  double aux_loss = 0.0;
  at::Tensor expert_rows;
  // With an expert capacity (moe_expert_capacity_factor): the share of the step's (row, expert)
  // pairs that were dropped; negative: dropless.
  double expert_dropped = -1.0;
};

class Trainer {
 public:
  // Builds the model, data, engine and optimizer of `plan` (resolved from `cfg`; both must outlive
  // the trainer), over `mesh`. Collective.
  Trainer(const config::Config& cfg, const engine::RunPlan& plan, DeviceMesh& mesh, const DeviceChoice& device);
  ~Trainer();

  // The whole run: total_steps() steps with logging (rank 0 prints; trainer_log.jsonl),
  // checkpoints, and a graceful stop on a signal. Returns the exit status: 0, or
  // kCheckpointedExitCode after a signal-triggered save.
  int run();
  // Saves this step's checkpoint; with `background` (async_checkpoint) it returns once the state
  // is copied and writes it on a thread. Either way a save in flight is finished first.
  std::string save(bool background = false);
  // One optimizer step. Collective.
  StepResult step();
  // The loss over the held-out sequences (val_size), weighted as in training. Collective.
  double evaluate();

  std::int64_t total_steps() const;
  std::int64_t current_step() const;
  engine::Engine& engine();
  model::CausalLM& model();  // the parameters this rank holds (whole, boxes, or freed shards)
  // One line on the model, data and plan for the log.
  std::string describe() const;
  // Peak memory per rank and communication per step (collective: gathers from every rank).
  std::string run_summary();

 private:
  void resume_if_asked();
  // stage dpo: the loss options, the answers' lengths and the reference model's log-probability
  // of every sequence the remaining steps train on (preference_reference.cpp). Collective.
  void prepare_preference();
  // World rank 0 takes output_dir's lock for the run (output_lock.h); every rank throws the
  // UsageError when another run holds it. Collective.
  void lock_output_dir();
  // Agreed over every rank at a step boundary: did any rank get a stop signal? Collective.
  bool stop_requested();
  // A mixture of experts: the step's routing totals over the data-parallel ranks into `r` (its
  // auxiliary loss added to the loss when it trains). Collective.
  void add_routing(StepResult& r);
  std::vector<ckpt::HeldTensor> held_tensors();
  ckpt::RunInfo run_info() const;

  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace lft::train
