// The megatron engine against the one-rank run computed in the same test run (each rank alone
// over MPI_COMM_SELF): the same global batch of 16 sequences, 20 steps, identical initial weights.
// The model's vocabulary (259) and intermediate size (66) do not divide by 4, and its 2 kv heads
// are replicated at tp 4. fp32: pipeline-only layouts add every gradient in the reference's order,
// so all their losses are bitwise equal; with tensor or data parallelism the sums are split
// across ranks and the losses agree within 1e-5 relative.
// Also: each stage runs its schedule's micro-steps in order with the activations the schedule
// allows, and the bytes each communicator moves match the volume computed from the shapes.
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <optional>

#include "lft/config/config.h"
#include "lft/engine/megatron.h"
#include "lft/engine/mesh_plan.h"
#include "lft/engine/parallel_config.h"
#include "lft/engine/registry.h"
#include "lft/engine/run_plan.h"
#include "lft/model/families.h"
#include "lft/model/init.h"
#include "lft/model/parameter_storage.h"
#include "lft/runtime/memory.h"
#include "lft/train/trainer.h"
#include "mpi_test_util.h"
#include "trainer_util.h"

namespace lft {
namespace {

using test::make_trainer;
using test::world;

struct Layout {
  std::string label;
  int ranks;
  std::string mesh;  // [mesh] lines
  std::string dist;  // [dist_config] lines
  int dp = 1;
  bool bitwise = false;  // pipeline only: every loss bitwise equal
  std::string top;       // top-level lines
};

std::string run_toml(const std::string& engine, int micro, int accum, const Layout& l, bool tied = false) {
  return "distributed = \"" + engine + "\"\ntrain_dataset = \"inputs/data/arithmetic.txt\"\n"
         "per_device_train_batch_size = " + std::to_string(micro) + "\ngradient_accumulation_steps = " +
         std::to_string(accum) + "\ncutoff_len = 32\nlearning_rate = 3e-3\nweight_decay = 0.01\n"
         "warmup_steps = 2\nlr_scheduler_type = \"cosine\"\nmax_steps = 20\nseed = 7\n" + l.top +
         "[mesh]\n" + l.mesh + "[dist_config]\n" + l.dist +
         "[model]\nvocab_size = 259\nhidden_size = 32\nintermediate_size = 66\nnum_hidden_layers = 4\n"
         "num_attention_heads = 4\nnum_key_value_heads = 2\ntie_word_embeddings = " + (tied ? "true" : "false") + "\n";
}


std::vector<double> losses_of(const std::string& toml, MpiCommunicator& comm) {
  std::unique_ptr<DeviceMesh> mesh;
  auto trainer = make_trainer(toml, comm, mesh);
  std::vector<double> losses;
  for (int i = 0; i < 20; ++i) losses.push_back(trainer->step().loss);
  return losses;
}

std::vector<double> reference(const std::string& top = "", bool tied = false) {
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  return losses_of(run_toml("none", 2, 8, {"one rank", 1, "", "", 1, false, top}, tied), self);
}

// Every listed layout that fits this world size, each schedule and sequence parallel on and off
// at least once, pairwise rather than as a full product.
std::vector<Layout> layouts() {
  const std::string sp = "sequence_parallel = true\n", inter = "pipeline_schedule = \"interleaved_1f1b\"\n"
                         "virtual_pipeline_model_parallel_size = 2\n", gpipe = "pipeline_schedule = \"gpipe\"\n",
                    dist_opt = "use_distributed_optimizer = true\n";
  // Megatron's data parallelism as the sharded engines' component, over dp_shard (x cp).
  auto strategy = [](const std::string& s) { return "data_parallel_sharding_strategy = \"" + s + "\"\n"; };
  const std::string zero1 = strategy("optim"), zero2 = strategy("optim_grads"), zero3 = strategy("optim_grads_params");
  return {
      {"tp2", 2, "tp = 2\n", ""},
      {"tp2 sp", 2, "tp = 2\n", sp},
      {"pp2 1f1b", 2, "pp = 2\n", "", 1, true},
      {"pp2 gpipe", 2, "pp = 2\n", gpipe, 1, true},
      {"pp2 interleaved", 2, "pp = 2\n", inter, 1, true},
      {"dp2 distributed optimizer", 2, "dp_replicate = 2\n", dist_opt, 2},
      {"dp2 ZeRO-1 (optim)", 2, "dp_shard = 2\n", zero1, 2},
      {"dp2 ZeRO-2 (optim_grads)", 2, "dp_shard = 2\n", zero2, 2},
      {"dp2 ZeRO-3 (optim_grads_params)", 2, "", zero3, 2},
      {"dp2 ZeRO-3 checkpointing", 2, "", zero3, 2, false, "gradient_checkpointing = true\n"},
      // fsdp2's offload through the same sharded component (issue 44): shards in host memory.
      {"dp2 ZeRO-3 offload", 2, "", zero3 + "offload_params = true\n", 2},
      {"dp2 (bucketed all-reduce in backward)", 2, "dp_replicate = 2\n", "", 2, false, "ddp_bucket_cap_mb = 0.05\n"},
      {"tp4 sp (kv heads replicated)", 4, "tp = 4\n", sp},
      {"pp4 1f1b", 4, "pp = 4\n", "", 1, true},
      {"tp2 x pp2 sp interleaved", 4, "tp = 2\npp = 2\n", sp + inter},
      {"tp2 x pp2 gpipe", 4, "tp = 2\npp = 2\n", gpipe},
      {"tp2 x dp2 distributed optimizer", 4, "tp = 2\ndp_replicate = 2\n", dist_opt, 2},
      {"pp2 x dp2", 4, "pp = 2\ndp_replicate = 2\n", "", 2},
      {"tp2 x dp2 sp", 4, "tp = 2\ndp_replicate = 2\n", sp, 2},
      {"tp2 x dp2 sp ZeRO-3", 4, "tp = 2\ndp_shard = 2\n", sp + zero3, 2},
      {"tp2 x dp2 sp ZeRO-2 offload", 4, "tp = 2\ndp_shard = 2\n", sp + zero2 + "offload_params = true\n", 2},
      {"pp2 x dp2 ZeRO-3 1f1b", 4, "pp = 2\ndp_shard = 2\n", zero3, 2},
      {"pp2 x dp2 ZeRO-3 interleaved checkpointing", 4, "pp = 2\ndp_shard = 2\n", inter + zero3, 2, false,
       "gradient_checkpointing = true\n"},
      {"pp2 x dp2 ZeRO-2 interleaved", 4, "pp = 2\ndp_shard = 2\n", inter + zero2, 2},
      {"HSDP dp_replicate 2 x dp_shard 2 ZeRO-3", 4, "dp_replicate = 2\ndp_shard = 2\n", zero3, 4},
      {"tp4 sp ZeRO-3 (dp 1: nothing to shard)", 4, "tp = 4\n", sp + zero3},
      {"tp2 x pp2 x dp2 sp distributed optimizer", 8, "tp = 2\npp = 2\ndp_replicate = 2\n", sp + dist_opt, 2},
      {"tp2 x pp2 x dp2 interleaved", 8, "tp = 2\npp = 2\ndp_replicate = 2\n", inter, 2},
      {"tp2 x pp2 x dp2 sp interleaved ZeRO-3", 8, "tp = 2\npp = 2\ndp_shard = 2\n", sp + inter + zero3, 2},
      {"tp4 sp x dp2 ZeRO-3 (kv heads replicated)", 8, "tp = 4\ndp_shard = 2\n", sp + zero3, 2},
      {"pp2 x HSDP 2 x 2 ZeRO-2", 8, "pp = 2\ndp_replicate = 2\ndp_shard = 2\n", zero2, 4},
  };
}

void expect_parity(const Layout& l, const std::vector<double>& ref, bool tied = false) {
  SCOPED_TRACE(l.label);
  const auto got = losses_of(run_toml("megatron", 2, 8 / l.dp, l, tied), world());
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (l.bitwise) EXPECT_EQ(got[i], ref[i]) << "step " << i + 1 << " must be bitwise equal";
    else EXPECT_NEAR(got[i], ref[i], 1e-5 * std::abs(ref[i])) << "step " << i + 1;
    worst = std::max(worst, std::abs(got[i] - ref[i]) / std::abs(ref[i]));
  }
  if (world().rank() == 0) std::printf("[ megatron ] %-42s largest relative loss difference %.2e\n", l.label.c_str(), worst);
}

TEST(MegatronParity, Fp32MatchesOneRankReference) {
  const int n = world().size();
  if (n == 1) GTEST_SKIP() << "runs at 2, 4 and 8 ranks";
  at::set_num_threads(1);
  const auto ref = reference();
  int ran = 0;
  for (const Layout& l : layouts())
    if (l.ranks == n) {
      expect_parity(l, ref);
      ++ran;
    }
  if (n == 2 || n == 4 || n == 8) EXPECT_GT(ran, 0);
}

// The tied embedding lives on the first and the last stage; their gradients are summed (in
// another order than one rank adds them: within 1e-5, not bitwise).
TEST(MegatronParity, TiedEmbeddingsAcrossStages) {
  const int n = world().size();
  if (n != 2 && n != 4) GTEST_SKIP() << "runs at 2 and 4 ranks";
  at::set_num_threads(1);
  const auto ref = reference("", true);
  expect_parity(n == 2 ? Layout{"pp2 tied", 2, "pp = 2\n", ""}
                       : Layout{"tp2 x pp2 tied", 4, "tp = 2\npp = 2\n", "sequence_parallel = true\n"},
                ref, true);
  // Sharded over dp: each stage's copy is cut alike, and the pieces are summed.
  if (n == 4)
    expect_parity(Layout{"pp2 x dp2 ZeRO-3 tied", 4, "pp = 2\ndp_shard = 2\n",
                         "data_parallel_sharding_strategy = \"optim_grads_params\"\n", 2},
                  ref, true);
}

// bf16 autocast: each layout rounds its partial sums to bf16 at other points than one rank does
// (the row-parallel outputs are summed across ranks in fp32 after each rank's bf16 matmul). The
// loss is the mean over a batch, which averages these roundings down; as for the sharded engines
// the bound is 2e-3 relative, and the loss must fall.
TEST(MegatronParity, Bf16WithinBf16Rounding) {
  const int n = world().size();
  if (n != 2) GTEST_SKIP() << "runs at 2 ranks";
  at::set_num_threads(1);
  const auto ref = reference("bf16 = true\n");
  for (const Layout& l : {Layout{"tp2 sp bf16", 2, "tp = 2\n", "sequence_parallel = true\n", 1, false, "bf16 = true\n"},
                          Layout{"pp2 bf16", 2, "pp = 2\n", "", 1, false, "bf16 = true\n"},
                          // parameters gathered in bf16, as fsdp2's mixed precision
                          Layout{"dp2 ZeRO-3 bf16", 2, "", "data_parallel_sharding_strategy = \"optim_grads_params\"\n", 2,
                                 false, "bf16 = true\n"}}) {
    const auto got = losses_of(run_toml("megatron", 2, 8 / l.dp, l), world());
    double worst = 0.0;
    for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - ref[i]) / ref[i]);
    EXPECT_LT(worst, 2e-3) << l.label;
    EXPECT_LT(got.back(), 0.8 * got.front()) << l.label;
    if (world().rank() == 0) std::printf("[ megatron ] %s: largest relative loss difference %.2e\n", l.label.c_str(), worst);
  }
}

engine::MegatronEngine& megatron(train::Trainer& t) { return dynamic_cast<engine::MegatronEngine&>(t.engine()); }

// Each stage runs exactly its schedule's micro-steps, in order; 1F1B never holds more than pp
// micro-batches of activations (stage s: min(pp - s, m)), GPipe holds all m.
TEST(MegatronSchedule, StagesRunTheirScheduleWithBoundedActivations) {
  const int n = world().size();
  if (n != 2 && n != 4) GTEST_SKIP() << "runs at 2 and 4 ranks";
  const std::int64_t m = 8;
  for (const std::string schedule : {"1f1b", "gpipe", "interleaved_1f1b"}) {
    SCOPED_TRACE(schedule);
    const int v = schedule == "interleaved_1f1b" ? 2 : 1;
    if (n * v > 4) continue;  // 4 layers
    const Layout l{schedule, n, "pp = " + std::to_string(n) + "\n",
                   "pipeline_schedule = \"" + schedule + "\"\nvirtual_pipeline_model_parallel_size = " +
                       std::to_string(v) + "\n"};
    std::unique_ptr<DeviceMesh> mesh;
    auto trainer = make_trainer(run_toml("megatron", 2, static_cast<int>(m), l), world(), mesh);
    trainer->step();
    const auto& e = megatron(*trainer);
    const int stage = world().rank();
    const auto kind = engine::pipeline_schedule_kind(schedule);
    EXPECT_EQ(engine::pipeline_actions_str(e.executed()),
              engine::pipeline_actions_str(engine::pipeline_actions(kind, n, stage, m, v)));
    if (schedule == "1f1b") EXPECT_EQ(e.peak_live_chunks(), std::min<std::int64_t>(n - stage, m));
    if (schedule == "gpipe") EXPECT_EQ(e.peak_live_chunks(), m);
    if (schedule == "interleaved_1f1b") EXPECT_LT(e.peak_live_chunks(), m * v);
    const auto timing = engine::simulate_pipeline(kind, n, m, v, 1.0 / v, 2.0 / v);
    if (world().rank() == 0)
      std::printf("[ megatron ] pp %d %s: idle fraction %.3f (1f1b theory (pp-1)/(m+pp-1) = %.3f)\n", n,
                  schedule.c_str(), timing.idle_fraction, double(n - 1) / double(m + n - 1));
  }
}

// Payload bytes per step (docs/communication.md's convention) against the shapes, for B = 2
// sequences of T = 32 tokens per micro-batch, m = 8 micro-batches, hidden H = 32, L = 4 layers.
// tp 2 without sequence parallel, per micro-batch: forward all-reduces of [B, T, H] after the
// embedding and after each attention and MLP (1 + 2L), backward all-reduces before each
// column-parallel input (2L, and the lm_head's), and the loss's three all-reduces of [B (T-1)]
// floats; one 8-byte all-reduce for the gradient norm per step. With sequence parallel each of
// the [B, T, H] all-reduces becomes an all-gather or a reduce-scatter of the same payload, and
// the norms' gradients are all-reduced once per step. pp 2: each micro-batch sends [B, T, H]
// forward and its gradient back, one each way per stage boundary.
TEST(MegatronComm, BytesPerStepMatchTheShapes) {
  if (world().size() != 2) GTEST_SKIP() << "runs at 2 ranks";
  at::set_num_threads(1);
  const double B = 2, T = 32, H = 32, L = 4, m = 8, act = B * T * H * 4, loss = 3 * B * (T - 1) * 4;
  const double norm_params = (2 * L + 1) * H * 4;
  struct Expect {
    Layout layout;
    CollKind kind;
    std::string comm;
    double bytes;
  };
  const std::vector<Expect> expected = {
      {{"tp2", 2, "tp = 2\n", ""}, CollKind::AllReduce, "tp", m * ((2 + 4 * L) * act + loss) + 8},
      {{"tp2 sp", 2, "tp = 2\n", "sequence_parallel = true\n"}, CollKind::AllGather, "tp", m * (2 * L + 1) * act * 2},
      {{"tp2 sp", 2, "tp = 2\n", "sequence_parallel = true\n"}, CollKind::ReduceScatter, "tp", m * (2 * L + 1) * act * 2},
      {{"tp2 sp", 2, "tp = 2\n", "sequence_parallel = true\n"}, CollKind::AllReduce, "tp", m * loss + norm_params + 8},
      {{"pp2", 2, "pp = 2\n", ""}, CollKind::Send, "pp", m * act},
      {{"pp2", 2, "pp = 2\n", ""}, CollKind::Recv, "pp", m * act},
  };
  for (const Expect& x : expected) {
    SCOPED_TRACE(x.layout.label + " " + x.comm + " " + coll_kind_name(x.kind));
    std::unique_ptr<DeviceMesh> mesh;
    auto trainer = make_trainer(run_toml("megatron", 2, 8, x.layout), world(), mesh);
    trainer->step();
    for (Communicator* c : trainer->engine().communicators()) c->reset_stats();
    trainer->step();
    for (Communicator* c : trainer->engine().communicators()) {
      if (c->name() != x.comm) continue;
      const double moved = static_cast<double>(c->stats()[x.kind].bytes);
      if (world().rank() == 0)
        std::printf("[ megatron ] %-7s %-3s %-14s %10.0f bytes per step, theory %10.0f\n", x.layout.label.c_str(),
                    x.comm.c_str(), coll_kind_name(x.kind), moved, x.bytes);
      EXPECT_EQ(moved, x.bytes);
    }
  }
}

// Megatron's data parallelism is GradientBuckets (as ddp's): without the distributed optimizer the
// dp all-reduce moves every trained gradient once per step (fp32), in buckets of about
// ddp_bucket_cap_mb launched from backward hooks (make bench's megatron dp2 row measures how much
// of it the step still waits for).
TEST(MegatronComm, DataParallelGradientsAllReducedInBuckets) {
  if (world().size() != 2) GTEST_SKIP() << "runs at 2 ranks";
  at::set_num_threads(1);
  const Layout dp2{"dp2", 2, "dp_replicate = 2\n", "", 2, false, "ddp_bucket_cap_mb = 0.05\n"};
  std::unique_ptr<DeviceMesh> mesh;
  auto trainer = make_trainer(run_toml("megatron", 2, 4, dp2), world(), mesh);
  trainer->step();
  for (Communicator* c : trainer->engine().communicators()) c->reset_stats();
  trainer->step();
  double gradient_bytes = 0;
  for (const at::Tensor& p : trainer->engine().parameters()) gradient_bytes += static_cast<double>(p.numel()) * 4;
  for (Communicator* c : trainer->engine().communicators()) {
    if (c->name() != "dp") continue;
    const auto& s = c->stats()[CollKind::AllReduce];
    if (world().rank() == 0)
      std::printf("[ megatron ] dp2 all-reduce %.0f bytes in %lld calls per step, gradients %.0f bytes\n",
                  static_cast<double>(s.bytes), static_cast<long long>(s.calls), gradient_bytes);
    EXPECT_EQ(static_cast<double>(s.bytes), gradient_bytes);
    // 0.05 MiB buckets over ~0.3 MB of gradients: several, each its own call.
    EXPECT_GT(s.calls, 3);
  }
}

// Megatron's sharding strategies over dp_shard = 2 move what the sharded engines do (bus bytes
// per step, one micro-batch, P = the model's fp32 parameter bytes, n = 2): optim_grads_params
// all-gathers each layer twice (forward; again for backward) and the root unit once, and
// reduce-scatters once: (2 P + P_layers) (n-1)/n; optim and optim_grads one all-gather and one
// reduce-scatter: 2 P (n-1)/n. Slack 6%: uneven rows and the 8-byte norm all-reduce.
TEST(MegatronComm, ShardingStrategiesMoveWhatTheAlgorithmNeeds) {
  if (world().size() != 2) GTEST_SKIP() << "runs at 2 ranks";
  at::set_num_threads(1);
  for (const auto& [strategy, layers_twice] :
       {std::pair<std::string, double>{"optim", 0}, {"optim_grads", 0}, {"optim_grads_params", 1}}) {
    SCOPED_TRACE(strategy);
    const Layout l{strategy, 2, "dp_shard = 2\n", "data_parallel_sharding_strategy = \"" + strategy + "\"\n", 2};
    std::unique_ptr<DeviceMesh> mesh;
    auto trainer = make_trainer(run_toml("megatron", 2, 1, l), world(), mesh);
    double total = 0, layers = 0;
    const auto names = trainer->engine().parameter_names();
    const auto boxes = trainer->engine().parameter_boxes();
    for (std::size_t i = 0; i < names.size(); ++i) {
      double numel = 1;
      for (auto d : boxes[i].global_shape) numel *= static_cast<double>(d);
      total += 4 * numel;
      if (names[i].rfind("model.layers.", 0) == 0) layers += 4 * numel;
    }
    const double moved = test::bus_bytes_per_step(*trainer, 2);
    const double theory = (2 * total + layers_twice * layers) / 2;
    if (world().rank() == 0)
      std::printf("[ megatron ] dp_shard 2 %-18s moved %.0f B per step, algorithm %.0f B (%.3fx)\n",
                  strategy.c_str(), moved, theory, moved / theory);
    EXPECT_LE(moved, 1.06 * theory);
    EXPECT_GE(moved, 0.94 * theory);
  }
}

// Checkpoints hold global tensors: a megatron run (pp 2 at 2 ranks, tp 2 x pp 2 at 4; and sharded
// over dp with ZeRO-3) saved at step 10 continues under fsdp2, and an fsdp2 run continues under
// megatron (tp 2 with sequence parallel; and ZeRO-2 over dp), each matching the one-rank run's
// steps 11-20 within 1e-5.
TEST(MegatronCheckpoint, ResumesUnderAnotherEngineAndTheReverse) {
  const int n = world().size();
  if (n != 2 && n != 4) GTEST_SKIP() << "runs at 2 and 4 ranks";
  at::set_num_threads(1);
  const auto ref = reference();
  const std::string dir = "/tmp/lft_megatron_ckpt_np" + std::to_string(n);
  const Layout megatron_layout = n == 2 ? Layout{"pp2", 2, "pp = 2\n", ""} : Layout{"tp2 x pp2", 4, "tp = 2\npp = 2\n", ""};
  const Layout sp_layout{"tp2 sp", n, "tp = 2\n", "sequence_parallel = true\n", n / 2};
  const Layout fsdp2_layout{"fsdp2", n, "", "", n};
  struct Leg {
    std::string first_engine, then_engine;
    Layout first, then;
  };
  // Sharded over dp: ZeRO-3 pieces (cut from tp boxes at 4 ranks) saved, ZeRO-2 pieces loaded.
  const std::string zero = "data_parallel_sharding_strategy = \"optim_grads";
  const Layout zero3_layout = n == 2 ? Layout{"dp2 ZeRO-3", 2, "dp_shard = 2\n", zero + "_params\"\n", 2}
                                     : Layout{"tp2 x dp2 sp ZeRO-3", 4, "tp = 2\ndp_shard = 2\n",
                                              "sequence_parallel = true\n" + zero + "_params\"\n", 2};
  const Layout zero2_layout = n == 2 ? Layout{"dp2 ZeRO-2", 2, "dp_shard = 2\n", zero + "\"\n", 2}
                                     : Layout{"pp2 x dp2 ZeRO-2", 4, "pp = 2\ndp_shard = 2\n", zero + "\"\n", 2};
  for (const Leg& leg : {Leg{"megatron", "fsdp2", megatron_layout, fsdp2_layout},
                         Leg{"fsdp2", "megatron", fsdp2_layout, sp_layout},
                         Leg{"megatron", "fsdp2", zero3_layout, fsdp2_layout},
                         Leg{"fsdp2", "megatron", fsdp2_layout, zero2_layout}}) {
    SCOPED_TRACE(leg.first_engine + " -> " + leg.then_engine);
    const std::string out = dir + "_" + leg.first_engine;
    Layout first = leg.first, then = leg.then;
    first.top = "output_dir = \"" + out + "\"\n";
    then.top = first.top + "resume_from_checkpoint = \"auto\"\n";
    std::string saved;
    {
      std::unique_ptr<DeviceMesh> mesh;
      auto trainer = make_trainer(run_toml(leg.first_engine, 2, 8 / first.dp, first), world(), mesh);
      for (int i = 0; i < 10; ++i) trainer->step();
      saved = trainer->save();
    }
    std::unique_ptr<DeviceMesh> mesh;
    auto trainer = make_trainer(run_toml(leg.then_engine, 2, 8 / then.dp, then), world(), mesh);
    ASSERT_EQ(trainer->current_step(), 10) << "resumed from " << saved;
    for (int i = 10; i < 20; ++i)
      EXPECT_NEAR(trainer->step().loss, ref[static_cast<std::size_t>(i)], 1e-5 * ref[static_cast<std::size_t>(i)])
          << "step " << i + 1;
    world().barrier();
    if (world().rank() == 0) std::system(("rm -rf " + out).c_str());
  }
}

// A rank never holds the whole model: built without parameter memory, the engine generates one
// parameter at a time and keeps its box (tp 2 at 2 ranks, tp 2 x pp 2 at 4). The tensor memory
// allocated while setting up is what the rank keeps plus about one whole parameter.
TEST(MegatronMemory, SetUpHoldsTheRanksShareNotTheModel) {
  const int n = world().size();
  if (n != 2 && n != 4) GTEST_SKIP() << "runs at 2 and 4 ranks";
  const std::string toml = std::string("distributed = \"megatron\"\ntrain_dataset = \"inputs/data/arithmetic.txt\"\n"
                                       "gradient_accumulation_steps = 2\ncutoff_len = 32\n[mesh]\ntp = 2\npp = ") +
                           (n == 4 ? "2" : "1") +
                           "\n[model]\nvocab_size = 512\nhidden_size = 128\nintermediate_size = 352\n"
                           "num_hidden_layers = 8\nnum_attention_heads = 4\nnum_key_value_heads = 2\n";
  const config::Config cfg = config::parse_config(toml, "megatron.toml");
  const engine::EngineInfo& info = engine::engine_for(cfg);
  DeviceMesh mesh(world(), engine::plan_mesh(cfg, info, n));
  const auto model_config = model::ModelConfig::from_run_config(cfg);
  const double model_bytes = 4.0 * static_cast<double>(model_config.num_parameters());
  const double largest = 4.0 * 512 * 128;  // embed_tokens and lm_head, whole
  reset_cpu_peak_bytes();
  const std::int64_t base = cpu_bytes_in_use();
  const engine::RunPlan plan = engine::resolve_run_plan(cfg, mesh.shape());
  auto engine = info.create(engine::EngineContext{mesh, plan});
  std::optional<model::UnallocatedParameters> unallocated(std::in_place);
  const auto m = model::create_causal_lm(model_config);
  unallocated.reset();
  engine->prepare_from(*m, model::InitWeights(*m, 7));
  const double peak = static_cast<double>(cpu_peak_bytes_in_use() - base);
  double kept = 0;
  for (const auto& t : engine->parameters()) kept += 4.0 * static_cast<double>(t.numel());
  if (world().rank() == 0)
    std::printf("[ megatron ] set-up at %d ranks: peak %.2f MB, kept %.2f MB, model %.2f MB\n", n, peak / 1e6,
                kept / 1e6, model_bytes / 1e6);
  EXPECT_LE(peak, kept + 2 * largest + 65536);
  EXPECT_LT(kept, 1.3 * model_bytes / n);
  // The box values are the whole init's.
  const auto names = engine->parameter_names();
  const auto boxes = engine->parameter_boxes();
  const auto params = engine->parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    at::Tensor whole = model::init_parameter(names[i], boxes[i].global_shape, 7);
    for (std::size_t d = 0; d < boxes[i].offset.size(); ++d)
      whole = whole.narrow(static_cast<std::int64_t>(d), boxes[i].offset[d], params[i].size(static_cast<std::int64_t>(d)));
    EXPECT_TRUE(at::equal(whole, params[i])) << names[i];
  }
}

// The vocab-parallel loss never forms [tokens, vocab] logits: with a vocabulary of 8192 and 256
// tokens per micro-batch the whole logits are 8 MiB of fp32; at tp 2 no single allocation of a
// step reaches that (a rank's logits and softmax are [tokens, vocab / 2]), while the one-rank run
// allocates the whole logits.
TEST(MegatronMemory, VocabParallelLossNeverFormsTheWholeLogits) {
  if (world().size() != 2) GTEST_SKIP() << "runs at 2 ranks";
  at::set_num_threads(1);
  auto big_vocab = [](const std::string& engine, const std::string& mesh, int accum) {
    return "distributed = \"" + engine + "\"\ntrain_dataset = \"inputs/data/arithmetic.txt\"\n"
           "per_device_train_batch_size = 2\ngradient_accumulation_steps = " + std::to_string(accum) +
           "\ncutoff_len = 128\nmax_steps = 3\nseed = 3\n" + mesh +
           "[model]\nvocab_size = 8192\nhidden_size = 32\nintermediate_size = 64\nnum_hidden_layers = 2\n"
           "num_attention_heads = 4\nnum_key_value_heads = 2\n";
  };
  const double whole_logits = 2.0 * 128 * 8192 * 4;
  auto largest_in_step = [&](const std::string& toml, MpiCommunicator& comm) {
    std::unique_ptr<DeviceMesh> mesh;
    auto trainer = make_trainer(toml, comm, mesh);
    trainer->step();
    reset_cpu_peak_bytes();
    trainer->step();
    return static_cast<double>(cpu_largest_allocation());
  };
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  const double one_rank = largest_in_step(big_vocab("none", "", 2), self);
  const double tp2 = largest_in_step(big_vocab("megatron", "[mesh]\ntp = 2\n", 2), world());
  if (world().rank() == 0)
    std::printf("[ megatron ] largest allocation in a step: one rank %.2f MiB, tp 2 %.2f MiB; whole logits %.2f MiB\n",
                one_rank / 1048576, tp2 / 1048576, whole_logits / 1048576);
  EXPECT_GE(one_rank, whole_logits);
  EXPECT_LT(tp2, whole_logits);
  EXPECT_LE(tp2, whole_logits / 2);
}

}  // namespace
}  // namespace lft
