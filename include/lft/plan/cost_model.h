// The cost of one optimizer step of a layout on a cluster (docs/plan.md, "The model"): compute
// from the model's FLOPs at the device's rate, each collective's bytes (as the communicators count
// them) over an alpha-beta ring model of the link its group uses, the pipeline's schedule
// simulated, and what each engine can hide behind compute. Pure: numbers in, numbers out.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lft/comm/stats.h"
#include "lft/plan/cluster.h"
#include "lft/plan/layout.h"

namespace lft::plan {

// What the cost model needs of the model, in elements (docs/plan.md, "FLOPs").
struct ModelShape {
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t vocab = 0;
  std::int64_t attention_width = 0;  // heads x head_dim: the width of Q K^T and of A V
  std::int64_t heads = 0;            // attention heads, key/value heads, their width
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  double params = 0;                 // every parameter
  double trained = 0;                // those that train
  double root_params = 0;            // outside the decoder layers: embedding, final norm, lm_head
  double root_trained = 0;
  double layer_matmul_params = 0;   // one decoder layer's linear weights a token runs (mean over layers;
                                    // a mixture of experts: its router and k experts' share)
  double layer_matmul_trained = 0;  // of which train (LoRA, freeze: fewer weight gradients)
  bool head_trained = true;         // lm_head (or the tied embedding) gets a weight gradient
  bool tied_embedding = false;      // tie_word_embeddings: the head is the embedding
  bool embedding_trained = true;    // the embedding gets a weight gradient
  // A mixture of experts: its routed experts (every MoE layer's; also in params and trained),
  // the experts per layer and per token, and the layers that route.
  double expert_params = 0;
  double expert_trained = 0;
  std::int64_t experts = 0;
  std::int64_t experts_per_token = 0;
  std::int64_t moe_layers = 0;
};

struct StepInput {
  Cluster cluster;
  ModelShape model;
  Layout layout;
  std::int64_t seq_len = 1;                      // cutoff_len: every sequence full (packed pre-training)
  int compute_bytes = 2;                         // 2: bf16 / fp16 autocast, 4: fp32
  double ddp_bucket_bytes = 25.0 * 1024 * 1024;  // ddp_bucket_cap_mb
  // Megatron, from the engine's own plan (megatron_plan.h): decoder layers per pipeline stage
  // (summed over its chunks), and the largest stage's tensor-parallel boxes (layers, params,
  // trained, root_params, root_trained), which its data parallelism reduces or shards. Empty / 0
  // elsewhere.
  std::vector<std::int64_t> stage_layers;
  ModelShape stage_box;
  double memory_bytes = 0;  // the run plan's per-rank estimate, carried into the prediction
};

// When a collective runs, which decides how much of it compute can hide.
enum class When {
  Exposed,             // nothing to hide it: before the first or after the last compute
  DuringForward,       // launched ahead (prefetch): may hide behind the forward compute
  DuringBackward,      // may hide behind the backward compute of every micro-batch
  DuringLastBackward,  // may hide behind the backward of the last micro-batch only (ddp)
  ForwardPath,         // inside the forward, waited for at once (tensor parallel, pipeline sends)
  BackwardPath,        // inside the backward, waited for at once
};
const char* when_name(When when);

struct Collective {
  std::string what;   // "all-gather layer parameters (forward)"
  std::string group;  // "tp", "cp", "pp", "dp_shard", "dp_replicate" or "dp" (both); "_cp": with the cp ranks;
                      // "ep", "edp": expert parallelism's groups
  CollKind kind = CollKind::AllReduce;
  int group_size = 1;
  bool inter_node = false;
  double payload_bytes = 0;  // per call, as the communicator counts it (lft/comm/stats.h)
  double calls = 0;          // per step on the busiest rank
  When when = When::Exposed;
  double unhidden_calls = 0;  // calls no compute can hide even with overlap (the first gather, the last reduce)
  double seconds = 0;         // per step, every call (receives: 0, their time is the matching send's)

  double bus_bytes_per_step() const;  // calls x bus bytes of one call (ring, nccl-tests' convention)
};

struct StepPrediction {
  double compute_s = 0;       // FLOPs of the busiest rank (recompute included) at the device's rate
  double bubble_s = 0;        // pipeline idle time on the critical path
  double comm_s = 0;          // every collective, hidden or not
  double exposed_comm_s = 0;  // what compute does not hide (tensor parallel and pipeline sends in full)
  double step_s = 0;
  std::map<std::string, double> comm_s_by_group;  // "tp", "pp", "dp_shard", ...
  double tokens_per_step = 0;                     // the whole cluster's
  double tokens_per_s = 0;
  double model_flops_per_step = 0;  // 6 N per token + attention, recompute not counted
  double mfu = 0;                   // model FLOPs / (step_s x ranks x device_tflops)
  double memory_bytes = 0;          // StepInput::memory_bytes
  std::vector<Collective> collectives;
};

// One direction of a link: bandwidth (bytes/s) and latency (s).
struct Link {
  double bytes_per_s = 0;
  double latency_s = 0;
};
Link link_of(const Cluster& cluster, bool inter_node);

// Alpha-beta time of one call over a ring of `group_size` ranks: all_reduce 2(n-1) alpha +
// 2(n-1)/n bytes / bw, all_gather and reduce_scatter (n-1) alpha + (n-1)/n bytes / bw,
// send / recv / broadcast alpha + bytes / bw; 0 for one rank.
double collective_seconds(CollKind kind, double payload_bytes, int group_size, const Link& link);

// Whether a group of `stride`-spaced ranks (`size` of them, as a mesh dim lays them out) has
// members on two nodes when ranks fill nodes of `devices_per_node` in order; checked for every
// group of the dim.
bool group_spans_nodes(int world, int stride, int size, int devices_per_node);
bool dim_spans_nodes(const MeshShape& mesh, MeshDim dim, int devices_per_node);

// Model FLOPs per trained token (forward + backward, no recompute): 2 per linear weight forward,
// 2 for the input gradient, 2 for the weight gradient of a trained one, and attention's
// 4 x attention_width x seq_len forward and twice that backward.
double model_flops_per_token(const ModelShape& model, std::int64_t seq_len);

StepPrediction predict_step(const StepInput& in);

}  // namespace lft::plan
