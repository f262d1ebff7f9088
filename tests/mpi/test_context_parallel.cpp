// Context parallelism (Ulysses, [mesh] cp): the sequence exchanges are each other's inverse and
// their backward passes are the exchanges' transposes, and every engine that takes cp trains as
// the one-rank run of the same global batch (fp32: step 1 within 1e-6, later steps and gradient
// norms within 1e-5 relative), with padding (cutoff not a multiple of cp), packed sequences (neat
// packing: segments across the chunks), checkpointing, LoRA and dp x cp layouts.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "lft/engine/context_parallel.h"
#include "lft/train/trainer.h"
#include "mpi_test_util.h"
#include "trainer_util.h"

namespace lft {
namespace {

using test::make_trainer;
using test::world;

TEST(ContextParallel, ExchangesAreInversesAndTheirGradientsTransposes) {
  if (world().size() == 1) GTEST_SKIP() << "needs a cp group of 2 or more ranks";
  engine::CommSequenceExchange group(world());
  const int n = world().size();
  at::manual_seed(11 + world().rank());
  const at::Tensor x = at::randn({2, 3, 2 * n, 4}, at::kDouble).requires_grad_();  // [B, chunk, heads, d]
  const at::Tensor whole = model::sequence_to_heads(group, x);
  ASSERT_EQ(whole.sizes(), (std::vector<int64_t>{2, 3 * n, 2, 4}));
  // Rank r's heads [2r, 2r + 2) of chunk c are chunk c's rows of the result.
  at::Tensor gathered = at::empty({n * x.numel()}, at::kDouble);
  world().all_gather(x.detach().contiguous().reshape({-1}), gathered);
  const at::Tensor all = gathered.view({n, 2, 3, 2 * n, 4});
  for (int c = 0; c < n; ++c)
    EXPECT_TRUE(at::equal(whole.detach().narrow(1, 3 * c, 3), all[c].narrow(2, 2 * world().rank(), 2)));
  const at::Tensor back = model::heads_to_sequence(group, whole);
  EXPECT_TRUE(at::equal(back.detach(), x.detach()));
  // <g, f(x)> summed over the ranks equals <f^T(g), x>: each exchange's backward is its transpose.
  const at::Tensor g = at::randn(whole.sizes(), at::kDouble);
  (whole * g).sum().backward();
  auto dot = at::full({2}, 0.0, at::kDouble);
  dot[0] = (whole.detach() * g).sum();
  dot[1] = (x.grad() * x.detach()).sum();
  world().all_reduce(dot);
  EXPECT_NEAR(dot[0].item<double>(), dot[1].item<double>(), 1e-9 * std::abs(dot[0].item<double>()));
  // gather_sequence: every chunk in rank order; backward keeps this rank's chunk.
  const at::Tensor piece = at::full({2, 3}, static_cast<double>(world().rank()), at::kDouble).requires_grad_();
  const at::Tensor seq = model::gather_sequence(group, piece);
  for (int c = 0; c < n; ++c) EXPECT_TRUE(at::equal(seq.detach().narrow(1, 3 * c, 3), at::full({2, 3}, double(c), at::kDouble)));
  (seq * at::arange(3 * n, at::kDouble)).sum().backward();
  EXPECT_TRUE(at::equal(piece.grad()[0], at::arange(3 * n, at::kDouble).narrow(0, 3 * world().rank(), 3)));
}

constexpr int kSteps = 6;
constexpr int kGlobal = 12;  // sequences per step

std::string run_toml(const std::string& engine, int micro, int accum, int kv_heads, int cutoff, const std::string& extra) {
  const bool own_data = extra.find("train_dataset") != std::string::npos;
  return "distributed = \"" + engine + "\"\n" + (own_data ? "" : "train_dataset = \"inputs/data/arithmetic.txt\"\n") +
         "per_device_train_batch_size = " + std::to_string(micro) + "\ngradient_accumulation_steps = " +
         std::to_string(accum) + "\ncutoff_len = " + std::to_string(cutoff) + "\nlearning_rate = 3e-3\nweight_decay = 0.01\nwarmup_steps = 2\n"
         "max_steps = 20\nseed = 7\n" + extra +
         "[model]\nvocab_size = 259\nhidden_size = 32\nintermediate_size = 64\nnum_hidden_layers = 2\n"
         "num_attention_heads = 4\nnum_key_value_heads = " + std::to_string(kv_heads) + "\n";
}

std::vector<std::pair<double, double>> steps_of(const std::string& toml, MpiCommunicator& comm) {
  std::unique_ptr<DeviceMesh> mesh;
  auto trainer = make_trainer(toml, comm, mesh);
  std::vector<std::pair<double, double>> out;
  for (int i = 0; i < kSteps; ++i) {
    const train::StepResult r = trainer->step();
    out.emplace_back(r.loss, r.grad_norm);
  }
  return out;
}

struct Case {
  std::string label, engine, top, mesh;  // top: keys before [mesh]; mesh: its lines
  int ranks, dp, kv_heads;
  int cutoff = 32;
};

std::vector<Case> cases() {
  const std::string sft = "stage = \"sft\"\ntrain_dataset = \"inputs/data/arithmetic_alpaca.json\"\ntemplate = \"default\"\n";
  return {
      {"ddp cp 2", "ddp", "", "cp = 2\n", 2, 1, 2},
      {"fsdp2 cp 2", "fsdp2", "", "cp = 2\n", 2, 1, 2},
      {"fsdp2 cp 2, checkpointing", "fsdp2", "gradient_checkpointing = true\n", "cp = 2\n", 2, 1, 2},
      {"fsdp cp 2", "fsdp", "", "cp = 2\n", 2, 1, 2},
      {"ZeRO-3 cp 2", "deepspeed", "", "cp = 2\n", 2, 1, 2},
      {"ddp cp 2, LoRA", "ddp", "finetuning_type = \"lora\"\nlora_rank = 4\n", "cp = 2\n", 2, 1, 2},
      {"fsdp2 cp 2, sft with neat packing", "fsdp2", sft + "packing = true\nneat_packing = true\n", "cp = 2\n", 2, 1, 2},
      {"ddp cp 2, sft, cutoff 31 (chunks padded)", "ddp", sft, "cp = 2\n", 2, 1, 2, 31},
      {"fsdp2 cp 2, pt, cutoff 31 (chunks padded)", "fsdp2", "", "cp = 2\n", 2, 1, 2, 31},
      {"fsdp2 dp_shard 2 x cp 2", "fsdp2", "", "dp_shard = 2\ncp = 2\n", 4, 2, 2},
      {"fsdp2 HSDP dp_replicate 2 x cp 2", "fsdp2", "", "dp_replicate = 2\ndp_shard = 1\ncp = 2\n", 4, 2, 2},
      {"ddp dp 2 x cp 2, sft with neat packing", "ddp", sft + "packing = true\nneat_packing = true\n", "cp = 2\n", 4, 2, 2},
      {"ddp cp 4", "ddp", "", "cp = 4\n", 4, 1, 4},
      {"fsdp2 cp 4, 2 kv heads (repeated per query head)", "fsdp2", "", "cp = 4\n", 4, 1, 2},
      {"megatron cp 2", "megatron", "", "cp = 2\n", 2, 1, 2},
      {"megatron tp 2 x cp 2 (1 kv head per tp rank, repeated)", "megatron", "", "tp = 2\ncp = 2\n", 4, 1, 2},
      {"megatron tp 2 sp x cp 2, cutoff 30", "megatron", "", "tp = 2\ncp = 2\n[dist_config]\nsequence_parallel = true\n", 4, 1,
       4, 30},
      {"megatron pp 2 x cp 2, sft with neat packing", "megatron", sft + "packing = true\nneat_packing = true\n",
       "pp = 2\ncp = 2\n", 4, 1, 2},
      {"megatron dp 2 x cp 2, distributed optimizer", "megatron", "",
       "cp = 2\n[dist_config]\nuse_distributed_optimizer = true\n", 4, 2, 2},
      {"megatron tp 2 x cp 2 x pp 2, checkpointing", "megatron", "gradient_checkpointing = true\n",
       "tp = 2\ncp = 2\npp = 2\n", 8, 1, 2},
  };
}

TEST(ContextParallel, EveryEngineMatchesTheOneRankRun) {
  const int n = world().size();
  if (n != 2 && n != 4 && n != 8) GTEST_SKIP() << "runs at 2, 4 and 8 ranks";
  at::set_num_threads(1);
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  for (const Case& c : cases()) {
    if (c.ranks != n) continue;
    SCOPED_TRACE(c.label);
    const int micro = 2, accum = kGlobal / (micro * c.dp);
    const auto reference = steps_of(run_toml("none", micro, kGlobal / micro, c.kv_heads, c.cutoff, c.top), self);
    const std::string own = c.engine == "deepspeed" ? "deepspeed = \"inputs/ds_z3_config.json\"\n" : "";
    const auto got = steps_of(run_toml(c.engine, micro, accum, c.kv_heads, c.cutoff, own + c.top + "[mesh]\n" + c.mesh), world());
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double tol = i == 0 ? 1e-6 : 1e-5;
      EXPECT_NEAR(got[i].first, reference[i].first, tol * std::abs(reference[i].first)) << c.label << " step " << i + 1;
      EXPECT_NEAR(got[i].second, reference[i].second, 1e-5 * std::abs(reference[i].second))
          << c.label << " gradient norm, step " << i + 1;
    }
  }
}

// Per micro-batch and decoder layer, Ulysses exchanges q, k, v and the attention output forward
// and their gradients backward (and q, k, v, o again when a checkpointed layer is recomputed):
// each all-to-all hands the wire this rank's B x chunk x heads x head_dim values; the losses are
// gathered once per micro-batch (B x padded fp32). The cp communicator counts exactly that.
TEST(ContextParallel, BytesPerStepMatchTheExchanges) {
  if (world().size() != 2) GTEST_SKIP() << "runs at 2 ranks";
  for (const bool checkpointing : {false, true}) {
    SCOPED_TRACE(checkpointing ? "checkpointing" : "no checkpointing");
    const int micro = 2, accum = 3, cutoff = 31, cp = 2, layers = 2, heads = 4, kv = 2, head_dim = 8;
    std::unique_ptr<DeviceMesh> mesh;
    auto trainer = make_trainer(run_toml("ddp", micro, accum, kv, cutoff,
                                         std::string(checkpointing ? "gradient_checkpointing = true\n" : "") + "[mesh]\ncp = 2\n"),
                                world(), mesh);
    Communicator& group = mesh->device_comm(MeshDim::CP);
    group.reset_stats();
    trainer->step();
    const std::uint64_t padded = (cutoff + cp - 1) / cp * cp, chunk = padded / cp;
    const std::uint64_t passes = checkpointing ? 3 : 2;  // forward, backward (+ the recomputed forward)
    const std::uint64_t per_layer = passes * micro * chunk * head_dim * (2 * heads + 2 * kv) * 4;
    EXPECT_EQ(group.stats()[CollKind::AllToAll].calls, static_cast<std::uint64_t>(accum * layers * passes * 4));
    EXPECT_EQ(group.stats()[CollKind::AllToAll].bytes, accum * layers * per_layer);
    EXPECT_EQ(group.stats()[CollKind::AllGather].calls, static_cast<std::uint64_t>(accum));
    EXPECT_EQ(group.stats()[CollKind::AllGather].bytes, accum * micro * padded * 4);
  }
}

}  // namespace
}  // namespace lft
