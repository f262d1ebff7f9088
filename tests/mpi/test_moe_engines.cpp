// Mixtures of experts train under every engine exactly as the one-rank run of the same folder,
// computed in the same test run (each rank alone over MPI_COMM_SELF): the same global batch of 24
// sequences in micro-batches of 2, 8 steps. Each forward's auxiliary load-balancing loss is over
// that micro-batch's tokens (as transformers'), so the one-rank run cuts the batch into the same
// micro-batches (2 sequences, 12 of them); the losses compared include the auxiliary term. fp32;
// losses and gradient norms within 1e-5 relative.
//  - Qwen3-MoE: 8 experts, renormalised top-2, the auxiliary loss on (coefficient 0.05), SFT data
//    with padding (the routing statistics leave it out), under ddp, fsdp2 (with checkpointing:
//    the recomputed layer gets the auxiliary gradient), FULL_SHARD, ZeRO-3, megatron tp 2 (with
//    sequence parallelism: each tp rank routes all the tokens and adds 1 / tp of the auxiliary
//    gradient), context parallelism (the counts summed over the cp group, its padding left out).
//  - Qwen2-MoE: a shared expert with its gate, layer 2 dense, no auxiliary loss: pipelines too.
//  - A Qwen3-MoE checkpoint of fsdp2 at 2 or 4 ranks resumes alone on each rank (engine none)
//    and continues the straight run.
#include <ATen/Parallel.h>

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <map>

#include "lft/ckpt/checkpoint_files.h"
#include "lft/model/families.h"
#include "lft/model/init.h"
#include "lft/model/safetensors.h"
#include "model_folder.h"
#include "mpi_test_util.h"
#include "trainer_util.h"

namespace lft {
namespace {

using test::world;

constexpr int kSteps = 8;

model::ModelConfig moe_config(const std::string& family) {
  model::ModelConfig c;
  c.model_type = family;
  c.vocab_size = 259;
  c.hidden_size = 32;
  c.intermediate_size = 40;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.explicit_head_dim = 16;
  c.rope_theta = 1000000.0;
  c.moe.experts_per_token = 2;
  c.moe.expert_intermediate_size = 24;
  if (family == "qwen3_moe") {
    c.qk_norm = true;
    c.moe.num_experts = 8;
    c.moe.normalize_top_k = true;
    c.moe.output_router_logits = true;
    c.moe.router_aux_loss_coef = 0.05;
  } else {  // qwen2_moe
    c.attention_bias = true;
    c.moe.num_experts = 4;
    c.moe.shared_expert_intermediate_size = 20;
    c.moe.dense_layers = {2};
    c.moe.output_router_logits = false;
  }
  return c;
}

// The router's 0.02 init leaves routing near uniform; larger router weights make it uneven, so
// that the auxiliary loss and its gradient are far from their balanced values.
std::string moe_folder(const std::string& family) {
  return test::write_model_folder("/tmp/lft_moe_" + family + "_np" + std::to_string(world().size()),
                                  moe_config(family), 11, [](const std::string& name, const at::Tensor& t) {
                                    return name.find("mlp.gate.weight") != std::string::npos ? t * 50 : t;
                                  });
}

std::string run_toml(const std::string& folder, const std::string& engine, int accum, const std::string& extra) {
  return "distributed = \"" + engine + "\"\nmodel_name_or_path = \"" + folder +
         "\"\ntokenizer = \"bytes\"\nper_device_train_batch_size = 2\ngradient_accumulation_steps = " +
         std::to_string(accum) +
         "\ncutoff_len = 32\nlearning_rate = 3e-3\nweight_decay = 0.01\nwarmup_steps = 2\nseed = 7\n" +
         (extra.find("max_steps") == std::string::npos ? "max_steps = 20\n" : "") + extra;
}

struct Case {
  std::string label, engine, extra;
  int ranks;     // 0: any world size; else exactly this many
  int dp_ranks;  // data-parallel ranks of that layout (0: all)
};

void engines_match_the_one_rank_run(const std::string& family, const std::string& data, const std::vector<Case>& cases) {
  const int n = world().size();
  at::set_num_threads(1);
  const std::string folder = moe_folder(family);
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  const auto reference = test::losses_and_grad_norms(run_toml(folder, "none", 12, data), self, kSteps);
  for (const Case& c : cases) {
    if (c.ranks != 0 && c.ranks != n) continue;
    SCOPED_TRACE(c.label);
    const int dp = c.dp_ranks == 0 ? n : c.dp_ranks;
    const auto got = test::losses_and_grad_norms(run_toml(folder, c.engine, 24 / (2 * dp), data + c.extra), world(), kSteps);
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i].first, reference[i].first, 1e-5 * std::abs(reference[i].first))
          << family << ", " << c.label << " step " << i + 1;
      EXPECT_NEAR(got[i].second, reference[i].second, 1e-5 * std::abs(reference[i].second))
          << family << ", " << c.label << " gradient norm, step " << i + 1;
    }
  }
}

bool runs_here() { return world().size() == 2 || world().size() == 4; }

TEST(MoeEngines, Qwen3MoeWithAuxLossMatchesTheOneRankRun) {
  if (!runs_here()) GTEST_SKIP() << "runs at 2 and 4 ranks";
  const std::string sft = "stage = \"sft\"\ntrain_dataset = \"inputs/data/arithmetic_alpaca.json\"\ntemplate = \"default\"\n";
  engines_match_the_one_rank_run(
      "qwen3_moe", sft,
      {{"ddp", "ddp", "", 0, 0},
       {"fsdp2 checkpointing", "fsdp2", "gradient_checkpointing = true\n", 0, 0},
       {"fsdp FULL_SHARD", "fsdp", "", 4, 0},
       {"ZeRO-3", "deepspeed", "deepspeed = \"inputs/ds_z3_config.json\"\n", 0, 0},
       {"megatron tp 2 sp", "megatron", "[mesh]\ntp = 2\n[dist_config]\nsequence_parallel = true\n", 2, 1},
       {"fsdp2 cp 2", "fsdp2", "[mesh]\ncp = 2\n", 2, 1},
       {"megatron tp 2 x cp 2, checkpointing", "megatron", "gradient_checkpointing = true\n[mesh]\ntp = 2\ncp = 2\n", 4, 1}});
}

TEST(MoeEngines, Qwen2MoeWithSharedExpertMatchesTheOneRankRun) {
  if (!runs_here()) GTEST_SKIP() << "runs at 2 and 4 ranks";
  engines_match_the_one_rank_run("qwen2_moe", "train_dataset = \"inputs/data/arithmetic.txt\"\n",
                                 {{"fsdp2", "fsdp2", "", 2, 0},
                                  {"megatron pp 2", "megatron", "[mesh]\npp = 2\n", 2, 1},
                                  {"megatron tp 2 x pp 2", "megatron", "[mesh]\ntp = 2\npp = 2\n", 4, 1},
                                  {"ZeRO-2", "deepspeed", "deepspeed = \"inputs/ds_z2_config.json\"\n", 4, 0}});
}

// Trains to max_steps over `comm`, saving at step `save_at` (> 0); the losses of the steps it ran.
std::vector<double> train_saving(const std::string& toml, MpiCommunicator& comm, int save_at) {
  std::unique_ptr<DeviceMesh> mesh;
  auto trainer = test::make_trainer(toml, comm, mesh);
  std::vector<double> losses;
  while (trainer->current_step() < trainer->total_steps()) {
    losses.push_back(trainer->step().loss);
    if (trainer->current_step() == save_at) trainer->save();
  }
  return losses;
}

TEST(MoeEngines, Qwen3MoeCheckpointOfFsdp2ResumesAloneOnEachRank) {
  if (!runs_here()) GTEST_SKIP() << "runs at 2 and 4 ranks";
  at::set_num_threads(1);
  const std::string folder = moe_folder("qwen3_moe");
  const std::string dir = test::shared_temp_dir("lft-moe-resume");
  const std::string sft = "stage = \"sft\"\ntrain_dataset = \"inputs/data/arithmetic_alpaca.json\"\ntemplate = \"default\"\n";
  const std::string steps = "max_steps = 10\nsave_strategy = \"no\"\n";
  const auto straight = train_saving(run_toml(folder, "fsdp2", 24 / (2 * world().size()),
                                              sft + steps + "output_dir = \"" + dir + "\"\n"), world(), 5);
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  const std::string mine = dir + "/alone-" + std::to_string(world().rank());
  const auto resumed = train_saving(run_toml(folder, "none", 12, sft + steps + "output_dir = \"" + mine +
                                             "\"\nresume_from_checkpoint = \"" + dir + "/checkpoint-5\"\n"),
                                    self, 0);
  ASSERT_EQ(resumed.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i)
    EXPECT_NEAR(resumed[i], straight[5 + i], 1e-5 * straight[5 + i]) << "step " << 6 + i;
  world().barrier();
  if (world().rank() == 0) ckpt::remove_tree(dir);
}

}  // namespace
}  // namespace lft
