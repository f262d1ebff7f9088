// Expert parallelism ([mesh] ep): a mixture of experts whose experts are spread over ep ranks
// trains exactly as the one-rank run of the same folder (moe_runs.h: losses with the auxiliary
// term, and gradient norms, within 1e-5 relative over 8 steps), under ddp, fsdp2, ZeRO-2/3, with
// replicas (HSDP), with context parallelism, with activation checkpointing, megatron tp x ep
// (sequence parallel) and pp x ep; when every token picks
// the same experts (all rows to one rank: nothing hangs, nothing is dropped); the bytes it sends
// are the routed rows'; and its checkpoint resumes at another ep and world size.
#include "lft/ckpt/checkpoint_files.h"
#include "lft/model/moe.h"
#include "moe_runs.h"

namespace lft {
namespace {

using test::engines_match_the_one_rank_run;
using test::moe_folder;
using test::run_toml;
using test::train_saving;
using test::world;

const std::string kSft = "stage = \"sft\"\ntrain_dataset = \"inputs/data/arithmetic_alpaca.json\"\ntemplate = \"default\"\n";

bool runs_here() { return world().size() == 2 || world().size() == 4; }

TEST(ExpertParallel, Qwen3MoeLayoutsMatchTheOneRankRun) {
  if (!runs_here()) GTEST_SKIP() << "runs at 2 and 4 ranks";
  engines_match_the_one_rank_run(
      "qwen3_moe", kSft,
      {{"ddp ep 2", "ddp", "[mesh]\nep = 2\n", 2, 0},
       {"fsdp2 ep 2, checkpointing", "fsdp2", "gradient_checkpointing = true\n[mesh]\nep = 2\n", 2, 0},
       {"ZeRO-2 ep 2", "deepspeed", "deepspeed = \"inputs/ds_z2_config.json\"\n[mesh]\nep = 2\n", 0, 0},
       {"fsdp2 dp_shard 4 x ep 4", "fsdp2", "[mesh]\nep = 4\n", 4, 0},
       {"fsdp2 dp_replicate 2 x dp_shard 2, ep 2", "fsdp2", "[mesh]\ndp_replicate = 2\ndp_shard = 2\nep = 2\n", 4, 0},
       {"fsdp2 cp 2, ep 2 over the cp ranks", "fsdp2", "[mesh]\ncp = 2\nep = 2\n", 4, 2},
       {"ZeRO-3 ep 2", "deepspeed", "deepspeed = \"inputs/ds_z3_config.json\"\n[mesh]\nep = 2\n", 4, 0},
       {"megatron tp 2 x ep 2, sp", "megatron", "[mesh]\ntp = 2\nep = 2\n[dist_config]\nsequence_parallel = true\n", 4, 2},
       {"megatron dp 4 x ep 2, optim_grads_params", "megatron",
        "[mesh]\nep = 2\n[dist_config]\ndata_parallel_sharding_strategy = \"optim_grads_params\"\n", 4, 4}});
}

// Qwen2-MoE (a shared expert, layer 2 dense, no auxiliary loss): pipelines with ep too.
TEST(ExpertParallel, Qwen2MoeWithSharedExpertMatchesTheOneRankRun) {
  if (!runs_here()) GTEST_SKIP() << "runs at 2 and 4 ranks";
  engines_match_the_one_rank_run("qwen2_moe", "train_dataset = \"inputs/data/arithmetic.txt\"\n",
                                 {{"fsdp2 ep 2", "fsdp2", "[mesh]\nep = 2\n", 2, 0},
                                  {"megatron pp 2 x ep 2", "megatron", "[mesh]\npp = 2\nep = 2\n", 4, 2}});
}

// An expert capacity (moe_expert_capacity_factor = 1: with this folder's uneven routing the busy
// experts drop pairs) applies to each forward's rows, the micro-batch of 2 sequences every layout
// here routes whole on a rank (tensor parallelism included), so every layout drops the same pairs
// as the one-rank run, before or without the exchange.
TEST(ExpertParallel, ACapacityDropsTheSamePairsInEveryLayout) {
  if (!runs_here()) GTEST_SKIP() << "runs at 2 and 4 ranks";
  engines_match_the_one_rank_run(
      "qwen3_moe", kSft + "moe_expert_capacity_factor = 1.0\n",
      {{"fsdp2", "fsdp2", "", 2, 0},
       {"ddp ep 2", "ddp", "[mesh]\nep = 2\n", 2, 0},
       {"fsdp2 ep 4", "fsdp2", "[mesh]\nep = 4\n", 4, 0},
       {"megatron tp 2 x ep 2, sp", "megatron", "[mesh]\ntp = 2\nep = 2\n[dist_config]\nsequence_parallel = true\n", 4, 2}});
}

// Router weights zero: every token's probabilities tie and every token picks the same two experts,
// which one rank holds; the others receive nothing and still take part in every exchange.
TEST(ExpertParallel, EveryTokenToOneRanksExpertsCompletes) {
  if (!runs_here()) GTEST_SKIP() << "runs at 2 and 4 ranks";
  const std::string ep = "[mesh]\nep = " + std::to_string(world().size()) + "\n";
  engines_match_the_one_rank_run("qwen3_moe", kSft, {{"fsdp2, all tokens to rank 0's experts", "fsdp2", ep, 0, 0}},
                                 moe_folder("qwen3_moe", 0));
}

// The bytes each rank sends over the ep group in a step are the routed rows the algorithm must
// move (beside each forward's expert counts), from the routing itself: router weights zero give
// every row the same top-k (at::topk's choice among equal probabilities, computed here the same
// way), so a rank sends the rows it routes to the other rank's experts and returns the outputs of
// the rows the other rank routes to its own, each hidden x 4 bytes (fp32), in forward and again in
// backward, for every MoE layer; the rows a rank routes to its own experts never leave it.
TEST(ExpertParallel, ExchangeBytesAreTheRoutedRows) {
  if (world().size() != 2) GTEST_SKIP() << "runs at 2 ranks";
  at::set_num_threads(1);
  const std::string folder = moe_folder("qwen3_moe", 0);
  std::unique_ptr<DeviceMesh> mesh;
  auto trainer = test::make_trainer(
      run_toml(folder, "fsdp2", 2, "train_dataset = \"inputs/data/arithmetic.txt\"\nmax_steps = 1\n[mesh]\nep = 2\n"),
      world(), mesh);
  trainer->step();
  std::uint64_t sent = 0, calls = 0;
  for (Communicator* c : trainer->engine().communicators())
    if (c->name() == "ep") {
      sent += c->stats()[CollKind::AllToAll].bytes;
      calls += c->stats()[CollKind::AllToAll].calls;
    }
  const model::ModelConfig c = test::moe_config("qwen3_moe");
  const std::int64_t rows = 2 * 32;  // a micro-batch: 2 packed sequences of cutoff_len 32
  const at::Tensor chosen = std::get<1>(at::topk(at::full({rows, c.moe.num_experts}, 1.0f / 8), c.moe.experts_per_token, -1));
  const std::int64_t local = c.moe.num_experts / 2, mine = world().rank();
  const std::int64_t to_other = (chosen.floor_divide(local) != mine).sum().item<std::int64_t>();
  const std::int64_t from_other = (chosen.floor_divide(local) == mine).sum().item<std::int64_t>();  // the other rank routes alike
  const std::int64_t passes = 2, micro_batches = 2, layers = c.num_hidden_layers;
  // Each MoE layer's forward exchanges its counts (E int64, an even all-to-all) and its rows there
  // and back, and its backward their gradients the other way: an uneven all-to-all each, counted as
  // the even one that sends as many bytes to the other rank (2 x what leaves at 2 ranks).
  const std::int64_t forwards = layers * micro_batches;
  EXPECT_EQ(calls, static_cast<std::uint64_t>(forwards * (1 + 2 * passes)));
  EXPECT_EQ(sent, static_cast<std::uint64_t>(forwards * (passes * (to_other + from_other) * c.hidden_size * 4 * 2 +
                                                         c.moe.num_experts * 8)));
  EXPECT_GT(to_other + from_other, 0);  // rows cross between the ranks (here all to rank 0's experts)
  EXPECT_GT(sent, 0u);
}

// At 4 ranks and ep 2 each expert lives on 2 edp ranks, which shard it as the engine shards the
// other parameters: each keeps half of its experts' rows (a quarter of all experts), under fsdp2
// the layers' experts hold no memory between steps (gathered for each layer's forward and
// backward), under ZeRO-2 they stay whole and only the fp32 shards, gradients and optimizer state
// are cut.
TEST(ExpertParallel, ExpertsAreShardedOverTheirEdpRanks) {
  if (world().size() != 4) GTEST_SKIP() << "runs at 4 ranks";
  at::set_num_threads(1);
  const std::string folder = moe_folder("qwen3_moe");
  const model::ModelConfig c = test::moe_config("qwen3_moe");
  const std::int64_t all_experts =
      c.num_hidden_layers * c.moe.num_experts * 3 * c.hidden_size * c.moe.expert_intermediate_size;
  const std::string ep = "max_steps = 2\n[mesh]\nep = 2\n";
  for (const auto& [engine, extra, whole] :
       {std::tuple<std::string, std::string, bool>{"fsdp2", "", false},
        {"deepspeed", "deepspeed = \"inputs/ds_z2_config.json\"\n", true}}) {
    SCOPED_TRACE(engine);
    std::unique_ptr<DeviceMesh> mesh;
    auto trainer = test::make_trainer(run_toml(folder, engine, 3, kSft + extra + ep), world(), mesh);
    trainer->step();
    std::int64_t pieces = 0;
    const std::vector<at::Tensor> params = trainer->engine().parameters();
    const std::vector<std::string> names = trainer->engine().parameter_names();
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i].find(".experts.") != std::string::npos) pieces += params[i].numel();
    EXPECT_EQ(pieces, all_experts / 4);
    std::int64_t held = 0;  // bytes of the experts' tensors in the layers
    for (const auto& module : trainer->model().named_modules())
      if (const auto* block = dynamic_cast<const model::SparseMoeBlockImpl*>(module.value().get()))
        for (const auto& expert : block->expert_list)
          for (const at::Tensor& t : expert->parameters()) held += static_cast<std::int64_t>(t.storage().nbytes());
    EXPECT_EQ(held, whole ? all_experts / 2 * 4 : 0);
  }
}

// A checkpoint of fsdp2 at ep 2 (at 4 ranks: each expert in shards over its 2 edp ranks) resumes on each rank alone (every expert on one rank), at ep 1 over the world and at
// ep 2 again (the pieces read back), and each continues the straight run.
TEST(ExpertParallel, CheckpointResumesAtAnotherEpAndWorldSize) {
  if (!runs_here()) GTEST_SKIP() << "runs at 2 and 4 ranks";
  at::set_num_threads(1);
  const int n = world().size();
  const std::string folder = moe_folder("qwen3_moe");
  const std::string dir = test::shared_temp_dir("lft-ep-resume");
  const std::string steps = "max_steps = 10\nsave_strategy = \"no\"\n";
  const std::string ep = "[mesh]\nep = 2\n";
  const auto straight =
      train_saving(run_toml(folder, "fsdp2", 24 / (2 * n), kSft + steps + "output_dir = \"" + dir + "\"\n" + ep), world(), 5);
  const std::string from = "\nresume_from_checkpoint = \"" + dir + "/checkpoint-5\"\n";
  const auto at_ep1 = train_saving(run_toml(folder, "fsdp2", 24 / (2 * n), kSft + steps + "output_dir = \"" + dir +
                                            "/ep1\"" + from),
                                   world(), 0);
  const auto at_ep2 = train_saving(run_toml(folder, "fsdp2", 24 / (2 * n), kSft + steps + "output_dir = \"" + dir +
                                            "/ep2\"" + from + ep),
                                   world(), 0);
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  const std::string mine = dir + "/alone-" + std::to_string(world().rank());
  const auto alone = train_saving(run_toml(folder, "none", 12, kSft + steps + "output_dir = \"" + mine + "\"" + from), self, 0);
  ASSERT_EQ(alone.size(), 5u);
  ASSERT_EQ(at_ep1.size(), 5u);
  ASSERT_EQ(at_ep2.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(alone[i], straight[5 + i], 1e-5 * straight[5 + i]) << "alone, step " << 6 + i;
    EXPECT_NEAR(at_ep1[i], straight[5 + i], 1e-5 * straight[5 + i]) << "ep 1, step " << 6 + i;
    EXPECT_NEAR(at_ep2[i], straight[5 + i], 1e-5 * straight[5 + i]) << "ep 2 again, step " << 6 + i;
  }
  world().barrier();
  if (world().rank() == 0) ckpt::remove_tree(dir);
}

}  // namespace
}  // namespace lft
