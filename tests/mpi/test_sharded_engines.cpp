// fsdp2, fsdp and deepspeed (ZeRO 0-3) at 2, 3 and 4 ranks against the one-rank reference
// computed in the same run (each rank alone over MPI_COMM_SELF): the same global batch of 24
// sequences, 20 steps, from identical initial weights. fp32: step 1 bitwise equal, later steps
// within 1e-5 relative (reductions add in another order). At 3 ranks no dimension of the model
// (vocab 259, hidden 32, intermediate 64, 2 kv heads x 8) divides evenly: shards are padded.
// Also: bytes moved per step against the algorithm's volume, and what stays gathered.
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <list>
#include <map>

#include "lft/config/config.h"
#include "lft/engine/mesh_plan.h"
#include "lft/engine/registry.h"
#include "lft/engine/run_plan.h"
#include "lft/engine/sharded.h"
#include "lft/model/quantized_base.h"
#include "lft/runtime/memory.h"
#include "lft/train/trainer.h"
#include "mpi_test_util.h"
#include "trainer_util.h"
#include "tiny_run.h"

namespace lft {
namespace {

using test::make_trainer;
using test::tiny_run;
using test::world;

struct Case {
  std::string label;
  std::string engine;
  std::string extra;  // top-level keys, then tables
  int min_ranks = 2;
  bool even_ranks = false;  // needs a 2 x 2 mesh
};

// The sharded data-parallel component of a sharded engine's run, or null.
const engine::ShardedDataParallel* sharded(train::Trainer& t) {
  const auto* e = dynamic_cast<engine::ShardedEngine*>(&t.engine());
  return e ? &e->data_parallel() : nullptr;
}

std::string zero1_config() {
  const std::string path = "/tmp/lft_ds_z1_rank" + std::to_string(world().rank()) + ".json";
  std::ofstream(path) << R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
  "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
  "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 1}})";
  return path;
}

std::vector<Case> fp32_cases() {
  return {
      {"fsdp2 reshard", "fsdp2", ""},
      {"fsdp2 no reshard", "fsdp2", "[dist_config]\nreshard_after_forward = false\n"},
      {"fsdp2 offload (CPU)", "fsdp2", "[dist_config]\noffload_params = true\npin_memory = true\n"},
      {"fsdp2 checkpointing", "fsdp2", "gradient_checkpointing = true\n"},
      {"fsdp2 HSDP 2x2", "fsdp2", "[mesh]\ndp_replicate = 2\ndp_shard = 2\n", 4, true},
      {"fsdp FULL_SHARD", "fsdp", ""},
      {"fsdp SHARD_GRAD_OP", "fsdp", "[dist_config]\nsharding_strategy = \"SHARD_GRAD_OP\"\n"},
      {"fsdp NO_SHARD", "fsdp", "[dist_config]\nsharding_strategy = \"NO_SHARD\"\n"},
      {"fsdp HYBRID_SHARD 2x2", "fsdp",
       "[dist_config]\nsharding_strategy = \"HYBRID_SHARD\"\n[mesh]\ndp_replicate = 2\ndp_shard = 2\n", 4,
       true},
      {"ZeRO-0", "deepspeed", "deepspeed = \"inputs/ds_z0_config.json\"\n"},
      {"ZeRO-1", "deepspeed", "deepspeed = \"" + zero1_config() + "\"\n"},
      {"ZeRO-2", "deepspeed", "deepspeed = \"inputs/ds_z2_config.json\"\n"},
      {"ZeRO-2 offload", "deepspeed", "deepspeed = \"inputs/ds_z2_offload_config.json\"\n"},
      {"ZeRO-3", "deepspeed", "deepspeed = \"inputs/ds_z3_config.json\"\n"},
      {"ZeRO-3 offload", "deepspeed", "deepspeed = \"inputs/ds_z3_offload_config.json\"\n"},
  };
}


bool runs_here(const Case& c, int n) {
  return n >= c.min_ranks && (!c.even_ranks || n == 4) && 24 % (2 * n) == 0;
}

TEST(ShardedParity, Fp32MatchesOneRankReference) {
  const int n = world().size();
  if (n == 1 || 24 % (2 * n) != 0) GTEST_SKIP() << "runs at 2, 3 and 4 ranks";
  at::set_num_threads(1);
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  const auto reference = test::train_losses(tiny_run("none", 2, 12), self, 20);
  for (const Case& c : fp32_cases()) {
    if (!runs_here(c, n)) continue;
    SCOPED_TRACE(c.label);
    const auto got = test::train_losses(tiny_run(c.engine, 2, 24 / (2 * n), c.extra), world(), 20);
    EXPECT_EQ(got[0], reference[0]) << c.label << ": step 1 must be bitwise equal";
    for (std::size_t i = 1; i < got.size(); ++i)
      EXPECT_NEAR(got[i], reference[i], 1e-5 * std::abs(reference[i])) << c.label << " step " << i + 1;
  }
}

// The embedding's gradient split (ShardingPlan::split_embedding_gradient): the looked-up rows
// gathered from every rank and added to the shards, and with tied embeddings the head's dense
// gradient reduce-scattered as soon as the head's backward is done. Tied and untied, per-parameter
// and flat cuts, gradients reduced in every pass (ZeRO-2/3, fsdp2) or in the last (ZeRO-1), over
// 24 / (2n) micro-batches a step: the one-rank run's losses within 1e-5, step 1 bitwise.
TEST(ShardedParity, SplitEmbeddingGradientMatchesOneRankReference) {
  const int n = world().size();
  if (n == 1 || n > 3) GTEST_SKIP() << "runs at 2 and 3 ranks (at 4 the rows of this tiny model cost more than its table)";
  at::set_num_threads(1);
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  const std::string tied = "tie_word_embeddings = true\n";  // into tiny_run's [model] table
  const std::vector<std::pair<Case, bool>> cases = {
      {{"fsdp2 untied", "fsdp2", ""}, false},
      {{"fsdp2 tied", "fsdp2", ""}, true},
      {{"fsdp2 tied, checkpointing, no reshard", "fsdp2", "gradient_checkpointing = true\n[dist_config]\nreshard_after_forward = false\n"}, true},
      {{"fsdp FULL_SHARD tied", "fsdp", ""}, true},
      {{"ZeRO-1 tied", "deepspeed", "deepspeed = \"" + zero1_config() + "\"\n"}, true},
      {{"ZeRO-3 tied", "deepspeed", "deepspeed = \"inputs/ds_z3_config.json\"\n"}, true},
  };
  for (const bool tie : {false, true}) {
    const auto reference = test::train_losses(tiny_run("none", 2, 12) + (tie ? tied : ""), self, 20);
    for (const auto& [c, case_tied] : cases) {
      if (case_tied != tie) continue;
      SCOPED_TRACE(c.label);
      const std::string run = tiny_run(c.engine, 2, 24 / (2 * n), c.extra) + (tie ? tied : "");
      std::unique_ptr<DeviceMesh> mesh;
      auto trainer = make_trainer(run, world(), mesh);
      ASSERT_NE(sharded(*trainer), nullptr);
      EXPECT_TRUE(sharded(*trainer)->plan().split_embedding_gradient);
      const auto got = test::train_losses(run, world(), 20);
      EXPECT_EQ(got[0], reference[0]) << c.label << ": step 1 must be bitwise equal";
      double worst = 0.0;
      for (std::size_t i = 1; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], reference[i], 1e-5 * std::abs(reference[i])) << c.label << " step " << i + 1;
        worst = std::max(worst, std::abs(got[i] - reference[i]) / std::abs(reference[i]));
      }
      if (world().rank() == 0) std::printf("%s: largest relative loss difference %.2e\n", c.label.c_str(), worst);
    }
  }
}

// Offload keeps the shards, gradients and AdamW state in host memory and copies them to and
// from the compute buffers: the arithmetic is the same, so the losses are bitwise equal.
TEST(ShardedParity, OffloadEqualsNoOffloadBitwise) {
  const int n = world().size();
  if (n == 1 || 24 % (2 * n) != 0) GTEST_SKIP() << "runs at 2, 3 and 4 ranks";
  at::set_num_threads(1);
  const std::string offload = "offload_params = true\npin_memory = true\n";
  const std::string hsdp = n == 4 ? "[mesh]\ndp_replicate = 2\ndp_shard = 2\n" : "";
  const std::vector<std::pair<Case, Case>> pairs = {
      {{"fsdp2", "fsdp2", hsdp}, {"fsdp2 offload", "fsdp2", hsdp + "[dist_config]\n" + offload}},
      {{"ZeRO-2", "deepspeed", "deepspeed = \"inputs/ds_z2_config.json\"\n"},
       {"ZeRO-2 offload", "deepspeed", "deepspeed = \"inputs/ds_z2_offload_config.json\"\n"}},
      {{"ZeRO-3", "deepspeed", "deepspeed = \"inputs/ds_z3_config.json\"\n"},
       {"ZeRO-3 offload", "deepspeed", "deepspeed = \"inputs/ds_z3_offload_config.json\"\n"}},
  };
  for (const auto& [off, on] : pairs) {
    const auto a = test::train_losses(tiny_run(off.engine, 2, 24 / (2 * n), off.extra), world(), 6);
    const auto b = test::train_losses(tiny_run(on.engine, 2, 24 / (2 * n), on.extra), world(), 6);
    EXPECT_EQ(a, b) << on.label << " against " << off.label;
  }
}

}  // namespace
}  // namespace lft

namespace lft {
namespace {

// bf16: gathered bf16 parameters (fsdp, fsdp2, ZeRO-3) against the one-rank run's autocast over
// fp32 weights. The matmuls see the same bf16-rounded weights, but the norms' weights multiply in
// bf16 instead of fp32, so single products differ by up to bf16's 2^-8 (3.9e-3) relative; over
// the mean loss of a batch that averages down (measured: 2.7e-4 at 2-4 ranks). Bound: 2e-3.
TEST(ShardedParity, Bf16MatchesOneRankReferenceWithinBf16Rounding) {
  const int n = world().size();
  if (n == 1 || 24 % (2 * n) != 0) GTEST_SKIP() << "runs at 2, 3 and 4 ranks";
  at::set_num_threads(1);
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  const std::string bf16 = "bf16 = true\n";
  const auto reference = test::train_losses(tiny_run("none", 2, 12, bf16), self, 20);
  const std::vector<Case> cases = {
      {"fsdp2 bf16", "fsdp2", bf16 + "[dist_config]\nmixed_precision = \"bf16\"\n"},
      {"fsdp bf16", "fsdp", bf16},
      {"ZeRO-2 bf16", "deepspeed", bf16 + "deepspeed = \"inputs/ds_z2_config.json\"\n"},
      {"ZeRO-3 bf16", "deepspeed", bf16 + "deepspeed = \"inputs/ds_z3_config.json\"\n"},
  };
  for (const Case& c : cases) {
    const auto got = test::train_losses(tiny_run(c.engine, 2, 24 / (2 * n), c.extra), world(), 20);
    double worst = 0.0;
    for (std::size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::abs(got[i] - reference[i]) / std::abs(reference[i]));
    EXPECT_LT(worst, 2e-3) << c.label;
    EXPECT_LT(got.back(), 0.8 * got.front()) << c.label << ": the loss should fall";
    if (world().rank() == 0) std::printf("%s: largest relative loss difference %.2e\n", c.label.c_str(), worst);
  }
}

// Bytes moved per step and rank (bus bytes, nccl-tests' convention) against what the algorithm
// needs for P = the model's fp32 parameter bytes and n ranks:
//   full sharding      all-gather each layer twice (forward, and again for backward; the root
//                      unit once), reduce-scatter once: (P + P_layers) (n-1)/n + P (n-1)/n
//   no reshard, ZeRO-1/2   one all-gather + one reduce-scatter: 2 P (n-1)/n
//   NO_SHARD, ZeRO-0   one all-reduce: 2 P (n-1)/n
// With the embedding's gradient split (fsdp2 here at 2 and 3 ranks; ShardingPlan), its table is
// not reduce-scattered (- 4 V H (n-1)/n): every rank's looked-up rows are all-gathered instead,
// a count, an index and H fp32 values per token: + (n-1) (8 + T (8 + 4 H)), T = 2 x 32 tokens.
// Slack 6%: padding of uneven shards (at 3 ranks k_proj's 16 rows become 18) and the 8-byte
// gradient-norm all-reduce. Below 94% of it would mean something was not communicated.
TEST(ShardedComm, BytesPerStepMatchTheAlgorithm) {
  const int n = world().size();
  if (n == 1 || n > 4) GTEST_SKIP() << "runs at 2, 3 and 4 ranks";
  at::set_num_threads(1);
  struct Volume {
    std::string label, engine, extra;
    double layers_twice;  // 1: layers gathered twice, root once; 0: every unit once
    bool all_reduce = false;
  };
  const std::vector<Volume> volumes = {
      {"fsdp2 reshard", "fsdp2", "", 1},
      {"fsdp2 no reshard", "fsdp2", "[dist_config]\nreshard_after_forward = false\n", 0},
      {"fsdp FULL_SHARD", "fsdp", "", 1},
      {"fsdp SHARD_GRAD_OP", "fsdp", "[dist_config]\nsharding_strategy = \"SHARD_GRAD_OP\"\n", 0},
      {"fsdp NO_SHARD", "fsdp", "[dist_config]\nsharding_strategy = \"NO_SHARD\"\n", 0, true},
      {"ZeRO-0", "deepspeed", "deepspeed = \"inputs/ds_z0_config.json\"\n", 0, true},
      {"ZeRO-1", "deepspeed", "deepspeed = \"" + zero1_config() + "\"\n", 0},
      {"ZeRO-2", "deepspeed", "deepspeed = \"inputs/ds_z2_config.json\"\n", 0},
      {"ZeRO-3", "deepspeed", "deepspeed = \"inputs/ds_z3_config.json\"\n", 1},
  };
  for (const Volume& v : volumes) {
    std::unique_ptr<DeviceMesh> mesh;
    auto trainer = make_trainer(tiny_run(v.engine, 2, 1, v.extra), world(), mesh);
    double total = 0, layers = 0;
    for (const auto& name_and_box : trainer->engine().parameter_boxes()) {
      double numel = 1;
      for (auto d : name_and_box.global_shape) numel *= static_cast<double>(d);
      total += 4 * numel;
    }
    const auto names = trainer->engine().parameter_names();
    const auto boxes = trainer->engine().parameter_boxes();
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i].rfind("model.layers.", 0) == 0) {
        double numel = 1;
        for (auto d : boxes[i].global_shape) numel *= static_cast<double>(d);
        layers += 4 * numel;
      }
    const double moved = test::bus_bytes_per_step(*trainer, 2);
    const double share = static_cast<double>(n - 1) / n;
    double theory = (v.all_reduce ? 2 * total : 2 * total + v.layers_twice * layers) * share;
    const engine::ShardedDataParallel* dp = sharded(*trainer);
    if (dp != nullptr && dp->plan().split_embedding_gradient) {
      const double vocab = 259, hidden = 32, tokens = 2 * 32;
      theory += -4 * vocab * hidden * share + (n - 1) * (8 + tokens * (8 + 4 * hidden));
    }
    if (world().rank() == 0 && dp != nullptr && dp->plan().split_embedding_gradient)
      std::printf("%-20s the embedding's gradient as rows\n", v.label.c_str());
    if (world().rank() == 0)
      std::printf("%-20s moved %.0f B per step, algorithm %.0f B (%.3fx)\n", v.label.c_str(), moved,
                  theory, moved / theory);
    EXPECT_LE(moved, 1.06 * theory) << v.label;
    EXPECT_GE(moved, 0.94 * theory) << v.label;
  }
}

// fsdp2 in bf16 over MPI: the gathered layers' bf16 gradients travel as they are (the
// communicator sums them in fp32), half the reduce-scatter bytes of the same run in fp32.
TEST(ShardedComm, Bf16GradientsReduceScatterInHalfTheBytes) {
  if (world().size() == 1) GTEST_SKIP() << "one rank reduce-scatters nothing";
  at::set_num_threads(1);
  auto reduce_scatter_bytes = [](const std::string& extra) {
    std::unique_ptr<DeviceMesh> mesh;
    auto trainer = make_trainer(tiny_run("fsdp2", 2, 1, extra), world(), mesh);
    trainer->step();
    for (Communicator* c : trainer->engine().communicators()) c->reset_stats();
    trainer->step();
    std::uint64_t bytes = 0;
    for (Communicator* c : trainer->engine().communicators()) bytes += c->stats()[CollKind::ReduceScatter].bytes;
    return bytes;
  };
  const std::uint64_t fp32 = reduce_scatter_bytes(""),
                      bf16 = reduce_scatter_bytes("bf16 = true\n[dist_config]\nmixed_precision = \"bf16\"\n");
  EXPECT_GT(fp32, 0u);
  EXPECT_EQ(2 * bf16, fp32);
}

// reshard_after_forward = true frees each layer's gathered storage right after its forward and
// everything after backward; false keeps the layers until their backward.
TEST(ShardedMemory, ReshardAfterForwardFreesGatheredLayers) {
  LFT_REQUIRE_RANKS(2);
  at::set_num_threads(1);
  for (const bool reshard : {true, false}) {
    std::unique_ptr<DeviceMesh> mesh;
    auto trainer = make_trainer(
        tiny_run("fsdp2", 2, 1,
                 std::string("[dist_config]\nreshard_after_forward = ") + (reshard ? "true" : "false") + "\n"),
        world(), mesh);
    trainer->step();
    const engine::ShardedDataParallel* e = sharded(*trainer);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->gathered_bytes(), 0) << "after backward every unit is freed";
    for (std::size_t i = 0; i < e->bytes_after_layer_forward().size(); ++i) {
      if (reshard) EXPECT_EQ(e->bytes_after_layer_forward()[i], 0) << "layer " << i;
      else EXPECT_GT(e->bytes_after_layer_forward()[i], 0) << "layer " << i;
    }
  }
}

// Frozen parameters (LoRA's base) keep their shards in the compute dtype, the only one they are
// gathered in: 2 bytes an element fewer in bf16, and bitwise the losses of the run that keeps them
// in fp32 (offload). The estimate's weights are the shards held, to the byte.
TEST(ShardedMemory, FrozenParametersKeepTheirShardsInTheComputeDtype) {
  LFT_REQUIRE_RANKS(2);
  at::set_num_threads(1);
  const std::int64_t n = world().size();
  std::int64_t held[2] = {0, 0}, frozen_shard = 0;
  for (const bool bf16 : {false, true}) {
    const std::string toml =
        tiny_run("fsdp2", 2, 1,
                 std::string("finetuning_type = \"lora\"\nlora_rank = 4\n") +
                     (bf16 ? "bf16 = true\n[dist_config]\nmixed_precision = \"bf16\"\n" : ""));
    std::unique_ptr<DeviceMesh> mesh;
    auto trainer = make_trainer(toml, world(), mesh);
    trainer->step();
    const engine::ShardedDataParallel* e = sharded(*trainer);
    ASSERT_NE(e, nullptr);
    held[bf16] = e->shard_bytes_held();
    EXPECT_EQ(static_cast<double>(held[bf16]),
              engine::resolve_run_plan(config::parse_config(toml, "test.toml"), mesh->shape()).memory.weights)
        << (bf16 ? "bf16" : "fp32");
    frozen_shard = 0;  // fsdp2's cut: ceil(rows / n) rows of each frozen parameter
    for (const auto& item : trainer->model().named_parameters()) {
      if (item.value().requires_grad()) continue;
      const std::int64_t rows = item.value().size(0);
      frozen_shard += (rows + n - 1) / n * (item.value().numel() / rows);
    }
  }
  EXPECT_GT(frozen_shard, 0);
  EXPECT_EQ(held[0] - held[1], 2 * frozen_shard);
  // The same values: offload keeps fp32 shards of the frozen parameters (cast at every gather).
  const std::string bf16_lora =
      "finetuning_type = \"lora\"\nlora_rank = 4\nbf16 = true\n[dist_config]\nmixed_precision = \"bf16\"\n";
  EXPECT_EQ(test::train_losses(tiny_run("fsdp2", 2, 1, bf16_lora), world(), 4),
            test::train_losses(tiny_run("fsdp2", 2, 1, bf16_lora + "offload_params = true\n"), world(), 4));
}

// QLoRA's 4-bit base (no parameters) under fsdp2 and ZeRO-3: each rank keeps its share of every
// layer's bytes, ceil(bytes / n), and holds no whole 4-bit tensor between steps or after a layer's
// forward; ZeRO-2 keeps them whole. (Their values: FinetuningParity.QloraEveryEngineMatchesOneRank.)
TEST(ShardedMemory, QuantizedBaseBytesAreShardedWithTheParameters) {
  const int n = world().size();
  if (n == 1 || n > 4) GTEST_SKIP() << "runs at 2, 3 and 4 ranks";
  at::set_num_threads(1);
  const std::string qlora = "finetuning_type = \"lora\"\nlora_rank = 4\nquantization_bit = 4\n";
  const std::vector<std::pair<Case, bool>> cases = {  // and whether it shards the base
      {{"fsdp2", "fsdp2", ""}, true},
      {{"ZeRO-3", "deepspeed", "deepspeed = \"inputs/ds_z3_config.json\"\n"}, true},
      {{"ZeRO-2", "deepspeed", "deepspeed = \"inputs/ds_z2_config.json\"\n"}, false},
  };
  for (const auto& [c, shards] : cases) {
    SCOPED_TRACE(c.label);
    std::unique_ptr<DeviceMesh> mesh;
    auto trainer = make_trainer(tiny_run(c.engine, 2, 1, qlora + c.extra), world(), mesh);
    trainer->step();
    const engine::ShardedDataParallel* e = sharded(*trainer);
    ASSERT_NE(e, nullptr);
    std::map<std::string, std::int64_t> layer_bytes;  // whole, by layer
    std::int64_t held = 0;
    const auto tensors = model::quantized_base_tensors(trainer->model());
    ASSERT_FALSE(tensors.empty());
    for (const model::QuantizedTensor& q : tensors) {
      layer_bytes[q.name.substr(0, q.name.find('.', std::string("model.layers.").size()))] +=
          q.tensor.numel() * static_cast<std::int64_t>(q.tensor.element_size());
      held += static_cast<std::int64_t>(q.tensor.storage().nbytes());
    }
    std::int64_t shares = 0, whole = 0;
    for (const auto& [layer, bytes] : layer_bytes) {
      shares += (bytes + n - 1) / n;
      whole += bytes;
    }
    if (shards) {
      EXPECT_EQ(e->frozen_byte_shards(), shares) << "of " << whole << " bytes";
      EXPECT_EQ(held, 0) << "whole 4-bit tensors held between steps";
      EXPECT_EQ(e->gathered_bytes(), 0);
      for (std::size_t i = 0; i < e->bytes_after_layer_forward().size(); ++i)
        EXPECT_EQ(e->bytes_after_layer_forward()[i], 0) << "layer " << i;
    } else {
      EXPECT_EQ(e->frozen_byte_shards(), 0);
      EXPECT_EQ(held, whole);
    }
  }
}

}  // namespace
}  // namespace lft

namespace lft {
namespace {

// A model whose parameter, gradient and optimizer bytes (4 P = 105 MB) dwarf its activations.
std::string memory_run(const std::string& engine, const std::string& extra) {
  return "distributed = \"" + engine + "\"\ntrain_dataset = \"inputs/data/arithmetic.txt\"\n"
         "per_device_train_batch_size = 2\ngradient_accumulation_steps = 1\ncutoff_len = 32\n"
         "max_steps = 3\nseed = 3\n" + extra +
         "[model]\nvocab_size = 512\nhidden_size = 256\nintermediate_size = 688\n"
         "num_hidden_layers = 8\nnum_attention_heads = 4\nnum_key_value_heads = 4\n";
}

struct Peak {
  double step_bytes = 0;     // peak tensor bytes during step 2, above what was allocated before
  double param_bytes = 0;    // P: fp32 bytes of the whole model
  double largest_unit = 0;   // bytes of the largest layer
};

// The allocator's peak of CPU tensor bytes during the second step (the first allocates lazily).
Peak measure(const std::string& toml, MpiCommunicator& comm) {
  const std::int64_t base = cpu_bytes_in_use();
  std::unique_ptr<DeviceMesh> mesh;
  auto trainer = make_trainer(toml, comm, mesh);
  Peak p;
  for (const auto& box : trainer->engine().parameter_boxes()) {
    double numel = 1;
    for (auto d : box.global_shape) numel *= static_cast<double>(d);
    p.param_bytes += 4 * numel;
  }
  trainer->step();
  reset_cpu_peak_bytes();
  trainer->step();
  p.step_bytes = static_cast<double>(cpu_peak_bytes_in_use() - base);
  if (auto* e = sharded(*trainer)) p.largest_unit = static_cast<double>(e->largest_unit_bytes());
  return p;
}

// Peak tensor bytes per rank, counted by the allocator, against the algorithm. A = the one-rank
// run's peak minus its 4 P (parameters, gradients, two AdamW moments): activations and data.
//   full sharding (fsdp2, fsdp, ZeRO-3): 4P/n + A + gathered units: the root, the running and
//     the prefetched layer, a layer's whole gradients, its reduce-scatter buffer, and one layer
//     of slack (<= 6 layers; measured 5.2 at 4 ranks)
//   no reshard: all of P gathered through forward + 3 layers
//   ZeRO-2: whole parameters P + 4P/n + A + a layer's gradients, buffer, slack, and the two
//     gathers of updated shards in flight under the next forward (5 layers)
//   ZeRO-1: whole parameters and gradients 2P + 4P/n + A + 5 layers
// Slack: 10% of 4P/n (padding, AdamW step counters) and 3 MiB (kernel temporaries: with the fused
// kernels the one-rank A is 0.1 MiB, below what a step's temporaries reach at the sharded peak).
TEST(ShardedMemory, PeakTensorBytesMatchTheAlgorithm) {
  const int n = world().size();
  if (n == 1 || n > 4) GTEST_SKIP() << "runs at 2, 3 and 4 ranks";
  ASSERT_TRUE(cpu_memory_counter_installed());
  at::set_num_threads(1);
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  const Peak none = measure(memory_run("none", ""), self);
  const double P = none.param_bytes, A = none.step_bytes - 4 * P;
  struct Expect {
    std::string label, engine, extra;
    double whole;  // multiples of P held whole (parameters, gradients)
  };
  const std::vector<Expect> expects = {
      {"fsdp2", "fsdp2", "", 0},
      {"fsdp2 no reshard", "fsdp2", "[dist_config]\nreshard_after_forward = false\n", 0},
      {"fsdp", "fsdp", "", 0},
      {"ZeRO-3", "deepspeed", "deepspeed = \"inputs/ds_z3_config.json\"\n", 0},
      {"ZeRO-2", "deepspeed", "deepspeed = \"inputs/ds_z2_config.json\"\n", 1},
      {"ZeRO-1", "deepspeed", "deepspeed = \"" + zero1_config() + "\"\n", 2},
  };
  if (world().rank() == 0)
    std::printf("one rank: peak %.1f MiB, 4P = %.1f MiB, A = %.1f MiB\n", none.step_bytes / 1048576,
                4 * P / 1048576, A / 1048576);
  for (const Expect& e : expects) {
    const Peak got = measure(memory_run(e.engine, e.extra), world());
    const double unit = got.largest_unit;
    // No reshard keeps every layer gathered through forward: all of P, not a few units.
    const double gathered = e.extra.find("reshard_after_forward = false") != std::string::npos
                                ? P + 3 * unit
                                : (e.whole > 0 ? 5 * unit : 6 * unit);
    const double bound = e.whole * P + 1.1 * 4 * P / n + A + gathered + 3 * 1048576;
    if (world().rank() == 0)
      std::printf("%-18s peak %.1f MiB, algorithm bound %.1f MiB (%.2fx)\n", e.label.c_str(),
                  got.step_bytes / 1048576, bound / 1048576, got.step_bytes / bound);
    EXPECT_LE(got.step_bytes, bound) << e.label;
    if (e.whole == 0 && e.extra.empty())
      EXPECT_LT(got.step_bytes, none.step_bytes - 0.5 * (4 * P - 4 * P / n)) << e.label << ": sharding must save memory";
  }
}

}  // namespace
}  // namespace lft

namespace lft {
namespace {

std::string fp16_json(int initial_power, double min_scale) {
  const std::string path = "/tmp/lft_ds_fp16_" + std::to_string(initial_power) + "_rank" +
                           std::to_string(world().rank()) + ".json";
  std::ofstream(path) << R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
  "gradient_accumulation_steps": "auto", "fp16": {"enabled": "auto", "loss_scale": 0,
  "initial_scale_power": )" << initial_power << R"(, "loss_scale_window": 1000, "hysteresis": 2,
  "min_loss_scale": )" << min_scale << R"(}, "zero_optimization": {"stage": 2}})";
  return path;
}

// fp16 with dynamic loss scaling: ZeRO-2 and fsdp2 (fp16 gathered parameters) against the
// one-rank fp16 run (same loss scaling). fp16 keeps 11 bits (4.9e-4 relative per product);
// measured: 2.6e-6 (ZeRO-2, fp32 weights under autocast) and 2.2e-5 (fsdp2, fp16 gathered
// weights, whose norms multiply in fp16). Bound: 1e-3.
TEST(ShardedFp16, LossScalingTrainsLikeOneRank) {
  const int n = world().size();
  if (n == 1 || 24 % (2 * n) != 0) GTEST_SKIP() << "runs at 2, 3 and 4 ranks";
  at::set_num_threads(1);
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  const std::string fp16 = "fp16 = true\n";
  const auto reference = test::train_losses(tiny_run("none", 2, 12, fp16), self, 20);
  const std::vector<Case> cases = {
      {"ZeRO-2 fp16", "deepspeed", fp16 + "deepspeed = \"" + fp16_json(16, 1) + "\"\n"},
      {"fsdp2 fp16", "fsdp2", fp16 + "[dist_config]\nmixed_precision = \"fp16\"\n"},
  };
  for (const Case& c : cases) {
    const auto got = test::train_losses(tiny_run(c.engine, 2, 24 / (2 * n), c.extra), world(), 20);
    double worst = 0.0;
    for (std::size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::abs(got[i] - reference[i]) / std::abs(reference[i]));
    if (world().rank() == 0) std::printf("%s: largest relative loss difference %.2e\n", c.label.c_str(), worst);
    EXPECT_LT(worst, 1e-3) << c.label;
    EXPECT_LT(got.back(), 0.8 * got.front()) << c.label;
  }
}

// A scale of 2^40 overflows fp16: steps are skipped and the scale halves until it fits, then
// training goes on. With min_loss_scale = 2^39 the second halving is impossible: the run stops.
TEST(ShardedFp16, OverflowSkipsStepsAndStopsAtTheMinimum) {
  LFT_REQUIRE_RANKS(2);
  at::set_num_threads(1);
  {
    std::unique_ptr<DeviceMesh> mesh;
    auto trainer = make_trainer(
        tiny_run("deepspeed", 2, 1, "fp16 = true\ndeepspeed = \"" + fp16_json(40, 1) + "\"\n"), world(), mesh);
    int skipped = 0;
    std::vector<double> applied;
    for (int i = 0; i < 40; ++i) {
      const auto r = trainer->step();
      if (r.skipped) ++skipped;
      else applied.push_back(r.loss);
    }
    EXPECT_GE(skipped, 10) << "2^40 must come down below fp16's 65504 / gradient size";
    ASSERT_GE(applied.size(), 10u);
    EXPECT_LT(applied.back(), applied.front()) << "training continues after the skipped steps";
  }
  std::unique_ptr<DeviceMesh> mesh;
  auto trainer = make_trainer(
      tiny_run("deepspeed", 2, 1, "fp16 = true\ndeepspeed = \"" + fp16_json(40, 549755813888.0) + "\"\n"),
      world(), mesh);
  try {
    for (int i = 0; i < 5; ++i) trainer->step();
    FAIL() << "expected the run to stop at min_loss_scale";
  } catch (const RunFailure& e) {
    EXPECT_NE(std::string(e.what()).find("the minimum (min_loss_scale)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lft
