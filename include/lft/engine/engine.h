// The engine lifecycle every parallel engine shares (ARCHITECTURE.md, "Engine"):
//   create (registry) -> prepare(model) -> per step: begin_micro_batch(sync) / backward ...
//   -> finish_gradients() -> the optimizer updates parameters() -> ...
// The trainer owns the model, the optimizer and the loop; an engine owns how parameters and
// gradients are laid out and communicated.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lft/comm/communicator.h"
#include "lft/config/config.h"
#include "lft/mesh/device_mesh.h"
#include "lft/mesh/tensor_box.h"

namespace lft::model {
class CausalLM;
class WeightSource;
}

namespace lft::engine {

// One micro-batch of a step, on the compute device.
struct MicroBatch {
  at::Tensor input_ids;    // [B, T] int64
  at::Tensor segment_ids;  // [B, T] int32 with neat packing, else undefined
  at::Tensor weights;      // [B, T-1] float: the weight of each target
  // [B, T] bool, true on tokens (a mixture of experts' routing statistics leave padding out);
  // undefined: every position a token.
  at::Tensor token_mask;
  // Preference training: each sequence's log-probability under the reference model ([B] float),
  // read by the objective; undefined otherwise.
  at::Tensor reference_logps;
  // Preference training: the weight of each of its pairs' losses in the objective (1, or with
  // pref_loss_weighting = "tokens" its trained tokens over its pairs).
  double pair_loss_weight = 1.0;
};

// A loss over whole sequences (preference training): from a micro-batch's weighted token losses
// [B, T-1] (differentiable) to the scalar whose backward the micro-batch contributes (before
// loss_factor). The engines apply it where the loss is computed (the last pipeline stage).
using SequenceObjective = std::function<at::Tensor(const at::Tensor& weighted_token_losses, const MicroBatch& batch)>;

struct MicroBatchOptions {
  at::ScalarType compute = at::kFloat;  // autocast dtype of the forward
  bool backward = true;                 // false: evaluation, forward only
  // The backward of a micro-batch is that of objective(weighted token losses) * loss_factor (1 /
  // the step's sum of weights, times the fp16 loss scale); no objective: their sum.
  double loss_factor = 1.0;
  SequenceObjective objective;
};

// objective(losses, batch), or losses.sum() without one.
at::Tensor micro_batch_loss(const MicroBatchOptions& options, const at::Tensor& weighted_token_losses,
                            const MicroBatch& batch);

struct RunPlan;

struct EngineContext {
  DeviceMesh& mesh;
  const RunPlan& plan;  // the model, batch and precision, resolved once (run_plan.h)
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual const char* name() const = 0;

  // Takes charge of `model`'s parameters (hooks, sharding). Collective.
  virtual void prepare(model::CausalLM& model) = 0;
  // prepare() with the model's starting weights read from `weights`. The default reads them
  // whole into the model first; an engine that reads_weight_shards() reads only the rows this
  // rank keeps, into a model built without parameter memory (model::UnallocatedParameters).
  virtual void prepare_from(model::CausalLM& model, const model::WeightSource& weights);
  virtual bool reads_weight_shards() const { return false; }
  // Before each micro-batch's forward: `sync` is true for the last micro-batch of a step, the one
  // whose backward must synchronise gradients (no_sync for the others).
  virtual void begin_micro_batch(bool sync) = 0;
  // Forward (and backward) of a step's micro-batches, in order; returns each micro-batch's
  // per-sequence sums of weighted token losses, concatenated ([sum of B], double, on the mesh's
  // device: the host reads them once per step), on every rank. The default runs them one after another on the whole model, with begin_micro_batch()
  // before each (sync on the last when training). Collective for engines that communicate in forward.
  virtual at::Tensor run_micro_batches(model::CausalLM& model, const std::vector<MicroBatch>& batches,
                                       const MicroBatchOptions& options);
  // After the last backward of a step: every gradient of parameters() is final. Collective.
  virtual void finish_gradients() = 0;

  // The tensors this rank updates, with their names (whole parameters, or shards).
  virtual std::vector<at::Tensor> parameters() = 0;
  virtual std::vector<std::string> parameter_names() = 0;
  // One box per tensor of parameters(), in the same order (checkpoints).
  virtual std::vector<TensorBox> parameter_boxes() = 0;
  // The group over which parameters() are pieces of whole parameters: every trained parameter cut
  // into boxes over its ranks (each piece's box in parameter_boxes()), the same parameters in the
  // same order on each; ranks may hold the same box. Null: each tensor of parameters() is whole.
  // Muon needs it.
  virtual Communicator* piece_group() { return nullptr; }
  // After the optimizer has updated parameters() (each step, and after a checkpoint load).
  // Collective for engines that rebuild whole parameters from updated shards.
  virtual void parameters_updated() {}
  // Squared L2 norm of the full logical gradient, over every rank and mesh dim: [1] double on the
  // mesh's device (read with the step's losses). Collective.
  virtual at::Tensor grad_norm_squared() = 0;

  // The communicators it uses, for the byte and time counters.
  virtual std::vector<Communicator*> communicators() const = 0;
  // Extra lines for the end-of-run summary, given the steps run and their seconds (collective;
  // "" when there is nothing to add).
  virtual std::string summary(double /*steps*/, double /*step_seconds*/) { return ""; }
};

// Boxes of whole tensors (engines that keep every parameter whole), held by `replicas` ranks.
std::vector<TensorBox> whole_boxes(const std::vector<at::Tensor>& tensors, int replicas = 1,
                                   int replica = 0);

// Squared L2 norm of the gradients of `tensors` on this rank: [1] double on `device`, computed
// there without a host sync (on the CPU in double; on a GPU each tensor's norm in fp32).
at::Tensor local_grad_norm_squared(const std::vector<at::Tensor>& tensors, const at::Device& device);

}  // namespace lft::engine
