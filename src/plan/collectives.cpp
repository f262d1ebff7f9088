#include "collectives.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "lft/engine/dp_sharding.h"

namespace lft::plan::detail {
namespace {

Collective make(const std::string& what, const std::string& group, CollKind kind, double payload_bytes, double calls,
                When when, double unhidden_calls = 0) {
  Collective c;
  c.what = what;
  c.group = group;
  c.kind = kind;
  c.payload_bytes = payload_bytes;
  c.calls = calls;
  c.when = when;
  c.unhidden_calls = unhidden_calls;
  return c;
}

// A group as the mesh lays it out: ranks `stride` apart, `size` of them (device_mesh.h: tp
// fastest, then cp, dp_shard, dp_replicate, pp; "dp" is dp_replicate x dp_shard flattened, a
// "_cp" suffix adds the cp ranks, which the data-parallel engines shard and reduce over too).
struct GroupShape {
  int stride = 1;
  int size = 1;
};

GroupShape group_shape(const MeshShape& mesh, const std::string& group) {
  const int tp = mesh[MeshDim::TP], cp = mesh[MeshDim::CP], dps = mesh[MeshDim::DPShard],
            dpr = mesh[MeshDim::DPReplicate];
  if (group == "tp") return {1, tp};
  if (group == "cp") return {tp, cp};
  if (group == "dp_shard") return {tp * cp, dps};
  if (group == "dp_shard_cp") return {tp, dps * cp};
  if (group == "dp_replicate") return {tp * cp * dps, dpr};
  if (group == "dp_replicate_cp") return {tp, dpr * cp};
  if (group == "dp") return {tp * cp, dpr * dps};
  if (group == "dp_cp") return {tp, dpr * dps * cp};
  // Expert parallelism borrows dp x cp (ordered as dp_cp): ep consecutive ranks of it, and the
  // ranks ep apart (device_mesh.h).
  if (group == "ep") return {tp, mesh.ep};
  if (group == "edp") return {tp * mesh.ep, dpr * dps * cp / mesh.ep};
  return {tp * cp * dps * dpr, mesh[MeshDim::PP]};  // "pp"
}

// A data-parallel group's name, with the cp ranks when there are some.
std::string with_cp(const Layout& l, const std::string& group) {
  return l.mesh[MeshDim::CP] > 1 ? group + "_cp" : group;
}

// The ranks a sharded engine splits its state over: dp_shard x cp.
int shard_ranks(const Layout& l) { return l.mesh[MeshDim::DPShard] * l.mesh[MeshDim::CP]; }

// Where a sharded data parallelism runs: the parameters it holds (the whole model, or megatron's
// stage boxes), the group it shards over and its size.
struct ShardedOver {
  ModelShape model;
  std::string group;
  int ranks = 1;
  bool replicated = true;  // its shards all-reduced across dp_replicate (HSDP); the experts' are not
};

ShardedOver whole_model_over_dp_shard(const StepInput& in) {
  return {in.model, with_cp(in.layout, "dp_shard"), shard_ranks(in.layout)};
}

// The root unit's gradients. Split (the sharded engines; dp_sharding.h's rule): the head's come
// first in backward, so the root's dense part is reduce-scattered under the layers' backward,
// and the embedding's looked-up rows, gathered from every rank when the lookup's backward ends,
// are what stays exposed. Otherwise the whole root is reduce-scattered after the last layer.
void reduce_root(const StepInput& in, const ShardedOver& s, double reductions, When during, std::vector<Collective>& out) {
  const ModelShape& m = s.model;
  if (m.root_trained <= 0) return;
  const Layout& l = in.layout;
  const double tokens = static_cast<double>(l.mesh[MeshDim::DPShard] * l.micro_batch * in.seq_len);
  const bool split = l.algorithm != Algorithm::Megatron && m.embedding_trained &&
                     engine::split_embedding_gradient(tokens, static_cast<double>(m.vocab), static_cast<double>(m.hidden),
                                                      m.tied_embedding, l.engine == engine::EnginePreset::Fsdp2);
  if (!split) {
    out.push_back(make("reduce-scatter the root unit's gradients", s.group, CollKind::ReduceScatter, 4 * m.root_trained,
                       reductions, When::Exposed));
    return;
  }
  const double table = static_cast<double>(m.vocab * m.hidden);
  const double dense = m.root_trained - (m.tied_embedding ? 0 : table);
  if (dense > 0)
    out.push_back(make("reduce-scatter the root unit's gradients (the head's first in backward)", s.group,
                       CollKind::ReduceScatter, 4 * dense, reductions, during));
  out.push_back(make("all-gather the embedding's looked-up gradient rows", s.group, CollKind::AllGather,
                     tokens * (8 + 4 * static_cast<double>(m.hidden)) + 8 * s.ranks, static_cast<double>(l.accumulation),
                     When::Exposed));
}

// HSDP: the gradient shards all-reduced across the replicas once per step, a unit at a time.
void replica_all_reduce(const StepInput& in, const ShardedOver& s, std::vector<Collective>& out) {
  const double layers = static_cast<double>(std::max<std::int64_t>(1, s.model.layers));
  if (s.replicated && in.layout.mesh[MeshDim::DPReplicate] > 1 && s.model.trained > 0)
    out.push_back(make("all-reduce the gradient shards across replicas (HSDP)", "dp_replicate", CollKind::AllReduce,
                       4 * s.model.trained / s.ranks / (layers + 1), layers + 1, When::Exposed));
}

// The fully sharded engines (fsdp2, fsdp, ZeRO-3; megatron's optim_grads_params): every
// micro-batch gathers the root unit once and each layer before its forward (and again before its
// backward when it was resharded), and reduce-scatters each unit's gradients when the unit's last
// one is ready; HSDP then all-reduces the shards across replicas once per step.
void fully_sharded(const StepInput& in, const ShardedOver& s, std::vector<Collective>& out) {
  const Layout& l = in.layout;
  const ModelShape& m = s.model;
  const double mb = static_cast<double>(l.accumulation),
               layers = static_cast<double>(std::max<std::int64_t>(1, m.layers));
  const double cb = in.compute_bytes;
  const double layer_params = (m.params - m.root_params) / layers,
               layer_trained = (m.trained - m.root_trained) / layers;
  if (s.ranks > 1) {
    if (m.root_params > 0)
      out.push_back(make("all-gather the root unit (embedding, norm, head)", s.group, CollKind::AllGather,
                         cb * m.root_params, mb, When::Exposed));
    out.push_back(make("all-gather each layer before its forward", s.group, CollKind::AllGather, cb * layer_params,
                       mb * layers, When::DuringForward, mb));
    if (l.reshard_after_forward)
      out.push_back(make("all-gather each layer again before its backward", s.group, CollKind::AllGather,
                         cb * layer_params, mb * layers, When::DuringBackward, mb));
    if (layer_trained > 0)
      out.push_back(make("reduce-scatter each layer's gradients", s.group, CollKind::ReduceScatter,
                         4 * layer_trained, mb * layers, When::DuringBackward, mb));
    reduce_root(in, s, mb, When::DuringBackward, out);
  }
  replica_all_reduce(in, s, out);
}

// ZeRO-1 and -2: whole fp32 parameters on every rank, each unit's gradients reduce-scattered when
// its last one is ready (ZeRO-2 in every micro-batch's backward, ZeRO-1 in the last one's), the
// updated shards all-gathered under the next forward: the root's waited for first, the first
// layer's launched beside it, each later one while the layer before it runs.
void sharded_optimizer(const StepInput& in, const ShardedOver& s, bool per_micro_batch, std::vector<Collective>& out) {
  const Layout& l = in.layout;
  const ModelShape& m = s.model;
  if (s.ranks == 1 || m.trained == 0) return;
  const double mb = static_cast<double>(l.accumulation),
               layers = static_cast<double>(std::max<std::int64_t>(1, m.layers));
  const double layer_trained = (m.trained - m.root_trained) / layers;
  const double reductions = per_micro_batch ? mb : 1;
  if (layer_trained > 0)
    out.push_back(make("reduce-scatter each layer's gradients", s.group, CollKind::ReduceScatter, 4 * layer_trained,
                       reductions * layers, per_micro_batch ? When::DuringBackward : When::DuringLastBackward,
                       reductions));
  if (m.root_trained > 0) {
    reduce_root(in, s, reductions, per_micro_batch ? When::DuringBackward : When::DuringLastBackward, out);
    out.push_back(make("all-gather the root unit's updated fp32 shards", s.group, CollKind::AllGather,
                       4 * m.root_trained, 1, When::Exposed));
  }
  if (layer_trained > 0)
    out.push_back(make("all-gather each layer's updated fp32 shards", s.group, CollKind::AllGather,
                       4 * layer_trained, layers, When::DuringForward, 1));
}

// ddp's (and megatron's no_shard) all-reduce of `trained` fp32 elements over dp x cp in buckets:
// one bucket's all-reduce starts when its gradients are ready; only the last micro-batch syncs.
void bucketed_all_reduce(const StepInput& in, double trained, std::vector<Collective>& out) {
  const Layout& l = in.layout;
  if (l.mesh.dp_size() * l.mesh[MeshDim::CP] == 1 || trained == 0) return;
  const double bytes = 4 * trained;
  const double calls = std::max(1.0, std::ceil(bytes / in.ddp_bucket_bytes));
  out.push_back(make("all-reduce the gradients in buckets", with_cp(l, "dp"), CollKind::AllReduce, bytes / calls, calls,
                     When::DuringLastBackward, 1));
}

// Megatron's data parallelism over its stage boxes: the bucketed all-reduce during the last
// micro-batch's backward (as ddp's); the distributed optimizer, ZeRO-1 over every dp rank; or a
// sharding strategy over dp_shard x cp (HSDP across dp_replicate).
void megatron_data_parallel(const StepInput& in, std::vector<Collective>& out) {
  const Layout& l = in.layout;
  const ModelShape& box = in.stage_box;
  if (box.trained == 0) return;
  const int dp = l.mesh.dp_size() * l.mesh[MeshDim::CP];
  if (l.distributed_optimizer) return sharded_optimizer(in, {box, with_cp(l, "dp"), dp}, false, out);
  const ShardedOver over_shards{box, with_cp(l, "dp_shard"), shard_ranks(l)};
  switch (l.dp_sharding) {
    case engine::DpSharding::NoShard:
      return bucketed_all_reduce(in, box.trained, out);
    case engine::DpSharding::Optim:
    case engine::DpSharding::OptimGrads:
      sharded_optimizer(in, over_shards, l.dp_sharding == engine::DpSharding::OptimGrads, out);
      return replica_all_reduce(in, over_shards, out);
    case engine::DpSharding::OptimGradsParams:
      return fully_sharded(in, over_shards, out);
  }
}

// Megatron: its data parallelism, and after the last backward the sequence-parallel norms'
// gradients over tp.
void megatron_step(const StepInput& in, std::vector<Collective>& out) {
  const Layout& l = in.layout;
  megatron_data_parallel(in, out);
  if (l.sequence_parallel && l.mesh[MeshDim::TP] > 1) {
    std::int64_t most = in.model.layers;
    if (!in.stage_layers.empty()) most = *std::max_element(in.stage_layers.begin(), in.stage_layers.end());
    out.push_back(make("all-reduce the sequence-parallel norms' gradients", "tp", CollKind::AllReduce,
                       4.0 * static_cast<double>(in.model.hidden) * static_cast<double>(2 * most + 1), 1,
                       When::Exposed));
  }
}

}  // namespace

double chunk_tokens(const StepInput& in) {
  const std::int64_t cp = in.layout.mesh[MeshDim::CP];
  return static_cast<double>((in.seq_len + cp - 1) / cp);
}

namespace {

// With expert parallelism the engine takes every parameter but the routed experts; each rank holds
// its experts (its tp slice of them and its stage's layers under megatron), and the ranks that hold
// the same ones (edp) reduce their gradients: in buckets once per step when the engine replicates,
// else sharded over edp as the engine shards the rest (each MoE layer's experts a unit of their own,
// no root, no replicas: ExpertParallelEngine).
void expert_data_parallel(const StepInput& in, std::vector<Collective>& out) {
  const Layout& l = in.layout;
  const ModelShape& m = in.model;
  const int edp = l.mesh.dp_size() * l.mesh[MeshDim::CP] / l.mesh.ep;
  if (edp <= 1 || m.expert_trained <= 0) return;
  const bool megatron = l.algorithm == Algorithm::Megatron;
  const double cut = static_cast<double>(l.mesh.ep) * (megatron ? l.mesh[MeshDim::TP] * l.mesh[MeshDim::PP] : 1);
  const bool sharded = megatron ? l.dp_sharding != engine::DpSharding::NoShard : l.algorithm != Algorithm::Replicated;
  if (!sharded) {
    const double bytes = 4 * m.expert_trained / cut;
    const double calls = std::max(1.0, std::ceil(bytes / in.ddp_bucket_bytes));
    out.push_back(make("all-reduce the experts' gradients in buckets", "edp", CollKind::AllReduce, bytes / calls, calls,
                       When::DuringLastBackward, 1));
    return;
  }
  ShardedOver experts{ModelShape{}, "edp", edp, false};
  experts.model.params = m.expert_params / cut;
  experts.model.trained = m.expert_trained / cut;
  experts.model.layers = std::max<std::int64_t>(1, m.moe_layers / (megatron ? l.mesh[MeshDim::PP] : 1));
  const engine::DpSharding policy =
      megatron ? l.dp_sharding
               : (l.algorithm == Algorithm::ShardedOptimizer   ? engine::DpSharding::Optim
                  : l.algorithm == Algorithm::ShardedGradients ? engine::DpSharding::OptimGrads
                                                               : engine::DpSharding::OptimGradsParams);
  if (policy == engine::DpSharding::OptimGradsParams) fully_sharded(in, experts, out);
  else sharded_optimizer(in, experts, policy == engine::DpSharding::OptimGrads, out);
}

}  // namespace

std::vector<Collective> data_parallel_collectives(const StepInput& given) {
  StepInput in = given;
  std::vector<Collective> out;
  if (in.layout.mesh.ep > 1 && in.model.expert_params > 0) {
    expert_data_parallel(in, out);
    in.model.params -= in.model.expert_params;
    in.model.trained -= in.model.expert_trained;
    // Megatron's stage box loses its share of them (tp rank 0's boxes of its stage's layers).
    if (in.layout.algorithm == Algorithm::Megatron) {
      const double share = static_cast<double>(in.layout.mesh[MeshDim::TP] * in.layout.mesh[MeshDim::PP]);
      in.stage_box.params -= in.model.expert_params / share;
      in.stage_box.trained -= in.model.expert_trained / share;
    }
  }
  const Layout& l = in.layout;
  const ModelShape& m = in.model;
  switch (l.algorithm) {
    case Algorithm::Single:
      break;
    case Algorithm::Replicated:
      bucketed_all_reduce(in, m.trained, out);
      break;
    case Algorithm::FullyShardedData:
      fully_sharded(in, whole_model_over_dp_shard(in), out);
      break;
    case Algorithm::ShardedOptimizer:
      sharded_optimizer(in, whole_model_over_dp_shard(in), false, out);
      break;
    case Algorithm::ShardedGradients:
      sharded_optimizer(in, whole_model_over_dp_shard(in), true, out);
      break;
    case Algorithm::Megatron:
      megatron_step(in, out);
      break;
  }
  return out;
}

std::vector<Collective> expert_parallel_collectives(const StepInput& in, std::int64_t layers) {
  const Layout& l = in.layout;
  const ModelShape& m = in.model;
  std::vector<Collective> out;
  const int ep = l.mesh.ep;
  if (ep <= 1 || m.moe_layers == 0) return out;
  // This stage's MoE layers (a pipeline stage runs its share of them).
  const double moe = static_cast<double>(m.moe_layers) * static_cast<double>(layers) /
                     static_cast<double>(std::max<std::int64_t>(1, m.layers));
  const double rows = static_cast<double>(l.micro_batch) * chunk_tokens(in) * static_cast<double>(m.experts_per_token);
  // Routing spread evenly: each of the ep - 1 other ranks gets rows / ep of them, in one uneven
  // all-to-all of the rank's routed rows; the outputs come back the same way, and backward
  // exchanges both again (checkpointing recomputes the forward's two inside the backward).
  const double exchanged = rows * static_cast<double>(m.hidden) * in.compute_bytes;
  const double recompute = l.checkpointing ? 1 : 0;
  out.push_back(make("all-to-all the routed rows to their experts' ranks and the outputs back", "ep",
                     CollKind::AllToAll, exchanged, moe * 2, When::ForwardPath));
  out.push_back(make("all-to-all the rows' and outputs' gradients back (and the recomputed forward's)", "ep",
                     CollKind::AllToAll, exchanged, moe * 2 * (1 + recompute), When::BackwardPath));
  out.push_back(make("all-to-all the rows' counts per expert", "ep", CollKind::AllToAll,
                     8.0 * static_cast<double>(m.experts), moe * (1 + recompute), When::ForwardPath));
  return out;
}

// Per micro-batch, X = [micro, seq, hidden] values. The model's forward calls `enter` before its
// column-parallel projections (its input: the fp32 norm output) and `exit` after the row-parallel
// one (its input: the 16-bit matmul output under autocast). Without sequence parallel, exit is an
// all-reduce forward and enter an all-reduce backward; with it, enter is an all-gather forward
// (reduce-scatter backward) and exit a reduce-scatter forward (all-gather backward). Checkpointing
// runs each layer's forward, and so its collectives, again in the backward.
std::vector<Collective> tensor_parallel_collectives(const StepInput& in, std::int64_t layers, bool first, bool last) {
  const Layout& l = in.layout;
  std::vector<Collective> out;
  if (l.algorithm != Algorithm::Megatron || l.mesh[MeshDim::TP] == 1) return out;
  const double x = static_cast<double>(l.micro_batch) * chunk_tokens(in) * static_cast<double>(in.model.hidden);
  const double fp32 = 4, moved16 = in.compute_bytes;
  const double reduced16 = in.cluster.reductions_upcast() ? 4.0 : moved16;
  const double n2 = 2.0 * static_cast<double>(layers);
  const double head = last ? 1 : 0;
  const auto fwd = When::ForwardPath, bwd = When::BackwardPath;
  const CollKind ag = CollKind::AllGather, rs = CollKind::ReduceScatter, ar = CollKind::AllReduce;
  if (!l.sequence_parallel) {
    out.push_back(make("all-reduce attention and MLP outputs", "tp", ar, x * reduced16, n2, fwd));
    if (first) out.push_back(make("all-reduce the vocab-parallel embedding", "tp", ar, x * fp32, 1, fwd));
    out.push_back(make("all-reduce the input gradients of column-parallel layers", "tp", ar, x * fp32, n2 + head, bwd));
    if (l.checkpointing)
      out.push_back(make("all-reduce recomputed attention and MLP outputs", "tp", ar, x * reduced16, n2, bwd));
  } else {
    out.push_back(make("all-gather normed inputs along the sequence", "tp", ag, x * fp32, n2 + head, fwd));
    out.push_back(make("reduce-scatter attention and MLP outputs", "tp", rs, x * reduced16, n2, fwd));
    if (first) out.push_back(make("reduce-scatter the vocab-parallel embedding", "tp", rs, x * fp32, 1, fwd));
    out.push_back(
        make("reduce-scatter the input gradients of column-parallel layers", "tp", rs, x * fp32, n2 + head, bwd));
    out.push_back(make("all-gather the output gradients of row-parallel layers", "tp", ag, x * moved16, n2, bwd));
    if (first) out.push_back(make("all-gather the embedding's output gradient", "tp", ag, x * fp32, 1, bwd));
    if (l.checkpointing) {
      out.push_back(make("all-gather recomputed normed inputs", "tp", ag, x * fp32, n2, bwd));
      out.push_back(make("reduce-scatter recomputed outputs", "tp", rs, x * reduced16, n2, bwd));
    }
  }
  if (last) {
    const double losses = static_cast<double>(l.micro_batch * (in.seq_len - 1)) * fp32;
    out.push_back(make("all-reduce the vocab-parallel loss (max, sum, target logit)", "tp", ar, losses, 3, fwd));
  }
  return out;
}

// Ulysses, per micro-batch and decoder layer on a tensor-parallel rank's heads: q, k, v all-to-all
// from sequence chunks to head shares before attention and the output back after, their
// gradients the other way in the backward (and the forward's again when checkpointing recomputes
// it), each call this rank's micro x chunk x heads x head_dim values in the compute dtype; kv heads
// that cp does not divide are repeated per query head first. Ring attention instead shifts the
// key/value block (kv repeated per query head, fp32) cp - 1 times forward, block and gradient
// cp - 1 times backward and the gradient home once. The last stage gathers the per-token losses
// over cp once per micro-batch. As tests/mpi/test_context_parallel.cpp counts them.
std::vector<Collective> context_parallel_collectives(const StepInput& in, std::int64_t layers, bool last) {
  const Layout& l = in.layout;
  const ModelShape& m = in.model;
  const int cp = l.mesh[MeshDim::CP], tp = l.mesh[MeshDim::TP];
  std::vector<Collective> out;
  if (cp == 1) return out;
  const double n = static_cast<double>(layers), recomputes = l.checkpointing ? 1 : 0;
  const std::int64_t heads = m.heads / tp;
  const double values = static_cast<double>(l.micro_batch) * chunk_tokens(in) * static_cast<double>(m.head_dim);
  const auto fwd = When::ForwardPath, bwd = When::BackwardPath;
  if (l.ring) {
    const double block = 2.0 * values * static_cast<double>(heads) * 4;
    const double shifts = cp - 1;
    out.push_back(make("shift the key/value block around the ring", "cp", CollKind::Send, block, n * shifts, fwd));
    out.push_back(make("shift the block and its gradient around the ring", "cp", CollKind::Send, 2 * block,
                       n * shifts, bwd));
    out.push_back(make("send the key/value gradient home", "cp", CollKind::Send, block, n, bwd));
    if (l.checkpointing)
      out.push_back(make("shift the recomputed forward's blocks", "cp", CollKind::Send, block, n * shifts, bwd));
  } else {
    std::int64_t kv = m.kv_heads % tp == 0 ? m.kv_heads / tp : 1;
    if (kv % cp != 0) kv = heads;
    const double q_bytes = values * static_cast<double>(heads) * in.compute_bytes,
                 kv_bytes = values * static_cast<double>(kv) * in.compute_bytes;
    const CollKind a2a = CollKind::AllToAll;
    out.push_back(make("all-to-all q and the attention output (sequence <-> heads)", "cp", a2a, q_bytes, 2 * n, fwd));
    out.push_back(make("all-to-all k and v to head shares", "cp", a2a, kv_bytes, 2 * n, fwd));
    out.push_back(make("all-to-all the gradients of q and the output", "cp", a2a, q_bytes, 2 * n * (1 + recomputes), bwd));
    out.push_back(make("all-to-all the gradients of k and v", "cp", a2a, kv_bytes, 2 * n * (1 + recomputes), bwd));
  }
  if (last) {
    const double padded = chunk_tokens(in) * cp;
    out.push_back(make("all-gather the per-token losses over cp", "cp", CollKind::AllGather,
                       static_cast<double>(l.micro_batch) * padded * 4, 1, fwd));
  }
  return out;
}

// Chunk c of stage s is virtual stage g = c pp + s: it sends activations on unless g is the
// last, and gradients back unless g is 0; [micro, seq (/ tp with sequence parallel), hidden] fp32.
std::vector<Collective> pipeline_collectives(const StepInput& in, int stage) {
  const Layout& l = in.layout;
  const int pp = l.mesh[MeshDim::PP], v = std::max(1, l.virtual_stages);
  std::vector<Collective> out;
  if (l.algorithm != Algorithm::Megatron || pp == 1) return out;
  double forward = 0, backward = 0;
  for (int c = 0; c < v; ++c) {
    const int g = c * pp + stage;
    if (g < pp * v - 1) forward += 1;
    if (g > 0) backward += 1;
  }
  const int split = l.sequence_parallel ? l.mesh[MeshDim::TP] : 1;
  const double bytes = 4.0 * static_cast<double>(l.micro_batch) * std::floor(chunk_tokens(in) / split) *
                       static_cast<double>(in.model.hidden);
  if (forward > 0) {
    out.push_back(make("send activations to the next stage", "pp", CollKind::Send, bytes, forward, When::ForwardPath));
    out.push_back(
        make("receive gradients from the next stage", "pp", CollKind::Recv, bytes, forward, When::BackwardPath));
  }
  if (backward > 0) {
    out.push_back(
        make("send gradients to the previous stage", "pp", CollKind::Send, bytes, backward, When::BackwardPath));
    out.push_back(
        make("receive activations from the previous stage", "pp", CollKind::Recv, bytes, backward, When::ForwardPath));
  }
  return out;
}

void time_collectives(const StepInput& in, std::vector<Collective>& collectives) {
  const MeshShape& mesh = in.layout.mesh;
  for (Collective& c : collectives) {
    const GroupShape g = group_shape(mesh, c.group);
    c.group_size = g.size;
    c.inter_node = group_spans_nodes(mesh.world_size(), g.stride, g.size, in.cluster.devices_per_node);
    const double one = collective_seconds(c.kind, c.payload_bytes, g.size, link_of(in.cluster, c.inter_node));
    c.seconds = c.kind == CollKind::Recv ? 0.0 : c.calls * one;
  }
}

}  // namespace lft::plan::detail
