// Per-rank memory from the plan: the model is built on the meta device (names, shapes and roles,
// no memory), laid out as each engine lays it out, and the activations are counted per token.
#include "lft/engine/memory_estimate.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>

#include "lft/engine/megatron_plan.h"
#include "lft/engine/pipeline_schedule.h"
#include "lft/engine/shard_layout.h"
#include "lft/model/blocked_attention.h"
#include "lft/model/finetuning.h"
#include "lft/model/moe.h"
#include "lft/model/muon_matrices.h"
#include "lft/model/quantized_base.h"

namespace lft::engine {
namespace {

// The ep placement of a meta model: never exchanges anything.
class MetaExchange final : public model::ExpertExchange {
 public:
  explicit MetaExchange(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  at::Tensor exchange_counts(const at::Tensor&) const override { throw std::logic_error("meta model: no exchange"); }
  std::unique_ptr<model::RowsInFlight> post_rows(const at::Tensor&, const std::vector<std::int64_t>&,
                                                 const std::vector<std::int64_t>&) const override {
    throw std::logic_error("meta model: no exchange");
  }

 private:
  int size_;
};

// With expert parallelism, the model the engine takes: its experts out (add_expert_parallel_memory
// counts them), as ExpertParallelEngine takes them out before the engine's prepare.
// QLoRA: its 4-bit base linears out of the parameters too (add_quantized_base_memory counts them).
std::shared_ptr<model::CausalLM> meta_model(const RunPlan& run) {
  std::shared_ptr<model::CausalLM> m = create_run_model(run, at::TensorOptions().device(at::kMeta));  // the one builder
  if (run.mesh.ep > 1) model::place_model_experts(*m, std::make_shared<MetaExchange>(run.mesh.ep));
  model::plan_quantized_base(*m, run.finetuning);
  return m;
}


// Elements of the model's parameters: all of them, or those that train.
double parameter_count(const model::CausalLM& m, bool trained_only) {
  double n = 0;
  for (const auto& item : m.named_parameters())
    if (!trained_only || item.value().requires_grad()) n += static_cast<double>(item.value().numel());
  return n;
}

double element_bytes(at::ScalarType t) { return static_cast<double>(c10::elementSize(t)); }

// Parameter shapes grouped as the sharded engine groups them, by unit: [0] the root unit
// (everything that is not a decoder layer), then one per layer (empty when none of its
// parameters is counted).
enum class Counted { All, Trained, Frozen };
std::vector<std::vector<Shape>> sharding_units(const model::CausalLM& m, Counted which) {
  std::vector<std::vector<Shape>> units(static_cast<std::size_t>(m.num_layers()) + 1);
  for (const auto& item : m.named_parameters())
    if (which == Counted::All || item.value().requires_grad() == (which == Counted::Trained))
      units[sharded_unit_of(m, item.key())].push_back(item.value().sizes().vec());
  return units;
}

double numel(const std::vector<Shape>& shapes) {
  double n = 0;
  for (const Shape& s : shapes) {
    double k = 1;
    for (std::int64_t d : s) k *= static_cast<double>(d);
    n += k;
  }
  return n;
}

// The widths that activations are counted in, on one of `tp` tensor-parallel ranks: elements per
// token that the model says a layer and its head keep for backward, and the residual stream's,
// the MLP's and the vocabulary's widths for the forward's transient peak.
struct Widths {
  double layer, head, stream, ffn, vocab;
  double scores = 0;  // bytes per token a layer's blocked attention keeps (its probabilities)
};

// The probabilities the blocked attention keeps per token in a layer (on a CPU, where it serves
// the run's dtype and sequence length; not under ring attention, packed sequences' masks,
// sliding windows shorter than the sequence or soft-capping, which take other paths): the
// query heads of a tensor-parallel rank over the whole sequence (Ulysses' ranks hold heads / cp
// of cp times the tokens: as many).
double attention_score_bytes(const RunPlan& run, int tp) {
  const model::ModelConfig& c = run.model;
  const std::int64_t t = run.seq_len;
  if (!run.cpu || !model::blocked_attention_serves(run.compute, t, run.fused_attention) ||
      (run.mesh[MeshDim::CP] > 1 && run.parallel.cp_ring) || run.joined_micro_batches ||
      c.attn_logit_softcapping > 0 || (c.sliding_window > 0 && c.sliding_window < t))
    return 0;
  return static_cast<double>((c.num_attention_heads + tp - 1) / tp) *
         model::blocked_attention_saved_bytes_per_token(t, run.compute, run.fused_attention);
}

Widths model_widths(const RunPlan& run, const model::CausalLM& m, int tp, bool sequence_parallel) {
  const model::ModelConfig& c = m.config();
  return {m.layer_saved_elements_per_token(tp, sequence_parallel), m.head_saved_elements_per_token(tp),
          static_cast<double>(c.hidden_size) / (sequence_parallel ? tp : 1),
          static_cast<double>((c.intermediate_size + tp - 1) / tp), static_cast<double>((c.vocab_size + tp - 1) / tp),
          attention_score_bytes(run, tp)};
}

// Activations one micro-batch keeps through `layers` decoder layers, with the embedding's output
// (`embed`) and the head's (`head`), plus the forward's transient peak (the logits beside their
// log-softmax at the head; one MLP row elsewhere): bytes.
double activation_bytes(const RunPlan& run, double layers, const Widths& w, bool embed, bool head) {
  // Context parallelism: each rank runs its chunk of every sequence (Ulysses' whole sequences of
  // heads / cp heads hold as many elements).
  const double tokens = static_cast<double>(run.micro_batch * run.sequences_per_sample * run.seq_len) / run.mesh[MeshDim::CP];
  const double bytes = run.compute == at::kFloat ? 4.0 : 2.5;  // 16-bit projections, fp32 norms
  // With checkpointing a layer keeps its input; backward recomputes one layer at a time.
  double kept = run.gradient_checkpointing ? layers * w.stream + w.layer : layers * w.layer;
  if (embed) kept += w.stream;
  if (head) kept += w.head;
  const double transient = head ? 2 * w.vocab : w.ffn;
  const double score_layers = run.gradient_checkpointing ? std::min(layers, 1.0) : layers;
  return tokens * ((kept + transient) * bytes + score_layers * w.scores);
}

}  // namespace

std::string MemoryEstimate::str() const {
  auto mib = [](double b) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f MiB", b / (1024.0 * 1024.0));
    return std::string(text);
  };
  return mib(total()) + " per rank at the peak: weights " + mib(weights) + ", gradients " + mib(gradients) +
         ", optimizer " + mib(optimizer) + ", gathered " + mib(gathered) + ", activations " + mib(activations) +
         (buffers > 0 ? ", reduction buffers " + mib(buffers) : "") +
         (offload ? "; offload keeps the fp32 shards, gradients and optimizer in host memory: " + mib(device_total()) +
                        " on a GPU"
                  : "") +
         (mpi_staging > 0 && process > 0 ? "; MPI's reduce-scatter receive buffer " + mib(mpi_staging) : "") +
         (checkpoint_staging > 0 ? "; async_checkpoint's host copy of the state " + mib(checkpoint_staging) : "") +
         (process > 0 ? "; with the process itself (" + mib(process) + ": libraries, runtime, data) " + mib(resident()) +
                            " resident"
                      : "");
}

// QLoRA's 4-bit base and the one weight dequantized at a time for a GEMM. Whole on every rank,
// or where the engine shards parameters each rank's share of every layer's bytes, and two
// layers' bytes whole (the running layer and the prefetched one).
void add_quantized_base_memory(const RunPlan& run, MemoryEstimate& e) {
  const auto m = create_run_model(run, at::TensorOptions().device(at::kMeta));
  const model::QuantizedBaseShape q = model::plan_quantized_base(*m, run.finetuning);
  // The largest weight while it is dequantized (model/quantize_4bit.cpp): an int32 index per byte
  // beside the float32 values (6 bytes an element), then the values beside the weight in the
  // compute dtype (6 in bf16; in fp32 the values are the weight).
  e.gathered += static_cast<double>(q.largest) * 6.0;
  if (!run.parallel.sharded || !run.parallel.sharded->shard_parameters) {
    e.weights += static_cast<double>(q.totals.bytes);
    return;
  }
  const std::int64_t ranks = run.mesh[MeshDim::DPShard] * run.mesh[MeshDim::CP];
  std::int64_t largest_layer = 0;
  for (const std::int64_t bytes : q.layer_bytes) {
    e.weights += static_cast<double>((bytes + ranks - 1) / ranks);
    largest_layer = std::max(largest_layer, bytes);
  }
  e.gathered += 2.0 * static_cast<double>(largest_layer);
}

void add_muon_memory(const RunPlan& run, MemoryEstimate& e) {
  if (!run.muon || run.parallel.megatron) return;  // estimate_megatron counts its boxes'
  const auto m = create_run_model(run, at::TensorOptions().device(at::kMeta));
  // The matrices' state is cut as their shards under a sharding engine.
  const double shards = run.parallel.sharded ? run.mesh[MeshDim::DPShard] * run.mesh[MeshDim::CP] : 1;
  e.optimizer -= 4 * model::muon_matrix_elements(*m, run.muon_adapters) / shards;
}

MemoryEstimate estimate_replicated(const RunPlan& run, bool buckets) {
  const auto model = meta_model(run);
  const double p = parameter_count(*model, false), trained = parameter_count(*model, true);
  MemoryEstimate e;
  e.weights = 4 * p;
  e.gradients = 4 * trained;
  e.optimizer = 8 * trained;
  // ddp keeps a flat bucket copy of every gradient for its all-reduce; autocast keeps a 16-bit
  // copy of every weight it casts for the forward.
  e.gathered = (buckets ? 4 * trained : 0.0) + (run.compute != at::kFloat ? 2 * p : 0.0);
  e.activations = activation_bytes(run, static_cast<double>(run.model.num_hidden_layers),
                                   model_widths(run, *model, 1, false), true, true);
  e.gradients_during_forward = run.accumulation > 1;
  return e;
}

namespace {

// What ShardedDataParallel keeps for units of parameter shapes `all` (every parameter it is given)
// of which `trained` train and `frozen` do not, cut over `n` ranks: masters, gradient shards,
// AdamW's moments, the gathered units or the whole parameters, and MPI's reduce-scatter receive
// buffer. Gathered 16-bit parameters give 16-bit gradients, which MPI reduces as they are (`nccl`:
// as fp32).
MemoryEstimate sharded_terms(const std::vector<std::vector<Shape>>& all_units,
                             const std::vector<std::vector<Shape>>& trained_units,
                             const std::vector<std::vector<Shape>>& frozen_units, int n, const ShardingPlan& plan,
                             bool nccl) {
  // Sums over units of their shard and whole sizes, and the largest layer unit.
  struct Totals {
    double shard = 0, whole = 0, root = 0, largest_layer = 0;
  };
  auto totals = [&](const std::vector<std::vector<Shape>>& units) {
    Totals t;
    for (std::size_t u = 0; u < units.size(); ++u) {
      const UnitLayout layout = plan.per_parameter_cut ? per_parameter_layout(units[u], n) : flat_layout(units[u], n);
      t.shard += static_cast<double>(layout.shard_numel);
      t.whole += numel(units[u]);
      if (u > 0) t.largest_layer = std::max(t.largest_layer, numel(units[u]));
    }
    t.root = numel(units.front());
    return t;
  };
  const Totals all = totals(all_units), trained = totals(trained_units);
  // Frozen parameters are sharded with the others only when parameters are sharded.
  const Totals& kept = plan.shard_parameters ? all : trained;
  const double shard = kept.shard, whole = kept.whole, root = kept.root, largest_layer = kept.largest_layer;
  const double cb = element_bytes(plan.compute_dtype);
  // Frozen parameters' shards in a 16-bit compute dtype, apart from the fp32 masters (not with
  // offload, nor in a unit with float8 weights: ShardedDataParallel's split units). Cut as their
  // parameters are (exact for per-parameter cuts; a flat cut's pieces differ by at most a row).
  auto cut = [&](const std::vector<Shape>& shapes) {
    return static_cast<double>((plan.per_parameter_cut ? per_parameter_layout(shapes, n) : flat_layout(shapes, n)).shard_numel);
  };
  double weights = 4 * shard;
  if (plan.shard_parameters && cb < 4 && !plan.offload)
    for (std::size_t u = 0; u < all_units.size(); ++u)
      if (!frozen_units[u].empty() && (u == 0 || !plan.float8_all_gather))
        weights += 4 * (cut(trained_units[u]) - cut(all_units[u])) + cb * cut(frozen_units[u]);
  MemoryEstimate e;
  e.weights = weights;  // fp32 masters (and frozen shards)
  e.offload = plan.offload;
  e.offloaded_weights = plan.offload ? e.weights : 0.0;
  e.gradients = 4 * trained.shard;  // reduced gradient shards, summed over micro-batches
  e.optimizer = 8 * trained.whole / n;
  if (!plan.shard_parameters) e.weights += 4 * (all.whole - trained.whole);  // frozen, whole
  // A unit's whole gradients (or its reduce-scatter buffer) while backward reaches the next.
  const double wire = !nccl && plan.shard_parameters && cb < 4 ? cb : 4;
  const double unit_gradients = wire * std::max(trained.root, trained.largest_layer);
  if (plan.shard_parameters) {
    // The root unit stays gathered through the step, with the layer running and the one
    // prefetched beside it; without resharding every layer stays gathered until its backward.
    e.gathered = cb * (plan.reshard_after_forward ? root + 2 * largest_layer : whole) + unit_gradients;
  } else {
    // ZeRO-1/2: whole fp32 parameters on every rank; ZeRO-1 also keeps whole gradients over the
    // micro-batches, ZeRO-2 one unit's at a time.
    e.weights += 4 * whole;
    e.gathered = plan.reduce_during_backward ? unit_gradients : 4 * trained.whole;
  }
  // The MPI backend's reduce-scatter receives the other ranks' pieces of this rank's part.
  if (n > 1 && plan.reduce_during_backward) e.mpi_staging = unit_gradients * (n - 1) / n;
  return e;
}

// What the experts of one rank add: `all` and `trained` their shapes by unit (the layers'), kept
// whole and reduced in buckets over edp, or sharded over edp by the engine's component and plan
// (each MoE layer's experts a unit).
MemoryEstimate expert_terms(const RunPlan& run, const std::vector<std::vector<Shape>>& all,
                            const std::vector<std::vector<Shape>>& trained, const std::vector<std::vector<Shape>>& frozen,
                            int edp) {
  if (run.parallel.sharded && edp > 1) return sharded_terms(all, trained, frozen, edp, *run.parallel.sharded, run.nccl);
  double held = 0, trains = 0;
  for (const auto& unit : all) held += numel(unit);
  for (const auto& unit : trained) trains += numel(unit);
  // Whole fp32 experts with their gradients, AdamW's moments and the buckets' fp32 copy of the
  // gradients.
  MemoryEstimate e;
  e.weights = 4 * held;
  e.gradients = 4 * trains;
  e.optimizer = 8 * trains;
  e.gathered = 4 * trains;
  return e;
}

}  // namespace

void add_expert_parallel_memory(const RunPlan& run, MemoryEstimate& e) {
  if (run.mesh.ep <= 1) return;
  const auto m = create_run_model(run, at::TensorOptions().device(at::kMeta));
  const auto placed = model::place_model_experts(*m, std::make_shared<MetaExchange>(run.mesh.ep));
  const int edp = run.mesh.dp_size() * run.mesh[MeshDim::CP] / run.mesh.ep;
  // Under megatron a rank holds the experts of its stage's layers, its tp rank's box of each (as
  // estimate_megatron counts the rest): the stage that holds the most.
  const MegatronPlan* megatron = run.parallel.megatron ? &*run.parallel.megatron : nullptr;
  const int stages = megatron ? megatron->pp : 1;
  std::vector<std::vector<std::vector<Shape>>> all(static_cast<std::size_t>(stages),
                                                   std::vector<std::vector<Shape>>(static_cast<std::size_t>(m->num_layers()) + 1));
  auto trained = all, frozen = all;
  for (const auto& [name, t] : placed) {
    Shape box = t.sizes().vec();
    const model::ParameterPlacement placement = m->placement(name);
    const std::size_t unit = sharded_unit_of(*m, name);
    std::size_t stage = 0;
    if (megatron) {
      stage = static_cast<std::size_t>(stage_of_unit(*megatron, *m, placement.units.front()));
      const TpSlice slice = tp_slice(placement.tp, megatron->tp, 0);
      if (slice.dim >= 0) box[static_cast<std::size_t>(slice.dim)] = slice.count;
    }
    all[stage][unit].push_back(box);
    (t.requires_grad() ? trained : frozen)[stage][unit].push_back(box);
  }
  MemoryEstimate worst;
  for (int stage = 0; stage < stages; ++stage) {
    const auto g = static_cast<std::size_t>(stage);
    const MemoryEstimate x = expert_terms(run, all[g], trained[g], frozen[g], edp);
    if (x.total() > worst.total()) worst = x;
  }
  e.weights += worst.weights;
  e.offloaded_weights += worst.offloaded_weights;
  e.gradients += worst.gradients;
  e.optimizer += worst.optimizer;
  e.gathered += worst.gathered;
  e.mpi_staging = std::max(e.mpi_staging, worst.mpi_staging);
}

MemoryEstimate estimate_sharded(const RunPlan& run, const ShardingPlan& plan) {
  const int n = run.mesh[MeshDim::DPShard] * run.mesh[MeshDim::CP];  // shards over dp_shard x cp
  const auto model = meta_model(run);
  MemoryEstimate e = sharded_terms(sharding_units(*model, Counted::All), sharding_units(*model, Counted::Trained),
                                   sharding_units(*model, Counted::Frozen), n, plan, run.nccl);
  e.activations = activation_bytes(run, static_cast<double>(run.model.num_hidden_layers),
                                   model_widths(run, *model, 1, false), true, true);
  return e;
}

MemoryEstimate estimate_megatron(const RunPlan& run) {
  const auto m = meta_model(run);
  const MegatronPlan& plan = *run.parallel.megatron;
  const int dp = run.mesh[MeshDim::DPReplicate] * run.mesh[MeshDim::DPShard] * run.mesh[MeshDim::CP];
  // The sharded component's group: every dp rank (use_distributed_optimizer) or dp_shard x cp.
  const int shards = plan.distributed_optimizer ? dp : run.mesh[MeshDim::DPShard] * run.mesh[MeshDim::CP];
  // The plan's policy (with offload where asked); without a sharding strategy its defaults.
  const ShardingPlan sharding = run.parallel.sharded ? *run.parallel.sharded : megatron_sharding_plan(plan, run.compute);
  const Widths widths = model_widths(run, *m, plan.tp, plan.sequence_parallel);
  // Chunks whose activations a stage holds at once, from the schedule itself.
  std::vector<int> live(static_cast<std::size_t>(plan.pp), 1);
  if (plan.pp > 1)
    live = simulate_pipeline(plan.schedule, plan.pp, plan.micro_batches, plan.virtual_stages, 1.0, 2.0).peak_live;
  MemoryEstimate worst;
  for (int stage = 0; stage < plan.pp; ++stage) {
    auto runs_unit = [&](std::int64_t unit) { return stage_of_unit(plan, *m, unit) == stage; };
    double local = 0, trained = 0, layers = 0, muon = 0;
    // The trained boxes by unit, as the sharded component groups them.
    std::vector<std::vector<Shape>> units(static_cast<std::size_t>(m->num_layers()) + 1);
    for (const auto& item : m->named_parameters()) {
      const model::ParameterPlacement placement = m->placement(item.key());
      if (std::none_of(placement.units.begin(), placement.units.end(), runs_unit)) continue;
      const TpSlice slice = tp_slice(placement.tp, plan.tp, 0);
      Shape box = item.value().sizes().vec();
      if (slice.dim >= 0) box[static_cast<std::size_t>(slice.dim)] = slice.count;
      const double elements = numel({box});
      local += elements;
      if (!item.value().requires_grad()) continue;
      trained += elements;
      if (run.muon && model::muon_matrix(item.key(), item.value().sizes().vec(), run.muon_adapters)) muon += elements;
      units[sharded_unit_of(*m, item.key())].push_back(box);
    }
    for (std::int64_t layer = 0; layer < run.model.num_hidden_layers; ++layer)
      if (runs_unit(model::CausalLM::layer_unit(layer))) layers += 1;
    MemoryEstimate e;
    if (plan.dp_sharding == DpSharding::NoShard) {
      e.weights = 4 * local;
      e.gradients = 4 * trained;
      e.optimizer = 8 * trained;
      // GradientBuckets' fp32 copy of every gradient, held through the step (as ddp's).
      if (dp > 1) e.gathered = 4 * trained;
    } else {
      e = sharded_terms(units, units, std::vector<std::vector<Shape>>(units.size()), shards, sharding, run.nccl);
      e.weights += 4 * (local - trained);  // frozen boxes stay whole
    }
    // Muon keeps one fp32 tensor (its momentum) of a matrix where AdamW keeps two.
    e.optimizer -= 4 * muon / (plan.dp_sharding == DpSharding::NoShard ? 1 : shards);
    // Autocast's 16-bit copies of the fp32 weights it casts (gathered parameters are already in
    // the compute dtype).
    if (run.compute != at::kFloat) e.gathered += 2 * (sharding.shard_parameters ? local - trained : local);
    const bool first = stage == 0, last = stage == plan.pp - 1;
    const int in_flight = live[static_cast<std::size_t>(stage)];
    e.activations = in_flight * activation_bytes(run, layers / plan.virtual_stages, widths, first, last);
    // A stage whose every micro-batch is in flight at once runs its first backward (and makes
    // its gradients) only after the last forward.
    e.gradients_during_forward = plan.micro_batches * plan.virtual_stages > in_flight;
    if (e.total() > worst.total()) worst = e;
  }
  return worst;
}

}  // namespace lft::engine
