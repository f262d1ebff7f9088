// The run, resolved once in the session from the config, the model folder and the DeepSpeed JSON:
// the model, the batch arithmetic, the precision, the parallel plan and a per-rank memory
// estimate that knows the engine's sharding. The trainer, the engines and `lftrain --check` read
// it; none re-derives it. resolve_run_plan and finetuning_spec are its decoders (run_config.cpp):
// the only functions here that read the configuration.
#pragma once

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "lft/config/config.h"
#include "lft/config/deepspeed.h"
#include "lft/engine/parallel_plan.h"
#include "lft/mesh/device_mesh.h"
#include "lft/model/finetuning.h"
#include "lft/model/model_config.h"

namespace lft::engine {

// Tensor bytes one rank holds at its peak, by what they are.
struct MemoryEstimate {
  double weights = 0;      // the parameters this rank keeps whole or as shards (fp32 masters)
  double gradients = 0;    // their gradients, and the engine's gradient buffers
  double optimizer = 0;    // AdamW's two moments of what this rank updates
  double gathered = 0;     // whole parameters gathered for compute, copies cast for compute, and
                           // gradient buffers kept for communication (ddp's buckets)
  double activations = 0;  // what backward keeps of the forward, and the forward's working set
  double buffers = 0;      // gradients flattened for a reduction after backward, when activations are gone
  // Whether the gradients of earlier micro-batches are held while a forward's activations are
  // (gradient accumulation, or a pipeline with more micro-batches than it keeps in flight).
  bool gradients_during_forward = true;
  // Offload (fsdp2 offload_params, DeepSpeed's offload keys): the fp32 masters among `weights`
  // (these bytes), the reduced gradient shards and AdamW's state live in host memory.
  bool offload = false;
  double offloaded_weights = 0;
  // The process itself beside its tensors (libraries, runtime, tokenized data): its resident bytes
  // less its CPU tensors when the plan is made (CPU runs; 0 when not measured).
  double process = 0;
  // The MPI backend's reduce-scatter receives the other ranks' pieces of this rank's part of its
  // input: (n-1)/n of the largest reduce-scatter of a CPU run (a unit's fp32 gradients).
  double mpi_staging = 0;
  // async_checkpoint: the host copies of the weights and optimizer state a background save writes
  // from (kept from one save to the next).
  double checkpoint_staging = 0;
  double total() const {
    const double forward = activations + (gradients_during_forward ? gradients : 0.0);
    return weights + optimizer + gathered + std::max(forward, gradients + buffers);
  }
  // What stays in the compute device's memory: total() less what offload keeps on the host.
  double device_total() const {
    if (!offload) return total();
    MemoryEstimate device = *this;
    device.offload = false;
    device.weights -= offloaded_weights;
    device.gradients = 0;
    device.optimizer = 0;
    return device.total();
  }
  // Host memory a CPU run's rank holds at its peak: its tensors and the process itself.
  double resident() const { return total() + process + mpi_staging + checkpoint_staging; }
  std::string str() const;  // "41.2 MiB per rank: weights 3.1 MiB, ..."
};

struct RunPlan {
  model::ModelConfig model;
  MeshShape mesh;
  std::int64_t micro_batch = 1;   // samples per rank per micro-batch
  std::int64_t sequences_per_sample = 1;  // 2 with stage dpo: a pair's chosen and rejected answers
  std::int64_t accumulation = 1;  // micro-batches per step
  std::int64_t global_batch = 1;  // samples (sequences, or pairs) per step over every data-parallel rank
  std::int64_t seq_len = 1;       // cutoff_len
  at::ScalarType compute = at::kFloat;  // bf16 / fp16: autocast over fp32 weights
  bool gradient_checkpointing = false;
  bool fp8 = false;                                  // float8 linears (float8.h)
  bool muon = false;                                 // use_muon: Muon's matrices (muon_matrices.h)
  bool muon_adapters = true;                         //   LoRA's factors among them
  model::FinetuningSpec finetuning;                  // which parameters train
  std::string adapter_folder;                        // adapter_name_or_path ("" when none)
  std::uint64_t seed = 0;                            // the initialisation's (and LoRA's) seed
  std::optional<config::DeepSpeedConfig> deepspeed;  // distributed = "deepspeed"
  ParallelPlan parallel;                             // the engine preset and its layout (parallel_plan.h)
  bool dynamic_batching = false;                     // batching_strategy = "dynamic_batching" or "dynamic_padding_free"
  bool joined_micro_batches = false;                 // padding_free, dynamic_padding_free: one row a micro-batch
  std::int64_t max_steps = -1;                       // the run's length, for the start-up log
  double epochs = 0;                                 //   (num_train_epochs when max_steps <= 0)
  // The data-parallel collectives run over NCCL (a GPU per rank), which reduces 16-bit gradients
  // as fp32; else over MPI, whose reduce-scatter carries them in 16 bits (Communicator).
  bool nccl = false;
  // The ranks compute on CPUs (not GPUs); fused_kernels has "attention" and the CPU runs the
  // kernels. On a CPU the blocked attention keeps its probabilities for backward (with the fused
  // softmax also in fp32; model/blocked_attention.h), which the estimate counts.
  bool cpu = true;
  bool fused_attention = false;
  MemoryEstimate memory;                             // from the engine (EngineInfo::estimate_memory)
};

// The finetuning_* keys as a spec: list values split at commas as LlamaFactory's, lora_alpha
// 2 x lora_rank by default, and with adapter_name_or_path the adapter's own rank, alpha, targets
// and modules_to_save (a key that contradicts them is a ConfigError at that key).
model::FinetuningSpec finetuning_spec(const config::Config& cfg);

// The model of `plan` with its adapters and frozen parameters, built with `options`. The plan's
// module names were checked when it was resolved (resolve_run_plan builds it on the meta device).
std::shared_ptr<model::CausalLM> create_run_model(const RunPlan& plan, const c10::TensorOptions& options);

// create_run_model on the meta device, a module name the model lacks a ConfigError at its key.
std::shared_ptr<model::CausalLM> checked_meta_model(const config::Config& cfg, const RunPlan& plan);

// The fused_kernels key as a mask (model/fused.h); a name that is not a kernel is a ConfigError.
unsigned fused_kernels_of(const config::Config& cfg);

// Resolves the plan of `cfg` on `mesh` (collective-free; every rank reaches the same plan).
// Throws config::ConfigError for a model or DeepSpeed file that does not fit.
// `cpu`: the ranks compute on CPUs (false: on GPUs).
RunPlan resolve_run_plan(const config::Config& cfg, const MeshShape& mesh, bool nccl = false, bool cpu = true);

// A ConfigError when the per-rank estimate of `plan` exceeds what `ranks_on_node` ranks can have
// of `node_bytes` of memory: the run could not fit, so it does not start.
void check_fits_in_memory(const RunPlan& plan, int ranks_on_node, double node_bytes);

// Batch sizes, steps, model, precision and the memory estimate, for the start-up log.
std::string plan_report(const RunPlan& plan);

}  // namespace lft::engine
