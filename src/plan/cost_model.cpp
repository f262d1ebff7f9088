#include "lft/plan/cost_model.h"

#include <algorithm>

#include "collectives.h"
#include "lft/engine/pipeline_schedule.h"

namespace lft::plan {
namespace {

// Training FLOPs per token of one decoder layer and of the head, forward and backward.
struct TokenFlops {
  double layer_forward, layer_backward, head_forward, head_backward;
};

TokenFlops token_flops(const ModelShape& m, std::int64_t seq_len) {
  const double attention = static_cast<double>(m.attention_width) * static_cast<double>(seq_len);
  const double head = 2.0 * static_cast<double>(m.vocab) * static_cast<double>(m.hidden);
  return {2 * m.layer_matmul_params + 4 * attention,
          2 * m.layer_matmul_params + 2 * m.layer_matmul_trained + 8 * attention, head,
          head + (m.head_trained ? head : 0.0)};
}

// Decoder layers per pipeline stage: the engine's own split when given, else balanced (the
// earlier stages taking the remainder, as megatron_plan.cpp does).
std::vector<std::int64_t> stage_layers(const StepInput& in) {
  const int pp = in.layout.mesh[MeshDim::PP];
  if (pp > 1 && static_cast<int>(in.stage_layers.size()) == pp) return in.stage_layers;
  std::vector<std::int64_t> out(static_cast<std::size_t>(pp));
  for (int s = 0; s < pp; ++s)
    out[static_cast<std::size_t>(s)] = in.model.layers / pp + (s < in.model.layers % pp ? 1 : 0);
  return out;
}

// One micro-batch on one pipeline stage: compute, and the communication on its critical path.
struct StageTime {
  double forward_compute = 0, backward_compute = 0, forward_comm = 0, backward_comm = 0;
  std::vector<Collective> path;  // per micro-batch
  double forward() const { return forward_compute + forward_comm; }
  double backward() const { return backward_compute + backward_comm; }
};

StageTime stage_time(const StepInput& in, const TokenFlops& f, std::int64_t layers, int stage, int stages) {
  const Layout& l = in.layout;
  const bool first = stage == 0, last = stage == stages - 1;
  const double rate = in.cluster.device_tflops * 1e12 * in.cluster.mfu_ceiling * l.mesh[MeshDim::TP];
  // A cp rank runs its chunk of each sequence, every token of which attends over the whole.
  const double tokens = static_cast<double>(l.micro_batch) * detail::chunk_tokens(in);
  const double n = static_cast<double>(layers);
  const double recompute = l.checkpointing ? f.layer_forward : 0.0;
  StageTime t;
  t.forward_compute = tokens * (n * f.layer_forward + (last ? f.head_forward : 0.0)) / rate;
  t.backward_compute = tokens * (n * (f.layer_backward + recompute) + (last ? f.head_backward : 0.0)) / rate;
  t.path = detail::tensor_parallel_collectives(in, layers, first, last);
  for (Collective& c : detail::context_parallel_collectives(in, layers, last)) t.path.push_back(c);
  for (Collective& c : detail::expert_parallel_collectives(in, layers)) t.path.push_back(c);
  for (Collective& c : detail::pipeline_collectives(in, stage)) t.path.push_back(c);
  detail::time_collectives(in, t.path);
  for (const Collective& c : t.path) (c.when == When::ForwardPath ? t.forward_comm : t.backward_comm) += c.seconds;
  return t;
}

// What compute cannot hide of the step's other collectives: for each overlap window, all of it
// when the cluster does not overlap, else what exceeds the window but at least the calls that
// nothing can hide.
double exposed_seconds(const std::vector<Collective>& collectives, const Cluster& cluster, double forward_window,
                       double backward_window, double last_backward_window) {
  struct Window {
    When when;
    double length;
    double seconds = 0, unhidden = 0;
  };
  Window windows[] = {{When::DuringForward, forward_window, 0, 0},
                      {When::DuringBackward, backward_window, 0, 0},
                      {When::DuringLastBackward, last_backward_window, 0, 0}};
  double exposed = 0;
  for (const Collective& c : collectives) {
    if (c.when == When::ForwardPath || c.when == When::BackwardPath) continue;  // in the pipeline's time
    if (c.when == When::Exposed) {
      exposed += c.seconds;
      continue;
    }
    for (Window& w : windows)
      if (w.when == c.when) {
        w.seconds += c.seconds;
        if (c.calls > 0) w.unhidden += c.seconds / c.calls * c.unhidden_calls;
      }
  }
  for (const Window& w : windows)
    exposed += cluster.overlap_comm ? std::max(w.seconds - w.length, w.unhidden) : w.seconds;
  return exposed;
}

}  // namespace

const char* when_name(When when) {
  switch (when) {
    case When::Exposed:
      return "exposed";
    case When::DuringForward:
      return "under forward";
    case When::DuringBackward:
      return "under backward";
    case When::DuringLastBackward:
      return "under last backward";
    case When::ForwardPath:
      return "in forward";
    case When::BackwardPath:
      return "in backward";
  }
  return "?";
}

double Collective::bus_bytes_per_step() const { return calls * ::lft::bus_bytes(kind, payload_bytes, group_size); }

Link link_of(const Cluster& cluster, bool inter_node) {
  if (inter_node) return {cluster.inter_node_gbps * 1e9, cluster.inter_node_latency_us * 1e-6};
  return {cluster.intra_node_gbps * 1e9, cluster.intra_node_latency_us * 1e-6};
}

double collective_seconds(CollKind kind, double payload_bytes, int group_size, const Link& link) {
  if (group_size <= 1) return 0.0;
  const double n = group_size;
  switch (kind) {
    case CollKind::AllReduce:
      return 2 * (n - 1) * link.latency_s + 2 * (n - 1) / n * payload_bytes / link.bytes_per_s;
    case CollKind::AllGather:
    case CollKind::ReduceScatter:
    case CollKind::AllToAll:
      return (n - 1) * link.latency_s + (n - 1) / n * payload_bytes / link.bytes_per_s;
    case CollKind::Broadcast:
    case CollKind::Send:
    case CollKind::Recv:
      return link.latency_s + payload_bytes / link.bytes_per_s;
    case CollKind::Barrier:
      return 2 * (n - 1) * link.latency_s;
  }
  return 0.0;
}

bool group_spans_nodes(int world, int stride, int size, int devices_per_node) {
  if (size <= 1) return false;
  for (int rank = 0; rank < world; ++rank) {
    const int first = rank - ((rank / stride) % size) * stride;
    const int last = first + (size - 1) * stride;
    if (first / devices_per_node != last / devices_per_node) return true;
  }
  return false;
}

bool dim_spans_nodes(const MeshShape& mesh, MeshDim dim, int devices_per_node) {
  int stride = 1;
  for (int d = static_cast<int>(dim) + 1; d < kMeshDims; ++d) stride *= mesh.sizes[d];
  return group_spans_nodes(mesh.world_size(), stride, mesh[dim], devices_per_node);
}

double model_flops_per_token(const ModelShape& model, std::int64_t seq_len) {
  const TokenFlops f = token_flops(model, seq_len);
  return static_cast<double>(model.layers) * (f.layer_forward + f.layer_backward) + f.head_forward + f.head_backward;
}

StepPrediction predict_step(const StepInput& in) {
  const Layout& l = in.layout;
  const int pp = l.mesh[MeshDim::PP], v = std::max(1, l.virtual_stages);
  const double micro_batches = static_cast<double>(l.accumulation);
  const TokenFlops f = token_flops(in.model, in.seq_len);

  // The stage whose micro-batch takes longest sets the pipeline's pace (forward and backward
  // each at their slowest stage: the last holds the head, the first the embedding).
  const std::vector<std::int64_t> layers = stage_layers(in);
  std::vector<StageTime> stages;
  for (int s = 0; s < pp; ++s) stages.push_back(stage_time(in, f, layers[static_cast<std::size_t>(s)], s, pp));
  double forward = 0, backward = 0;
  std::size_t busiest = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    forward = std::max(forward, stages[s].forward());
    backward = std::max(backward, stages[s].backward());
    if (stages[s].forward() + stages[s].backward() > stages[busiest].forward() + stages[busiest].backward())
      busiest = s;
  }
  const StageTime& worst = stages[busiest];
  const double work = micro_batches * (forward + backward);
  const double pipeline =
      pp > 1 ? engine::simulate_pipeline(l.schedule, pp, l.accumulation, v, forward / v, backward / v).makespan : work;

  StepPrediction p;
  for (Collective c : worst.path) {
    c.calls *= micro_batches;
    c.seconds *= micro_batches;
    p.collectives.push_back(c);
  }
  std::vector<Collective> step = detail::data_parallel_collectives(in);
  detail::time_collectives(in, step);
  p.collectives.insert(p.collectives.end(), step.begin(), step.end());

  const double exposed_outside = exposed_seconds(step, in.cluster, micro_batches * worst.forward_compute,
                                                 micro_batches * worst.backward_compute, worst.backward_compute);
  p.compute_s = micro_batches * (worst.forward_compute + worst.backward_compute);
  p.bubble_s = std::max(0.0, pipeline - work);
  for (const Collective& c : p.collectives) {
    p.comm_s += c.seconds;
    p.comm_s_by_group[c.group] += c.seconds;
  }
  p.exposed_comm_s = exposed_outside + micro_batches * (worst.forward_comm + worst.backward_comm);
  p.step_s = pipeline + exposed_outside;
  p.tokens_per_step = static_cast<double>(l.micro_batch * l.accumulation * l.mesh.dp_size() * in.seq_len);
  p.tokens_per_s = p.step_s > 0 ? p.tokens_per_step / p.step_s : 0.0;
  p.model_flops_per_step = model_flops_per_token(in.model, in.seq_len) * p.tokens_per_step;
  const double peak = in.cluster.device_tflops * 1e12 * l.mesh.world_size();
  p.mfu = p.step_s > 0 ? p.model_flops_per_step / (p.step_s * peak) : 0.0;
  p.memory_bytes = in.memory_bytes;
  return p;
}

}  // namespace lft::plan
