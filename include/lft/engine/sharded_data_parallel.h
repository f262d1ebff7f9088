// Sharded data parallelism as one component (ARCHITECTURE.md, "Engine"; docs/engines.md): the
// engine behind fsdp2, fsdp and deepspeed ZeRO 1-3, and megatron's sharded data parallelism over
// its dp group, applied to whatever the tensor- and pipeline-parallel layout leaves on a rank
// (torchtitan applies FSDP after TP the same way).
//
// The parameters it is given are grouped in units: one per decoder layer (the model's layer
// units), and a root unit for the rest (embedding, final norm, head). Each rank keeps an fp32
// shard of every unit (shard_layout.h) and updates only that; the optimizer's tensors are views of
// it. (With shard_parameters and a 16-bit compute dtype, the frozen parameters' shards are kept
// in that dtype, the only one they are gathered in; not with offload.) A parameter it is given
// may itself be a box of a larger one (megatron's tensor-parallel slice): the shards are cut from
// that box, and their checkpoint boxes say where they lie.
//
//   shard_parameters (fsdp, fsdp2, ZeRO-3): a unit's parameters exist whole only while it runs:
//     all-gathered (in the compute dtype) before its forward, the next unit's gather launched
//     meanwhile; freed after its forward when reshard_after_forward, gathered again (with the
//     previous unit prefetched) when its output's gradient arrives; freed after its backward.
//   otherwise (ZeRO-1/2): every rank keeps whole fp32 parameters; after each optimizer step the
//     updated shards are all-gathered into them, each unit's gather waited for just before its
//     forward in the next step.
//   reduce_during_backward (all but ZeRO-1): when the last gradient of a unit has been
//     accumulated in a backward pass, the unit's gradients are reduce-scattered (fp32, sum) and
//     the whole gradients freed; ZeRO-1 keeps whole gradients over the step's passes and does so
//     in the last one.
// With a replicate group of more than one rank (HSDP) the shards are all-reduced over the
// replicas after the last backward pass.
//   frozen bytes (QLoRA's 4-bit base, which is no parameter): with shard_parameters each rank
//     keeps an even share of each unit's bytes (FSDP-QLoRA's storage dtype: bytes split evenly
//     whatever the blocks), all-gathered beside the unit's parameters and freed with them;
//     otherwise (ZeRO-1/2) left whole where they are.
//   offload (fsdp2 offload_params, DeepSpeed offload_optimizer / offload_param): the fp32 shards,
//     their gradients and so the optimizer's state live in host memory (pinned with pin_memory
//     on a GPU); each gather copies the shard to the compute device first, each reduced gradient
//     shard comes back to the host, and AdamW steps there. On a CPU run the same copies run
//     host to host.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lft/comm/communicator.h"
#include "lft/engine/shard_layout.h"
#include "lft/mesh/tensor_box.h"
#include "lft/model/causal_lm.h"
#include "lft/model/layers.h"

namespace lft::model {
class WeightSource;
}

namespace lft::engine {

struct ShardingPlan {
  std::string name;  // the `distributed` value
  bool per_parameter_cut = true;   // fsdp2: each parameter's dim 0; else one flat buffer per unit
  bool shard_parameters = true;
  bool reshard_after_forward = true;
  bool reduce_during_backward = true;
  at::ScalarType compute_dtype = at::kFloat;  // dtype of gathered parameters
  // fsdp2's fp8_enable_fsdp_float8_all_gather: the weights of float8 linears are cast to e4m3 on
  // each rank with the whole weight's scale (amax agreed over the shard group) and gathered as
  // one byte an element; the matmul takes them without a second cast.
  bool float8_all_gather = false;
  // The embedding's gradient as sparse rows, reduced by gathering every rank's rows when the
  // lookup's backward ends, and with tied embeddings the head's dense gradient reduced with the
  // root's other gradients as soon as the head's backward is done (CausalLM::split_embedding_gradient):
  // the root's reduce-scatter then overlaps the layers' backward instead of following it.
  bool split_embedding_gradient = false;
  bool offload = false;     // shards, gradients and optimizer state in host memory
  bool pin_memory = false;  // page-locked host memory for them (GPU runs)
  std::string description;                    // one line for the start-up log
};

// The unit parameter `name` of `model` belongs to: its decoder layer's unit, or the root unit 0
// for everything else (embedding, final norm, head).
std::size_t sharded_unit_of(const model::CausalLM& model, const std::string& name);

// A parameter handed to the component: the module's tensor, its unit, and the box of the global
// parameter it holds (whole under the sharded engines; a tensor-parallel slice under megatron).
struct DataParallelParameter {
  std::string name;
  at::Tensor tensor;
  std::size_t unit = 0;
  TensorBox box;
};

// A frozen tensor handed to the component as raw bytes (a 4-bit weight's packed codes or block
// scales): contiguous, the only tensor over its storage, and equal on every rank.
struct DataParallelBytes {
  std::string name;
  at::Tensor tensor;
  std::size_t unit = 0;
};

class ShardedDataParallel final : public model::LayerHooks {
 public:
  // Shards over `shard`, replicates over `replicate` (both outlive this object).
  ShardedDataParallel(ShardingPlan plan, Communicator& shard, Communicator& replicate);
  ~ShardedDataParallel() override;
  ShardedDataParallel(const ShardedDataParallel&) = delete;
  ShardedDataParallel& operator=(const ShardedDataParallel&) = delete;

  // Takes charge of `params` (at least one; trained ones, and with shard_parameters any frozen
  // ones to shard too) and sets `model`'s layer hooks. Each shard is read from `weights` (whole
  // parameters only) or else copied from the tensor, which is first broadcast from rank 0 of
  // both groups when `broadcast` (parameters equal by construction made so). `bytes` are kept as
  // a share of each unit's bytes with shard_parameters (their tensors then hold memory only while
  // gathered), else left alone. Collective.
  void prepare(model::CausalLM& model, std::vector<DataParallelParameter> params,
               const model::WeightSource* weights, bool broadcast, std::vector<DataParallelBytes> bytes = {});

  // Before the first forward of a step's micro-batches run one after another: `sync` is true for
  // the last, whose backward completes the step's gradients.
  void begin_micro_batch(bool sync);
  // A step whose backward passes interleave with other forwards (pipeline schedules): every
  // parameter's gradient arrives in `passes` backward passes; the last completes the step.
  void expect_backwards(int passes);
  // Waits for (or gathers) the root unit's parameters and prefetches the first layer's: before
  // a forward, and before a backward that other forwards may have preceded.
  void gather_root();
  // Reduces what is still unreduced, sums over the replicas, and sets each piece's gradient.
  void finish_gradients();
  // After the optimizer step: gathers the updated shards (ZeRO-1/2; with shard_parameters the
  // next forward does).
  void parameters_updated();

  const ShardingPlan& plan() const { return plan_; }
  // This rank's shards (views of the units' masters), their names and boxes, and for each the
  // position of its parameter in prepare's `params`.
  const std::vector<at::Tensor>& pieces() const { return pieces_; }
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<TensorBox>& boxes() const { return boxes_; }
  const std::vector<std::size_t>& piece_params() const { return piece_params_; }
  // Bytes of whole (gathered) parameter storage held now, and, per layer, right after that
  // layer's forward (measured on the parameters' and frozen bytes' storage; for tests and the summary).
  std::int64_t gathered_bytes() const;
  // This rank's share of the frozen bytes, summed over the units (0 unless they are sharded).
  std::int64_t frozen_byte_shards() const;
  // Bytes of this rank's shards of the parameters (what the memory estimate's weights count).
  std::int64_t shard_bytes_held() const;
  const std::vector<std::int64_t>& bytes_after_layer_forward() const { return after_forward_; }
  // Unsharded bytes of the largest unit in the compute dtype.
  std::int64_t largest_unit_bytes() const;

 private:
  struct Unit;
  class GradReadyHook;
  class HeadReadyHook;

  void before_layer(std::int64_t index) override;
  void after_layer(std::int64_t index, const at::Tensor& output) override;
  void build_units(model::CausalLM& model, const std::vector<DataParallelParameter>& given, bool broadcast);
  // shard_parameters: each unit's frozen bytes cut into this rank's share, their tensors freed.
  void shard_bytes(const std::vector<DataParallelBytes>& bytes);
  // This rank's shard of the unit's parameter at position `i`, a view of its master (or of its
  // frozen master).
  at::Tensor master_view(const Unit& u, std::size_t i) const;
  // This rank's shard of the whole unit in `dtype`, cut as its layout (a split unit's two masters).
  at::Tensor assembled_shard(const Unit& u, at::ScalarType dtype) const;
  void launch_gather(Unit& u);
  void finish_gather(Unit& u);
  void ensure_gathered(Unit& u);
  void prefetch(std::size_t unit);
  void free_parameters(Unit& u);
  void on_gradient_ready(std::size_t param);
  // split_embedding_gradient: the tied head's leaf and the model's sparse lookup.
  void split_embedding(model::CausalLM& model);
  // The embedding's sparse gradient rows: every rank's gathered, this rank's added to its shard.
  void reduce_embedding_rows();
  // The tensor whose gradient the reduce-scatter takes for parameter `param`: the parameter, or
  // for the split embedding the tied head (undefined when untied: its rows come sparse).
  at::Tensor& dense_owner(std::size_t param);
  // The embedding's position among its unit's trained parameters.
  std::size_t embedding_slot(const Unit& u) const;
  void launch_reduce(Unit& u);
  // The dtype a unit's gradients travel in: their own 16-bit dtype where the communicator sums
  // 16-bit pieces in fp32 (the same sums, half the bytes), else fp32.
  at::ScalarType wire_dtype(Unit& u);
  void finish_reduce(Unit& u);
  void finish_all_reduces();
  void open_step();
  // On the compute device: `host` itself, or with offload a copy of it (in `dtype`).
  at::Tensor to_device(const at::Tensor& host, at::ScalarType dtype) const;

  ShardingPlan plan_;
  Communicator& shard_comm_;
  Communicator& replicate_comm_;
  std::vector<at::Tensor> params_;     // the parameters (whole boxes, or empty when freed)
  const model::WeightSource* weights_ = nullptr;  // during prepare: where shards are read
  std::vector<Shape> shapes_;          // the boxes' shapes
  std::vector<std::size_t> unit_of_;   // per parameter
  std::vector<std::unique_ptr<Unit>> units_;  // [0] root, [1 + i] layer i (empty when not here)
  std::vector<at::Tensor> pieces_;
  std::vector<std::string> names_;
  std::vector<TensorBox> boxes_;
  std::vector<std::size_t> piece_params_;
  std::vector<std::int64_t> after_forward_;
  std::vector<model::LinearImpl*> float8_linear_;  // per parameter: its float8 linear (all-gather in e4m3)
  // split_embedding_gradient: the embedding's index in params_ (none: not split), and the tied
  // head's leaf over its storage (undefined when untied).
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::size_t embedding_ = kNone;
  at::Tensor tied_head_;
  // What every unit's reduce-scatter sends and receives from (one is in flight at a time), kept
  // across steps at the largest unit's size: fresh buffers faulted their pages in again every step
  // (at real size the root's 311 MB and each layer's, 3% of a step in page zeroing).
  at::Tensor reduce_send_, reduce_receive_;
  bool step_open_ = false;  // gradients of this step have started to arrive
};

}  // namespace lft::engine
