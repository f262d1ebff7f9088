// Checkpoint and resume: 20 steps straight against 10 + save + resume + 10, on the same layout
// (bitwise) and on another world size and engine (within 1e-5), and the errors a resume must give.
#include <fstream>
#include <ATen/Parallel.h>
#include <stdlib.h>

#include "lft/ckpt/checkpoint.h"
#include "lft/ckpt/checkpoint_files.h"
#include "lft/config/config.h"
#include "lft/engine/run_plan.h"
#include "lft/train/trainer.h"
#include "mpi_test_util.h"
#include "tiny_run.h"
#include "trainer_util.h"

namespace lft {
namespace {

using test::tiny_run;
using test::world;

std::string shared_temp_dir() { return test::shared_temp_dir("lft-resume"); }

struct Run {
  std::vector<double> losses;
  std::int64_t first_step = 0;
};

// Trains to step 20 over `comm` (saving at step `save_at` when > 0), losses of the steps it ran.
Run train(const std::string& toml, MpiCommunicator& comm, int save_at = 0) {
  const config::Config cfg = config::parse_config(toml, "resume.toml");
  DeviceMesh mesh(comm, MeshShape{{1, comm.size(), 1, 1, 1}});
  const engine::RunPlan plan = engine::resolve_run_plan(cfg, mesh.shape());
  train::Trainer trainer(cfg, plan, mesh, DeviceChoice{});
  Run run;
  run.first_step = trainer.current_step();
  while (trainer.current_step() < trainer.total_steps()) {
    run.losses.push_back(trainer.step().loss);
    if (trainer.current_step() == save_at) trainer.save();
  }
  return run;
}

// Global batch 24 = micro 1 x accumulation x ranks, at any world size that divides 24.
int accum_for(int ranks) { return 24 / ranks; }

// Resumed at step 10 on another layout, and alone on this rank (`finetuning` + `from`, written to
// DIR/single-<rank>): both continue as `straight` did, within 1e-5.
void expect_resumed_alone_and_elsewhere(const Run& straight, const Run& other, const std::string& finetuning,
                                        const std::string& dir, const std::string& from) {
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  const auto alone = train(
      tiny_run("none", 2, 12, finetuning + "output_dir = \"" + dir + "/single-" + std::to_string(world().rank()) + "\"\n" + from),
      self);
  ASSERT_EQ(other.first_step, 10);
  ASSERT_EQ(alone.first_step, 10);
  for (std::size_t i = 0; i < 10; ++i) {
    EXPECT_NEAR(other.losses[i], straight.losses[10 + i], 1e-5 * straight.losses[10 + i]) << "step " << 11 + i;
    EXPECT_NEAR(alone.losses[i], straight.losses[10 + i], 1e-5 * straight.losses[10 + i]) << "step " << 11 + i;
  }
}

TEST(Resume, SameLayoutContinuesBitwise) {
  if (24 % world().size() != 0) GTEST_SKIP() << "global batch 24 needs a world size dividing 24";
  at::set_num_threads(1);
  const std::string dir = shared_temp_dir();
  const int accum = accum_for(world().size());
  const auto straight = train(tiny_run("ddp", 1, accum, "output_dir = \"" + dir + "\"\n"), world(), 10);
  const auto resumed = train(tiny_run("ddp", 1, accum, "output_dir = \"" + dir + "/b\"\n"
                                      "resume_from_checkpoint = \"" + dir + "/checkpoint-10\"\n"),
                             world());
  ASSERT_EQ(resumed.first_step, 10);
  ASSERT_EQ(resumed.losses.size(), 10u);
  for (std::size_t i = 0; i < 10; ++i)
    EXPECT_EQ(resumed.losses[i], straight.losses[10 + i]) << "step " << 11 + i;
  world().barrier();
  if (world().rank() == 0) ckpt::remove_tree(dir);
}

// batching_strategy = "dynamic_batching" keeps no state of its own in a checkpoint: the resumed
// run replays the cut up to its step and continues bitwise (fsdp2: the ranks' micro-batches hold
// different numbers of sequences, their losses gathered by count).
TEST(Resume, DynamicBatchingReplaysItsCutAndContinuesBitwise) {
  if (world().size() > 4) GTEST_SKIP() << "runs at 1 to 4 ranks";
  at::set_num_threads(1);
  const std::string dir = shared_temp_dir();
  const std::string dynamic = "batching_strategy = \"dynamic_batching\"\n";
  const auto straight = train(tiny_run("fsdp2", 4, 2, dynamic + "output_dir = \"" + dir + "\"\n"), world(), 10);
  const auto resumed = train(tiny_run("fsdp2", 4, 2, dynamic + "output_dir = \"" + dir + "/b\"\n"
                                      "resume_from_checkpoint = \"" + dir + "/checkpoint-10\"\n"),
                             world());
  ASSERT_EQ(resumed.first_step, 10);
  ASSERT_EQ(resumed.losses.size(), 10u);
  for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(resumed.losses[i], straight.losses[10 + i]) << "step " << 11 + i;
  // The cut differs from the normal batching's (the arithmetic lines are shorter than cutoff_len,
  // so a budget of 4 x 32 takes more than 4 of them).
  const auto normal = train(tiny_run("fsdp2", 4, 2, "output_dir = \"" + dir + "/c\"\n"), world());
  EXPECT_NE(normal.losses[0], straight.losses[0]);
  world().barrier();
  if (world().rank() == 0) ckpt::remove_tree(dir);
}

TEST(Resume, OneRankEngineContinuesARunOfAnotherWorldSize) {
  if (24 % world().size() != 0) GTEST_SKIP() << "global batch 24 needs a world size dividing 24";
  at::set_num_threads(1);
  const std::string dir = shared_temp_dir();
  const auto straight = train(tiny_run("ddp", 1, accum_for(world().size()),
                                       "output_dir = \"" + dir + "\"\n"), world(), 10);
  // Every rank resumes alone (MPI_COMM_SELF), with engine none: micro 2 x accumulation 12.
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  const std::string mine = dir + "/single-" + std::to_string(world().rank());
  const auto resumed = train(tiny_run("none", 2, 12, "output_dir = \"" + mine + "\"\n"
                                      "save_strategy = \"no\"\n"
                                      "resume_from_checkpoint = \"auto\"\n"), self);
  EXPECT_EQ(resumed.first_step, 0) << "auto finds nothing in an empty output_dir";
  const auto from_checkpoint = train(tiny_run("none", 2, 12, "output_dir = \"" + mine + "\"\n"
                                              "resume_from_checkpoint = \"" + dir + "/checkpoint-10\"\n"),
                                     self);
  ASSERT_EQ(from_checkpoint.first_step, 10);
  for (std::size_t i = 0; i < 10; ++i)
    EXPECT_NEAR(from_checkpoint.losses[i], straight.losses[10 + i], 1e-5 * straight.losses[10 + i])
        << "step " << 11 + i;
  world().barrier();
  if (world().rank() == 0) ckpt::remove_tree(dir);
}

// A LoRA checkpoint (adapters and lm_head only) of fsdp2 resumes under megatron tp2 (or ddp at an
// odd world size) and alone on each rank; another finetuning_type or another base is refused.
TEST(Resume, LoraCheckpointResumesOnAnyLayout) {
  if (24 % world().size() != 0) GTEST_SKIP() << "global batch 24 needs a world size dividing 24";
  at::set_num_threads(1);
  const std::string dir = shared_temp_dir();
  const std::string lora = "finetuning_type = \"lora\"\nlora_rank = 4\nadditional_target = \"lm_head\"\n";
  const int n = world().size();
  const auto straight =
      train(tiny_run("fsdp2", 1, accum_for(n), lora + "output_dir = \"" + dir + "\"\n"), world(), 10);
  const std::string from = "resume_from_checkpoint = \"" + dir + "/checkpoint-10\"\n";
  struct Run other;
  {
    std::unique_ptr<DeviceMesh> mesh;  // planned from the config's [mesh]
    const std::string b = lora + "output_dir = \"" + dir + "/b\"\n" + from;
    auto trainer = test::make_trainer(n % 2 == 0 ? tiny_run("megatron", 1, 24 / (n / 2), b + "[mesh]\ntp = 2\n")
                                                 : tiny_run("ddp", 1, accum_for(n), b),
                                      world(), mesh);
    other.first_step = trainer->current_step();
    while (trainer->current_step() < trainer->total_steps()) other.losses.push_back(trainer->step().loss);
  }
  expect_resumed_alone_and_elsewhere(straight, other, lora, dir, from);
  auto refused = [&](const std::string& extra, const std::string& expected, const std::string& seed = "seed = 7") {
    std::string toml = tiny_run("ddp", 1, accum_for(n), extra + "output_dir = \"" + dir + "/c\"\n" + from);
    toml.replace(toml.find("seed = 7"), 8, seed);
    try {
      train(toml, world());
      ADD_FAILURE() << "expected a CheckpointMismatch: " << expected;
    } catch (const ckpt::CheckpointMismatch& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  refused("", "was trained with finetuning_type = \"lora\", this run has \"full\"");
  // Another seed initialises other frozen weights under the same adapters.
  refused(lora, "was trained on base model the inline [model] (seed 7); this run's base the inline [model] is seed 8",
          "seed = 8");
  world().barrier();
  if (world().rank() == 0) ckpt::remove_tree(dir);
}

// A QLoRA + DoRA checkpoint (adapters and magnitudes; the 4-bit base is quantized again from the
// same starting weights) of fsdp2 resumes under ZeRO-3 and alone on each rank.
TEST(Resume, QloraDoraCheckpointResumesOnAnotherEngine) {
  if (24 % world().size() != 0) GTEST_SKIP() << "global batch 24 needs a world size dividing 24";
  at::set_num_threads(1);
  const std::string dir = shared_temp_dir();
  const std::string qdora = "finetuning_type = \"lora\"\nlora_rank = 4\nuse_dora = true\nquantization_bit = 4\n";
  const int n = world().size();
  const auto straight = train(tiny_run("fsdp2", 1, accum_for(n), qdora + "output_dir = \"" + dir + "\"\n"), world(), 10);
  const std::string from = "resume_from_checkpoint = \"" + dir + "/checkpoint-10\"\n";
  const std::string zero3 = "/tmp/lft_resume_z3_rank" + std::to_string(world().rank()) + ".json";
  std::ofstream(zero3) << R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
  "gradient_accumulation_steps": "auto", "zero_optimization": {"stage": 3}})";
  const auto other = train(tiny_run("deepspeed", 1, accum_for(n),
                                    qdora + "deepspeed = \"" + zero3 + "\"\noutput_dir = \"" + dir + "/b\"\n" + from),
                           world());
  expect_resumed_alone_and_elsewhere(straight, other, qdora, dir, from);
  world().barrier();
  if (world().rank() == 0) ckpt::remove_tree(dir);
}

TEST(Resume, AnotherGlobalBatchIsRefusedNamingBoth) {
  if (24 % world().size() != 0) GTEST_SKIP() << "global batch 24 needs a world size dividing 24";
  at::set_num_threads(1);
  const std::string dir = shared_temp_dir();
  train(tiny_run("ddp", 1, accum_for(world().size()), "output_dir = \"" + dir + "\"\n"),
        world(), 20);
  try {
    train(tiny_run("ddp", 2, accum_for(world().size()),
                   "output_dir = \"" + dir + "/b\"\nresume_from_checkpoint = \"" + dir +
                       "/checkpoint-20\"\n"),
          world());
    ADD_FAILURE() << "expected a CheckpointMismatch";
  } catch (const ckpt::CheckpointMismatch& e) {
    EXPECT_NE(std::string(e.what()).find("global batch of 24 sequences, this run has 48"),
              std::string::npos)
        << e.what();
  }
  world().barrier();
  if (world().rank() == 0) ckpt::remove_tree(dir);
}

}  // namespace
}  // namespace lft
