// lftrain --plan: the cost model's formulas by hand (alpha-beta, the bytes each engine moves, the
// pipeline bubble), the cluster file's errors, and the planner's memory filter and ranking, on a
// tiny model and on Llama 3 8B over 8 x 8 H100.
#include <c10/core/TensorOptions.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "lft/config/config.h"
#include "lft/model/families.h"
#include "lft/plan/cluster.h"
#include "lft/plan/cost_model.h"
#include "lft/plan/layout.h"
#include "lft/plan/plan_report.h"
#include "lft/plan/planner.h"
#include "test_util.h"

namespace lft::plan {
namespace {

using Preset = engine::EnginePreset;

std::string repo_root() {
  const std::string here = __FILE__;
  return here.substr(0, here.rfind('/')) + "/../..";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Cluster one_node(int devices, double gib = 64) {
  Cluster c;
  c.name = "test";
  c.nodes = 1;
  c.devices_per_node = devices;
  c.device_memory_gib = gib;
  c.device_tflops = 1;
  c.intra_node_gbps = 1;
  c.intra_node_latency_us = 1;
  return c;
}

MeshShape mesh(int pp, int dpr, int dps, int tp) {
  MeshShape m;
  m[MeshDim::PP] = pp;
  m[MeshDim::DPReplicate] = dpr;
  m[MeshDim::DPShard] = dps;
  m[MeshDim::TP] = tp;
  return m;
}

// A model given by hand: `layers` layers of `layer` elements (all matmul), a root of `root`.
ModelShape shape(std::int64_t layers, double layer, double root) {
  ModelShape m;
  m.layers = layers;
  m.hidden = 32;
  m.vocab = 64;
  m.attention_width = 32;
  m.params = m.trained = layers * layer + root;
  m.root_params = m.root_trained = root;
  m.layer_matmul_params = m.layer_matmul_trained = layer;
  return m;
}

// An fp32 step of `engine` on one node of 2 devices: micro x accumulation sequences of seq_len.
StepInput two_ranks_fp32(const ModelShape& model, std::int64_t seq_len, engine::EnginePreset engine,
                         Algorithm algorithm, std::int64_t micro, std::int64_t accumulation) {
  StepInput in;
  in.cluster = one_node(2);
  in.model = model;
  in.seq_len = seq_len;
  in.compute_bytes = 4;
  in.layout.engine = engine;
  in.layout.algorithm = algorithm;
  in.layout.micro_batch = micro;
  in.layout.accumulation = accumulation;
  return in;
}

double sum_over(const StepPrediction& p, const std::string& group, CollKind kind, bool bus) {
  double total = 0;
  for (const Collective& c : p.collectives)
    if (c.group == group && c.kind == kind) total += bus ? c.bus_bytes_per_step() : c.calls * c.payload_bytes;
  return total;
}

TEST(PlanCostModel, AlphaBetaRingTimesByHand) {
  const Link link{1e9, 1e-6};  // 1 GB/s, 1 us per step
  // 1 MB over 4 ranks: all-reduce 2(n-1) alpha + 2(n-1)/n B/bw = 6 us + 1.5 ms
  EXPECT_NEAR(collective_seconds(CollKind::AllReduce, 1e6, 4, link), 6e-6 + 1.5e-3, 1e-12);
  EXPECT_NEAR(collective_seconds(CollKind::AllGather, 1e6, 4, link), 3e-6 + 0.75e-3, 1e-12);
  EXPECT_NEAR(collective_seconds(CollKind::ReduceScatter, 1e6, 4, link), 3e-6 + 0.75e-3, 1e-12);
  EXPECT_NEAR(collective_seconds(CollKind::Send, 1e6, 2, link), 1e-6 + 1e-3, 1e-12);
  EXPECT_EQ(collective_seconds(CollKind::AllReduce, 1e6, 1, link), 0.0);
  Cluster c = one_node(8);
  c.nodes = 2;
  c.inter_node_gbps = 50;
  c.inter_node_latency_us = 5;
  EXPECT_DOUBLE_EQ(link_of(c, true).bytes_per_s, 50e9);
  EXPECT_DOUBLE_EQ(link_of(c, true).latency_s, 5e-6);
  EXPECT_DOUBLE_EQ(link_of(c, false).bytes_per_s, 1e9);
}

TEST(PlanCostModel, GroupsSpanNodesAsTheMeshPlacesRanks) {
  // 16 ranks, 8 per node; rank = ((pp R + dpr) S + dps) T + tp
  EXPECT_FALSE(dim_spans_nodes(mesh(1, 2, 1, 8), MeshDim::TP, 8));          // tp 8: one node each
  EXPECT_TRUE(dim_spans_nodes(mesh(1, 2, 1, 8), MeshDim::DPReplicate, 8));  // ranks 0 and 8
  EXPECT_FALSE(dim_spans_nodes(mesh(2, 1, 2, 4), MeshDim::DPShard, 8));     // ranks 0 and 4
  EXPECT_TRUE(dim_spans_nodes(mesh(2, 1, 2, 4), MeshDim::PP, 8));           // ranks 0 and 8
  EXPECT_TRUE(dim_spans_nodes(mesh(1, 1, 16, 1), MeshDim::DPShard, 8));
  EXPECT_TRUE(group_spans_nodes(12, 1, 3, 4));  // tp 3 on nodes of 4: ranks 3, 4, 5 span two
  EXPECT_FALSE(group_spans_nodes(12, 1, 2, 4));
}

TEST(PlanCostModel, DdpMovesTwiceTheGradientsOnce) {
  StepInput in;
  in.cluster = one_node(4);
  in.model = shape(4, 1e6, 5e5);  // 4.5 M trained elements: 18 MB of fp32 gradients
  in.layout.engine = Preset::Ddp;
  in.layout.algorithm = Algorithm::Replicated;
  in.layout.mesh = mesh(1, 4, 1, 1);
  in.layout.accumulation = 3;  // ddp synchronises the last micro-batch only
  const StepPrediction p = predict_step(in);
  const double P = 4 * in.model.trained;
  EXPECT_NEAR(sum_over(p, "dp", CollKind::AllReduce, true), 2 * P * 3 / 4, 1e-6 * P);
  ASSERT_EQ(p.collectives.size(), 1u);
  EXPECT_EQ(p.collectives[0].calls, std::ceil(P / in.ddp_bucket_bytes));
  EXPECT_FALSE(p.collectives[0].inter_node);
  // Without overlap every second of it is exposed; with it, at most that.
  EXPECT_LE(p.exposed_comm_s, p.comm_s + 1e-12);
  in.cluster.overlap_comm = false;
  EXPECT_NEAR(predict_step(in).exposed_comm_s, p.comm_s, 1e-12);
}

TEST(PlanCostModel, FullyShardedMovesTheDocumentedVolume) {
  StepInput in;
  in.cluster = one_node(4);
  in.model = shape(4, 1e6, 5e5);
  in.model.embedding_trained = false;  // the whole root reduce-scattered (the split: the next test)
  in.compute_bytes = 4;  // fp32: P counts as the model's fp32 bytes
  in.layout.engine = Preset::Fsdp2;
  in.layout.algorithm = Algorithm::FullyShardedData;
  in.layout.mesh = mesh(1, 1, 4, 1);
  const double P = 4 * in.model.params, P_layers = 4 * (in.model.params - in.model.root_params), share = 3.0 / 4;
  // docs/engines.md: (2P + P_layers)(n-1)/n with resharding, 2P(n-1)/n without
  double moved = sum_over(predict_step(in), "dp_shard", CollKind::AllGather, true) +
                 sum_over(predict_step(in), "dp_shard", CollKind::ReduceScatter, true);
  EXPECT_NEAR(moved, (2 * P + P_layers) * share, 1e-6 * P);
  in.layout.reshard_after_forward = false;
  moved = sum_over(predict_step(in), "dp_shard", CollKind::AllGather, true) +
          sum_over(predict_step(in), "dp_shard", CollKind::ReduceScatter, true);
  EXPECT_NEAR(moved, 2 * P * share, 1e-6 * P);
  // HSDP 2 x 2: the shards (P / 2) all-reduced across the 2 replicas once per step.
  in.layout.mesh = mesh(1, 2, 2, 1);
  EXPECT_NEAR(sum_over(predict_step(in), "dp_replicate", CollKind::AllReduce, false), P / 2, 1e-6 * P);
}

// The sharded engines' split embedding gradient (dp_sharding.h): with fewer tokens in the shard
// group (4 ranks x 16) than the vocabulary has rows (4096), fsdp2 reduce-scatters the root without
// an untied table, under the layers' backward, and gathers each micro-batch's looked-up rows
// (exposed); tied, the table stays in that reduce-scatter. A flat cut (ZeRO-3) of an untied
// table, or more tokens than rows, keeps the whole root reduce-scattered after the last layer.
TEST(PlanCostModel, SplitEmbeddingGradientGathersRowsInsteadOfReducingTheTable) {
  StepInput in;
  in.cluster = one_node(4);
  in.model = shape(4, 1e6, 5e5);
  in.model.vocab = 4096;
  in.compute_bytes = 4;
  in.seq_len = 16;
  in.layout.engine = Preset::Fsdp2;
  in.layout.algorithm = Algorithm::FullyShardedData;
  in.layout.mesh = mesh(1, 1, 4, 1);
  const double table = 4096.0 * 32, rows = 4 * 16 * (8 + 4 * 32) + 8 * 4;
  auto find = [](const StepPrediction& p, const std::string& start) -> const Collective* {
    for (const Collective& c : p.collectives)
      if (c.what.rfind(start, 0) == 0) return &c;
    return nullptr;
  };
  StepPrediction p = predict_step(in);
  const Collective* root = find(p, "reduce-scatter the root unit's gradients");
  const Collective* gathered = find(p, "all-gather the embedding's looked-up gradient rows");
  ASSERT_NE(root, nullptr);
  ASSERT_NE(gathered, nullptr);
  EXPECT_EQ(root->payload_bytes, 4 * (5e5 - table));
  EXPECT_EQ(root->when, When::DuringBackward);
  EXPECT_EQ(gathered->payload_bytes, rows);
  EXPECT_EQ(gathered->when, When::Exposed);
  in.model.tied_embedding = true;
  p = predict_step(in);
  EXPECT_EQ(find(p, "reduce-scatter the root unit's gradients")->payload_bytes, 4 * 5e5);
  EXPECT_NE(find(p, "all-gather the embedding's looked-up gradient rows"), nullptr);
  in.model.tied_embedding = false;
  for (const auto& [engine, seq_len] : {std::pair<Preset, std::int64_t>{Preset::DeepSpeed, 16}, {Preset::Fsdp2, 4096}}) {
    in.layout.engine = engine;
    in.seq_len = seq_len;
    p = predict_step(in);
    EXPECT_EQ(find(p, "all-gather the embedding's looked-up gradient rows"), nullptr) << engine::preset_name(engine) << " " << seq_len;
    EXPECT_EQ(find(p, "reduce-scatter the root unit's gradients")->payload_bytes, 4 * 5e5) << engine::preset_name(engine);
    EXPECT_EQ(find(p, "reduce-scatter the root unit's gradients")->when, When::Exposed) << engine::preset_name(engine);
  }
}

// The payloads tests/mpi/test_megatron.cpp measures for tp 2 (B = 2, T = 32, H = 32, L = 4, m = 8).
TEST(PlanCostModel, MegatronPayloadsMatchTheMeasuredFormula) {
  StepInput in = two_ranks_fp32(shape(4, 1e4, 1e4), 32, Preset::Megatron, Algorithm::Megatron, 2, 8);
  in.layout.mesh = mesh(1, 1, 1, 2);
  const double B = 2, T = 32, H = 32, L = 4, m = 8, act = B * T * H * 4, loss = 3 * B * (T - 1) * 4;
  EXPECT_NEAR(sum_over(predict_step(in), "tp", CollKind::AllReduce, false), m * ((2 + 4 * L) * act + loss), 1e-9);
  in.layout.sequence_parallel = true;
  const StepPrediction sp = predict_step(in);
  EXPECT_NEAR(sum_over(sp, "tp", CollKind::AllGather, false), m * (2 * L + 1) * act * 2, 1e-9);
  EXPECT_NEAR(sum_over(sp, "tp", CollKind::ReduceScatter, false), m * (2 * L + 1) * act * 2, 1e-9);
  EXPECT_NEAR(sum_over(sp, "tp", CollKind::AllReduce, false), m * loss + (2 * L + 1) * H * 4, 1e-9);
  in.layout.sequence_parallel = false;
  in.layout.mesh = mesh(2, 1, 1, 1);
  in.stage_layers = {2, 2};
  const StepPrediction pp = predict_step(in);
  EXPECT_NEAR(sum_over(pp, "pp", CollKind::Send, false), m * act, 1e-9);
  EXPECT_NEAR(sum_over(pp, "pp", CollKind::Recv, false), m * act, 1e-9);
}

// Megatron's data parallelism on the stage's boxes, as tests/mpi/test_megatron.cpp measures it at
// dp_shard 2 (one micro-batch): optim_grads_params all-gathers the layers twice and the root once
// and reduce-scatters every gradient, (2P + P_layers) per step; optim_grads one reduce-scatter and
// one all-gather; no_shard (over dp_replicate) one all-reduce in buckets during the last backward.
TEST(PlanCostModel, MegatronDataParallelIsTheShardedAlgorithmsOnTheStageBoxes) {
  StepInput in = two_ranks_fp32(shape(4, 1e4, 1e4), 32, Preset::Megatron, Algorithm::Megatron, 2, 1);
  in.stage_layers = {4};
  in.stage_box = shape(4, 1e4, 1e4);
  const double P = 4 * 5e4, layers = 4 * 4e4;
  in.layout.mesh = mesh(1, 1, 2, 1);
  in.layout.dp_sharding = engine::DpSharding::OptimGradsParams;
  const StepPrediction zero3 = predict_step(in);
  EXPECT_NEAR(sum_over(zero3, "dp_shard", CollKind::AllGather, false), P + layers, 1e-6);
  EXPECT_NEAR(sum_over(zero3, "dp_shard", CollKind::ReduceScatter, false), P, 1e-6);
  in.layout.dp_sharding = engine::DpSharding::OptimGrads;
  const StepPrediction zero2 = predict_step(in);
  EXPECT_NEAR(sum_over(zero2, "dp_shard", CollKind::AllGather, false), P, 1e-6);
  EXPECT_NEAR(sum_over(zero2, "dp_shard", CollKind::ReduceScatter, false), P, 1e-6);
  in.layout.dp_sharding = engine::DpSharding::NoShard;
  in.layout.mesh = mesh(1, 2, 1, 1);
  const StepPrediction buckets = predict_step(in);
  EXPECT_NEAR(sum_over(buckets, "dp", CollKind::AllReduce, false), P, 1e-6);
  for (const Collective& c : buckets.collectives)
    if (c.group == "dp") EXPECT_EQ(c.when, When::DuringLastBackward);
  // HSDP: ZeRO-3 over dp_shard 2, the shards all-reduced over dp_replicate 2.
  in.cluster = one_node(4);
  in.layout.mesh = mesh(1, 2, 2, 1);
  in.layout.dp_sharding = engine::DpSharding::OptimGradsParams;
  EXPECT_NEAR(sum_over(predict_step(in), "dp_replicate", CollKind::AllReduce, false), P / 2, 1e-6);
}

// The exchanges tests/mpi/test_context_parallel.cpp counts at cp 2 (B = 2, cutoff 31 padded to 32,
// chunk 16, L = 2, 4 heads of 8, 2 kv heads, fp32, 3 micro-batches), with and without
// checkpointing; the gradients then reduce over dp x cp.
TEST(PlanCostModel, ContextParallelPayloadsMatchTheMeasuredFormula) {
  StepInput in = two_ranks_fp32(shape(2, 1e4, 1e4), 31, Preset::Ddp, Algorithm::Replicated, 2, 3);
  in.model.heads = 4;
  in.model.kv_heads = 2;
  in.model.head_dim = 8;
  in.layout.mesh = mesh(1, 1, 1, 1);
  in.layout.mesh[MeshDim::CP] = 2;
  const double B = 2, chunk = 16, padded = 32, L = 2, heads = 4, kv = 2, d = 8, m = 3;
  for (const bool checkpointing : {false, true}) {
    SCOPED_TRACE(checkpointing ? "checkpointing" : "no checkpointing");
    in.layout.checkpointing = checkpointing;
    in.layout.ring = false;
    const StepPrediction ulysses = predict_step(in);
    const double passes = checkpointing ? 3 : 2;
    EXPECT_NEAR(sum_over(ulysses, "cp", CollKind::AllToAll, false),
                m * L * passes * B * chunk * d * (2 * heads + 2 * kv) * 4, 1e-9);
    double calls = 0;
    for (const Collective& c : ulysses.collectives)
      if (c.kind == CollKind::AllToAll) calls += c.calls;
    EXPECT_EQ(calls, m * L * passes * 4);
    EXPECT_NEAR(sum_over(ulysses, "cp", CollKind::AllGather, false), m * B * padded * 4, 1e-9);
    EXPECT_GT(sum_over(ulysses, "dp_cp", CollKind::AllReduce, false), 0);
    in.layout.ring = true;
    const StepPrediction ring = predict_step(in);
    const double block = 2 * B * chunk * heads * d * 4, forwards = checkpointing ? 2 : 1;
    EXPECT_NEAR(sum_over(ring, "cp", CollKind::Send, false), m * L * (forwards * block + 2 * block + block), 1e-9);
    EXPECT_EQ(sum_over(ring, "cp", CollKind::AllToAll, false), 0);
  }
  // Each rank computes half of every sequence.
  in.layout.checkpointing = false;
  in.seq_len = 32;
  const double half = predict_step(in).compute_s;
  in.layout.mesh[MeshDim::CP] = 1;
  EXPECT_NEAR(half, predict_step(in).compute_s / 2, 1e-9 * half);
}

// Expert parallelism (fsdp2, 4 ranks, ep 2): the engine gathers and reduces the layers without
// their experts; the experts are sharded over edp (4 / 2 ranks) as fsdp2 shards the rest: each MoE
// layer's experts gathered before its forward and again before its backward and their gradients
// reduce-scattered, every micro-batch (under ddp all-reduced in buckets once a step); each MoE layer's
// micro-batch all-to-alls its k x tokens routed rows (rows / ep to each other rank) and gets their
// outputs back, and backward does it again (checkpointing: the recomputed forward's too), beside
// each forward's counts per expert.
TEST(PlanCostModel, ExpertParallelMovesTheRoutedRowsAndReducesTheExpertsOverEdp) {
  ModelShape m = shape(2, 1e4, 1e3);
  m.expert_params = m.expert_trained = 2 * 8e3;  // 8e3 of each layer's 1e4 are experts
  m.experts = 4;
  m.experts_per_token = 2;
  m.moe_layers = 2;
  StepInput in = two_ranks_fp32(m, 16, Preset::Fsdp2, Algorithm::FullyShardedData, 2, 3);
  in.cluster = one_node(4);
  in.layout.mesh = mesh(1, 1, 4, 1);
  const StepPrediction without = predict_step(in);
  in.layout.mesh.ep = 2;
  const double B = 2, T = 16, k = 2, H = 32, L = 2, mb = 3, ep = 2;
  for (const bool checkpointing : {false, true}) {
    SCOPED_TRACE(checkpointing ? "checkpointing" : "no checkpointing");
    in.layout.checkpointing = checkpointing;
    const StepPrediction p = predict_step(in);
    const double exchanged = B * T * k * H * 4, exchanges = 2 * (checkpointing ? 3 : 2);
    const double counts = mb * L * (checkpointing ? 2 : 1) * 8 * m.experts;
    EXPECT_NEAR(sum_over(p, "ep", CollKind::AllToAll, false), mb * L * exchanges * exchanged + counts, 1e-6);
    EXPECT_NEAR(sum_over(p, "edp", CollKind::AllGather, false), mb * 2 * 4 * 2 * 8e3 / ep, 1e-6);
    EXPECT_NEAR(sum_over(p, "edp", CollKind::ReduceScatter, false), mb * 4 * 2 * 8e3 / ep, 1e-6);
    EXPECT_EQ(sum_over(p, "edp", CollKind::AllReduce, false), 0);
    // Each layer's gather carries its 2e3 non-expert elements instead of 1e4.
    EXPECT_NEAR(sum_over(p, "dp_shard", CollKind::AllGather, false) - m.root_params * 4 * mb,
                (sum_over(without, "dp_shard", CollKind::AllGather, false) - m.root_params * 4 * mb) * 2e3 / 1e4, 1e-6);
  }
  // ZeRO-1: reduce-scattered once a step, the updated shards gathered back; ddp: all-reduced.
  in.layout.algorithm = Algorithm::ShardedOptimizer;
  const StepPrediction zero1 = predict_step(in);
  EXPECT_NEAR(sum_over(zero1, "edp", CollKind::ReduceScatter, false), 4 * 2 * 8e3 / ep, 1e-6);
  EXPECT_NEAR(sum_over(zero1, "edp", CollKind::AllGather, false), 4 * 2 * 8e3 / ep, 1e-6);
  in.layout.algorithm = Algorithm::Replicated;
  EXPECT_NEAR(sum_over(predict_step(in), "edp", CollKind::AllReduce, false), 4 * 2 * 8e3 / ep, 1e-6);
  LayoutSpace space;
  space.world = 4;
  space.devices_per_node = 4;
  space.global_batch = 4;
  space.layers = 2;
  space.experts = 4;
  std::map<int, int> eps;
  int megatron_with_ep = 0;
  for (const Layout& l : enumerate_layouts(space)) {
    if (l.mesh.ep == 1) continue;
    if (l.algorithm == Algorithm::Megatron) ++megatron_with_ep;
    EXPECT_EQ(space.experts % l.mesh.ep, 0);
    EXPECT_EQ(l.mesh.dp_size() * l.mesh[MeshDim::CP] % l.mesh.ep, 0);
    ++eps[l.mesh.ep];
    const std::vector<std::string> o = layout_overrides(l, "x.json");
    EXPECT_NE(std::find(o.begin(), o.end(), "mesh.ep=" + std::to_string(l.mesh.ep)), o.end());
    EXPECT_NE(l.engine_text().find(" ep "), std::string::npos);
  }
  EXPECT_GT(eps[2], 0);
  EXPECT_GT(eps[4], 0);
  EXPECT_GT(megatron_with_ep, 0);  // ep with tp / pp, borrowed from dp x cp
  // Megatron dp 4 x ep 2 (ZeRO-3 over dp): its stage box's gathers carry no experts; the experts
  // are gathered over edp (2 ranks) instead.
  in.layout.engine = Preset::Megatron;
  in.layout.algorithm = Algorithm::Megatron;
  in.layout.dp_sharding = engine::DpSharding::OptimGradsParams;
  in.layout.checkpointing = false;
  in.stage_box = m;
  in.layout.mesh.ep = 1;
  const double dense_gathers = sum_over(predict_step(in), "dp_shard", CollKind::AllGather, false);
  in.layout.mesh.ep = 2;
  const StepPrediction megatron = predict_step(in);
  // Each micro-batch gathers the layers twice (forward, backward), in fp32.
  EXPECT_NEAR(sum_over(megatron, "dp_shard", CollKind::AllGather, false), dense_gathers - mb * 2 * 4 * 2 * 8e3, 1e-6);
  EXPECT_NEAR(sum_over(megatron, "edp", CollKind::AllGather, false), mb * 2 * 4 * 2 * 8e3 / ep, 1e-6);
}

TEST(PlanCostModel, PipelineBubbleIsTheScheduleOne) {
  StepInput in;
  in.cluster = one_node(4);
  in.cluster.intra_node_gbps = 1e12;  // communication free: the bubble alone
  in.cluster.intra_node_latency_us = 0;
  in.model = shape(8, 1e6, 0);
  in.model.vocab = 0;  // no head: every stage does the same work
  in.layout.engine = Preset::Megatron;
  in.layout.algorithm = Algorithm::Megatron;
  in.layout.mesh = mesh(4, 1, 1, 1);
  in.layout.accumulation = 8;
  in.stage_layers = {2, 2, 2, 2};
  const StepPrediction p = predict_step(in);
  // 1F1B: (m + pp - 1) micro-steps of work per stage, m of them useful.
  EXPECT_NEAR(p.bubble_s / p.compute_s, 3.0 / 8.0, 1e-6);
  in.layout.schedule = engine::PipelineScheduleKind::Interleaved1F1B;
  in.layout.virtual_stages = 2;
  const StepPrediction interleaved = predict_step(in);
  EXPECT_NEAR(interleaved.bubble_s / interleaved.compute_s, 3.0 / 16.0, 1e-6);
}

TEST(PlanCostModel, FlopsAreSixPerParameterPlusAttention) {
  const ModelShape m = shape(2, 1000, 0);  // attention width 32, hidden 32, vocab 64
  const double seq = 16;
  EXPECT_DOUBLE_EQ(model_flops_per_token(m, 16), 2 * (6 * 1000 + 12 * 32 * seq) + 6 * 64 * 32);
}

TEST(PlanCluster, ReadsEveryKey) {
  const Cluster c = parse_cluster(read_text(repo_root() + "/inputs/clusters/h100-8x8.toml"), "h100-8x8.toml");
  EXPECT_EQ(c.name, "h100-8x8");
  EXPECT_EQ(c.world_size(), 64);
  EXPECT_DOUBLE_EQ(c.device_tflops, 989);
  EXPECT_DOUBLE_EQ(c.inter_node_gbps, 50);
  EXPECT_TRUE(c.overlap_comm);
  EXPECT_NEAR(c.usable_memory_bytes(), 79.6 * 0.9 * 1073741824.0, 1.0);
  const Cluster hosts = parse_cluster(read_text(repo_root() + "/inputs/clusters/namespace-hosts.toml"), "n.toml");
  EXPECT_TRUE(hosts.reductions_upcast());
  EXPECT_EQ(hosts.world_size(), 4);
}

TEST(PlanCluster, ErrorsNameFileLineAndKey) {
  const std::string base =
      "[cluster]\nnodes = 2\ndevices_per_node = 4\ndevice_memory_gib = 80\n"
      "device_tflops = 100\nintra_node_gbps = 100\nintra_node_latency_us = 2\n"
      "inter_node_gbps = 10\ninter_node_latency_us = 5\n";
  EXPECT_NO_THROW(parse_cluster(base, "c.toml"));
  std::string msg = test::message_of<config::ConfigError>(
      [&] { parse_cluster("[cluster]\nname = \"x\"\nnodes = \"eight\"\n", "c.toml"); });
  EXPECT_CONTAINS(msg, "c.toml:3:1: key 'cluster.nodes': expected an integer >= 1, got a string");
  EXPECT_CONTAINS(msg, "missing required key");
  msg = test::message_of<config::ConfigError>([&] { parse_cluster(base + "device_tflop = 3\n", "c.toml"); });
  EXPECT_CONTAINS(msg, "c.toml:10:1: key 'cluster.device_tflop': unknown key");
  EXPECT_CONTAINS(msg, "did you mean 'cluster.device_tflops'");
  msg = test::message_of<config::ConfigError>([&] { parse_cluster(base + "mfu_ceiling = 1.5\n", "c.toml"); });
  EXPECT_CONTAINS(msg, "key 'cluster.mfu_ceiling': 1.5 is out of range: a number > 0 and <= 1");
  msg = test::message_of<config::ConfigError>([&] { parse_cluster(base + "backend = \"gloo\"\n", "c.toml"); });
  EXPECT_CONTAINS(msg, "key 'cluster.backend': 'gloo' is not a backend");
  msg = test::message_of<config::ConfigError>([&] { parse_cluster("nodes = 2\n", "c.toml"); });
  EXPECT_CONTAINS(msg, "a cluster file holds one table, [cluster]");
  // One node needs no inter-node link.
  EXPECT_NO_THROW(
      parse_cluster("[cluster]\nnodes = 1\ndevices_per_node = 4\ndevice_memory_gib = 80\n"
                    "device_tflops = 100\nintra_node_gbps = 100\nintra_node_latency_us = 2\n",
                    "c.toml"));
}

TEST(PlanLayouts, EveryLayoutKeepsTheGlobalBatch) {
  LayoutSpace space;
  space.world = 16;
  space.devices_per_node = 4;
  space.global_batch = 32;
  space.layers = 8;
  const std::vector<Layout> layouts = enumerate_layouts(space);
  ASSERT_FALSE(layouts.empty());
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.engine_text() + " " + l.mesh_text());
    EXPECT_EQ(l.micro_batch * l.accumulation * l.mesh.dp_size(), 32);
    EXPECT_EQ(l.mesh.world_size(), 16);
    EXPECT_LE(l.mesh[MeshDim::TP], 4);
    if (l.algorithm == Algorithm::Megatron)
      EXPECT_GE(l.accumulation, l.mesh[MeshDim::PP]);
    else
      EXPECT_EQ(l.mesh[MeshDim::PP] * l.mesh[MeshDim::TP], 1);
  }
  space.engines = {Preset::Megatron};
  int zero3 = 0;
  for (const Layout& l : enumerate_layouts(space)) {
    EXPECT_EQ(l.engine, Preset::Megatron);
    // dp_shard > 1 only with a sharding strategy; the distributed optimizer only without
    EXPECT_EQ(l.mesh[MeshDim::DPShard] > 1, l.dp_sharding != engine::DpSharding::NoShard) << l.engine_text();
    if (l.dp_sharding != engine::DpSharding::NoShard) EXPECT_FALSE(l.distributed_optimizer);
    zero3 += l.dp_sharding == engine::DpSharding::OptimGradsParams && l.mesh[MeshDim::TP] > 1;
  }
  EXPECT_GT(zero3, 0) << "tp x ZeRO-3 over dp_shard is among the layouts";
}

// cp only where each rank keeps kMinContextChunk tokens; then in both modes, over every engine.
TEST(PlanLayouts, ContextParallelIsTriedForLongSequences) {
  LayoutSpace space;
  space.world = 8;
  space.devices_per_node = 8;
  space.global_batch = 8;
  space.layers = 8;
  space.seq_len = kMinContextChunk;
  for (const Layout& l : enumerate_layouts(space)) EXPECT_EQ(l.mesh[MeshDim::CP], 1) << l.mesh_text();
  space.seq_len = 4 * kMinContextChunk;
  std::map<std::string, int> cps;  // by engine and mode: the largest cp
  for (const Layout& l : enumerate_layouts(space)) {
    SCOPED_TRACE(l.engine_text() + " " + l.mesh_text());
    EXPECT_LE(l.mesh[MeshDim::CP], 4);
    EXPECT_EQ(l.micro_batch * l.accumulation * l.mesh.dp_size(), 8);
    int& most = cps[engine::preset_name(l.engine) + std::string(l.ring ? " ring" : "")];
    most = std::max(most, l.mesh[MeshDim::CP]);
  }
  for (const char* engine : {"ddp", "fsdp2", "deepspeed", "megatron"}) {
    EXPECT_EQ(cps[engine], 4) << engine;
    EXPECT_EQ(cps[std::string(engine) + " ring"], 4) << engine;
  }
  Layout l;
  l.engine = Preset::Fsdp2;
  l.algorithm = Algorithm::FullyShardedData;
  l.mesh = mesh(1, 1, 2, 1);
  l.mesh[MeshDim::CP] = 4;
  l.ring = true;
  EXPECT_EQ(l.mesh_text(), "1x1x2x4x1");
  EXPECT_EQ(l.engine_text(), "fsdp2 ring");
  const std::vector<std::string> overrides = layout_overrides(l, "");
  EXPECT_NE(std::find(overrides.begin(), overrides.end(), "mesh.cp=4"), overrides.end());
  EXPECT_NE(std::find(overrides.begin(), overrides.end(), "dist_config.cp_mode=ring"), overrides.end());
  EXPECT_CONTAINS(layout_config_lines(l), "cp = 4\n");
  EXPECT_CONTAINS(layout_config_lines(l), "[dist_config]\ncp_mode = \"ring\"\n");
}

// A tiny model on 4 ranks of one node.
class PlanTiny : public ::testing::Test {
 protected:
  PlanRequest request(double gib, std::vector<Preset> engines = {}) {
    PlanRequest r;
    r.cluster = one_node(4, gib);
    r.cluster.device_tflops = 0.1;
    r.config_text = "distributed = \"ddp\"\ntrain_dataset = \"" + data_ +
                    "\"\ncutoff_len = 32\n"
                    "per_device_train_batch_size = 1\ngradient_accumulation_steps = 2\n"
                    "[model]\nvocab_size = 259\nhidden_size = 64\nintermediate_size = 128\n"
                    "num_hidden_layers = 4\nnum_attention_heads = 4\nnum_key_value_heads = 2\n"
                    "max_position_embeddings = 64\n";
    r.config_name = "tiny.toml";
    r.top = 1000;
    r.engines = std::move(engines);
    return r;
  }
  test::TempDir dir_;
  std::string data_ = dir_.write("data.txt", "1 + 2 = 3\n");
};

TEST_F(PlanTiny, ModelShapeCountsTheParameters) {
  const config::Config cfg = config::parse_config(request(1).config_text, "tiny.toml");
  const auto m =
      model::create_causal_lm(model::ModelConfig::from_run_config(cfg), at::TensorOptions().device(at::kMeta));
  const ModelShape s = model_shape(*m);
  // embedding and lm_head 259 x 64 each, the final norm 64; per layer q, o 64 x 64, k, v 32 x 64,
  // gate, up, down 128 x 64, two norms of 64.
  const double layer_matmul = 2 * 4096 + 2 * 2048 + 3 * 8192;
  EXPECT_DOUBLE_EQ(s.layer_matmul_params, layer_matmul);
  EXPECT_DOUBLE_EQ(s.root_params, 2 * 259 * 64 + 64);
  EXPECT_DOUBLE_EQ(s.params, s.root_params + 4 * (layer_matmul + 128));
  EXPECT_DOUBLE_EQ(s.trained, s.params);
  EXPECT_EQ(s.attention_width, 64);
  EXPECT_TRUE(s.head_trained);
}

TEST_F(PlanTiny, RanksByTokensPerSecondAndDropsWhatDoesNotFit) {
  const PlanResult all = make_plan(request(64));
  ASSERT_FALSE(all.ranked.empty());
  EXPECT_EQ(all.global_batch, 8);  // 1 x 2 x 4 ranks of ddp
  for (std::size_t i = 1; i < all.ranked.size(); ++i)
    EXPECT_GE(all.ranked[i - 1].prediction.tokens_per_s, all.ranked[i].prediction.tokens_per_s);
  bool megatron = false, fsdp2 = false;
  for (const Candidate& c : all.ranked) {
    megatron |= c.layout.engine == Preset::Megatron;
    fsdp2 |= c.layout.engine == Preset::Fsdp2;
  }
  EXPECT_TRUE(megatron && fsdp2);

  // ddp alone, with memory just under its smallest layout: nothing fits, and the report says
  // what the smallest needs.
  const PlanResult ddp = make_plan(request(64, {Preset::Ddp}));
  ASSERT_FALSE(ddp.ranked.empty());
  double smallest = ddp.ranked.front().prediction.memory_bytes;
  for (const Candidate& c : ddp.ranked) smallest = std::min(smallest, c.prediction.memory_bytes);
  const double gib = smallest / 1073741824.0 / 0.9;  // memory_headroom 0.1
  const PlanResult tight = make_plan(request(gib * 0.99, {Preset::Ddp}));
  EXPECT_TRUE(tight.ranked.empty());
  ASSERT_TRUE(tight.smallest.has_value());
  EXPECT_DOUBLE_EQ(tight.smallest->prediction.memory_bytes, smallest);
  EXPECT_CONTAINS(plan_text(request(gib * 0.99, {Preset::Ddp}), tight), "no layout fits in");
  const PlanRequest roomier = request(gib * 1.01, {Preset::Ddp});
  const PlanResult loose = make_plan(roomier);
  ASSERT_FALSE(loose.ranked.empty());
  for (const Candidate& c : loose.ranked) EXPECT_LE(c.prediction.memory_bytes, roomier.cluster.usable_memory_bytes());
}

TEST_F(PlanTiny, ConfigLayoutIsPredictedCollectiveByCollective) {
  PlanRequest r = request(64);
  PlanResult context;
  const Candidate c = predict_config_layout(r, context);
  EXPECT_EQ(c.layout.engine, Preset::Ddp);
  EXPECT_EQ(c.layout.mesh.dp_size(), 4);
  EXPECT_TRUE(c.fits);
  EXPECT_GT(c.prediction.memory_bytes, 0);
  const std::string text = layout_text(r, context, c);
  EXPECT_CONTAINS(text, "all-reduce the gradients in buckets");
  EXPECT_CONTAINS(text, "fits in");
}

// docs/plan.md's example: Llama 3 8B on 8 x 8 H100 finds fsdp2 layouts that fit.
TEST(PlanLlama3, EightBillionFitsOnEightByEightH100) {
  const std::string root = repo_root();
  PlanRequest r;
  r.cluster = read_cluster(root + "/inputs/clusters/h100-8x8.toml");
  r.config_text = read_text(root + "/inputs/plan/llama3-8b.toml");
  r.config_name = root + "/inputs/plan/llama3-8b.toml";
  r.overrides = {"model_name_or_path=" + root + "/inputs/models/llama3-8b",
                 "train_dataset=" + root + "/inputs/data/arithmetic.txt"};
  r.top = 3;
  r.engines = {Preset::Fsdp2};  // the unit budget: one engine's 48 layouts
  const PlanResult p = make_plan(r);
  EXPECT_EQ(p.global_batch, 128);
  EXPECT_NEAR(p.model.params, 8.03e9, 0.01e9);
  ASSERT_FALSE(p.ranked.empty());
  const StepPrediction& best = p.ranked.front().prediction;
  EXPECT_LE(best.memory_bytes, r.cluster.usable_memory_bytes());
  EXPECT_GT(best.mfu, 0.2);
  EXPECT_LE(best.mfu, r.cluster.mfu_ceiling);
  EXPECT_CONTAINS(plan_text(r, p), "distributed = \"fsdp2\"");
}

// At 128k tokens no layout without context parallelism fits an H100; the planner splits the
// sequence and says how.
TEST(PlanLlama3, LongContextSplitsTheSequence) {
  const std::string root = repo_root();
  PlanRequest r;
  r.cluster = read_cluster(root + "/inputs/clusters/h100-8x8.toml");
  r.config_text = read_text(root + "/inputs/plan/llama3-8b.toml");
  r.config_name = root + "/inputs/plan/llama3-8b.toml";
  r.overrides = {"model_name_or_path=" + root + "/inputs/models/llama3-8b",
                 "train_dataset=" + root + "/inputs/data/arithmetic.txt", "cutoff_len=131072",
                 "per_device_train_batch_size=1", "gradient_accumulation_steps=1"};
  r.top = 3;
  r.engines = {Preset::Fsdp2};
  const PlanResult p = make_plan(r);
  ASSERT_FALSE(p.ranked.empty()) << plan_text(r, p);
  for (const Candidate& c : p.ranked) EXPECT_GT(c.layout.mesh[MeshDim::CP], 1) << c.layout.mesh_text();
  const Candidate& best = p.ranked.front();
  EXPECT_FALSE(best.layout.ring);  // 32 heads: Ulysses applies, and its exchanges cost less
  EXPECT_LE(best.prediction.memory_bytes, r.cluster.usable_memory_bytes());
  EXPECT_CONTAINS(plan_text(r, p), "cp_mode = \"ulysses\"");
}

}  // namespace
}  // namespace lft::plan
