// Mixtures of experts train under every engine exactly as the one-rank run of the same folder
// (moe_runs.h). Each forward's auxiliary load-balancing loss is over that micro-batch's tokens (as
// transformers'), so the one-rank run cuts the batch into the same micro-batches (2 sequences, 12
// of them); the losses compared include the auxiliary term.
//  - Qwen3-MoE: 8 experts, renormalised top-2, the auxiliary loss on (coefficient 0.05), SFT data
//    with padding (the routing statistics leave it out), under ddp, fsdp2 (with checkpointing:
//    the recomputed layer gets the auxiliary gradient), FULL_SHARD, ZeRO-3, megatron tp 2 (with
//    sequence parallelism: each tp rank routes all the tokens and adds 1 / tp of the auxiliary
//    gradient), context parallelism (the counts summed over the cp group, its padding left out).
//  - Qwen2-MoE: a shared expert with its gate, layer 2 dense, no auxiliary loss: pipelines too.
//  - A Qwen3-MoE checkpoint of fsdp2 at 2 or 4 ranks resumes alone on each rank (engine none)
//    and continues the straight run.
#include "lft/ckpt/checkpoint_files.h"
#include "moe_runs.h"

namespace lft {
namespace {

using test::engines_match_the_one_rank_run;
using test::moe_folder;
using test::run_toml;
using test::train_saving;
using test::world;

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
