// LoRA and freeze fine-tuning under every engine against the one-rank run of the same fine-tuning
// computed in the same test run (each rank alone over MPI_COMM_SELF), from identical weights.
// lora_dropout is 0 here: masks are drawn per data-parallel rank, so a layout with other ranks
// draws other masks (the parity holds for the arithmetic, not the random draws).
//   data-parallel engines (ddp, fsdp, fsdp2, ZeRO 1-3): step 1 bitwise equal, then 1e-5 relative
//   megatron (tensor, sequence, pipeline parallel): 1e-5 relative (the adapters' tensor-parallel
//   sums add in another order)
// Also: frozen tensors stay bitwise unchanged and trained ones change; no frozen parameter reaches
// the optimizer; and the memory of gradients and optimizer state falls to the adapters' size.
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include "lft/comm/mpi_util.h"
#include "lft/config/config.h"
#include "lft/engine/run_plan.h"
#include "lft/model/causal_lm.h"
#include "lft/model/init.h"
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

const std::string kLora = "finetuning_type = \"lora\"\nlora_rank = 4\nlora_alpha = 8\nadditional_target = \"lm_head\"\n";
const std::string kDora = kLora + "use_dora = true\n";
const std::string kFreeze =
    "finetuning_type = \"freeze\"\nfreeze_trainable_layers = 1\nfreeze_extra_modules = \"embed_tokens\"\n";

std::string zero_config(int stage) {
  const std::string path = "/tmp/lft_ft_z" + std::to_string(stage) + "_rank" + std::to_string(world().rank()) + ".json";
  std::ofstream(path) << R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
  "gradient_accumulation_steps": "auto", "zero_optimization": {"stage": )" << stage << "}}";
  return path;
}

struct Case {
  std::string label, engine, extra;
  int min_ranks = 2;
  bool data_parallel = true;  // step 1 bitwise
};

std::vector<Case> cases() {
  return {
      {"ddp", "ddp", ""},
      {"fsdp2", "fsdp2", ""},
      {"fsdp2 checkpointing", "fsdp2", "gradient_checkpointing = true\n"},
      {"fsdp FULL_SHARD", "fsdp", ""},
      {"ZeRO-1", "deepspeed", "deepspeed = \"" + zero_config(1) + "\"\n"},
      {"ZeRO-2", "deepspeed", "deepspeed = \"" + zero_config(2) + "\"\n"},
      {"ZeRO-3", "deepspeed", "deepspeed = \"" + zero_config(3) + "\"\n"},
      {"megatron tp2 sp", "megatron", "[mesh]\ntp = 2\n[dist_config]\nsequence_parallel = true\n", 2, false},
      {"megatron pp2", "megatron", "[mesh]\npp = 2\n", 2, false},
      {"megatron tp2 x pp2 distributed optimizer", "megatron",
       "[mesh]\ntp = 2\npp = 2\n[dist_config]\nuse_distributed_optimizer = true\n", 4, false},
      {"megatron tp4 (kv heads replicated)", "megatron", "[mesh]\ntp = 4\n", 4, false},
      {"megatron dp (buckets)", "megatron", "", 2, false},
      {"megatron dp ZeRO-2 (optim_grads)", "megatron",
       "[dist_config]\ndata_parallel_sharding_strategy = \"optim_grads\"\n", 2, false},
      {"megatron dp ZeRO-3 (optim_grads_params)", "megatron",
       "[dist_config]\ndata_parallel_sharding_strategy = \"optim_grads_params\"\n", 2, false},
      {"megatron pp2 x dp2 ZeRO-2 (optim_grads)", "megatron",
       "[mesh]\npp = 2\n[dist_config]\ndata_parallel_sharding_strategy = \"optim_grads\"\n", 4, false},
  };
}

// The ranks a case's [mesh] gives one model replica (tp x pp).
int model_ranks(const Case& c) {
  int ranks = 1;
  for (const char* key : {"tp = ", "pp = "}) {
    const auto at = c.extra.find(key);
    if (at != std::string::npos) ranks *= std::stoi(c.extra.substr(at + 5));
  }
  return ranks;
}

// The cases a fine-tuning kind runs under (every one by default).
using CaseFilter = bool (*)(const Case&);
bool every_case(const Case&) { return true; }
bool without_tensor_parallel(const Case& c) { return c.extra.find("tp = ") == std::string::npos; }
bool data_parallel_engines(const Case& c) { return c.engine != "megatron"; }

void expect_parity(const std::string& finetuning, CaseFilter applies = every_case) {
  const int n = world().size();
  at::set_num_threads(1);
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  const auto reference = test::train_losses(tiny_run("none", 2, 12, finetuning), self, 10);
  EXPECT_LT(reference.back(), reference.front()) << "the one-rank fine-tuning must learn";
  for (const Case& c : cases()) {
    const int dp = n / model_ranks(c);  // the global batch stays 24 sequences
    if (n < c.min_ranks || n % model_ranks(c) != 0 || 24 % (2 * dp) != 0) continue;
    if (!applies(c)) continue;
    SCOPED_TRACE(c.label);
    // Top-level keys must come before the tables of the case.
    const auto got = test::train_losses(tiny_run(c.engine, 2, 24 / (2 * dp), finetuning + c.extra), world(), 10);
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (i == 0 && c.data_parallel) EXPECT_EQ(got[0], reference[0]) << "step 1 must be bitwise equal";
      EXPECT_NEAR(got[i], reference[i], 1e-5 * std::abs(reference[i])) << "step " << i + 1;
      worst = std::max(worst, std::abs(got[i] - reference[i]) / std::abs(reference[i]));
    }
    if (world().rank() == 0) std::printf("[ finetuning ] %-42s largest relative loss difference %.2e\n", c.label.c_str(), worst);
  }
}

TEST(FinetuningParity, LoraEveryEngineMatchesOneRank) {
  if (world().size() == 1 || world().size() > 4) GTEST_SKIP() << "runs at 2, 3 and 4 ranks";
  expect_parity(kLora);
}

// DoRA's norms are over whole weight rows, which every engine but tensor parallelism (refused)
// gives each layer's forward.
TEST(FinetuningParity, DoraEveryEngineMatchesOneRank) {
  if (world().size() == 1 || world().size() > 4) GTEST_SKIP() << "runs at 2, 3 and 4 ranks";
  expect_parity(kDora, without_tensor_parallel);
}

// QLoRA's 4-bit base is whole on every rank of the data-parallel engines (megatron refused).
TEST(FinetuningParity, QloraEveryEngineMatchesOneRank) {
  if (world().size() == 1 || world().size() > 4) GTEST_SKIP() << "runs at 2, 3 and 4 ranks";
  expect_parity(kLora + "quantization_bit = 4\n", data_parallel_engines);
  expect_parity(kDora + "quantization_bit = 4\nquantization_type = \"fp4\"\ndouble_quantization = false\n",
                data_parallel_engines);
}

TEST(FinetuningParity, FreezeEveryEngineMatchesOneRank) {
  if (world().size() == 1 || world().size() > 4) GTEST_SKIP() << "runs at 2, 3 and 4 ranks";
  expect_parity(kFreeze);
}

// Freeze the last layer only: the first pipeline stage (embedding, layer 0) trains nothing, yet
// passes the activations on and takes the gradients back. Against the one-rank run.
TEST(FinetuningFreeze, PipelineStageThatTrainsNothing) {
  if (world().size() != 2 && world().size() != 4) GTEST_SKIP() << "runs at 2 and 4 ranks";
  at::set_num_threads(1);
  const std::string freeze_last = "finetuning_type = \"freeze\"\nfreeze_trainable_layers = 1\n";
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  const auto reference = test::train_losses(tiny_run("none", 2, 12, freeze_last), self, 6);
  const int dp = world().size() / 2;
  const auto got = test::train_losses(
      tiny_run("megatron", 2, 12 / dp, freeze_last + "[mesh]\npp = 2\n[dist_config]\nuse_distributed_optimizer = true\n"),
      world(), 6);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], reference[i], 1e-5 * reference[i]) << "step " << i + 1;
}

// After training under ddp (whole parameters on every rank), tensor by tensor: what trains has
// changed, everything else is bitwise the seed's initial value; every engine hands the optimizer
// exactly the trained tensors.
TEST(FinetuningFreeze, OnlyTheChosenTensorsChange) {
  if (world().size() != 2) GTEST_SKIP() << "runs at 2 ranks";
  at::set_num_threads(1);
  const std::set<std::string> trained = {"model.embed_tokens.weight",
                                         "model.layers.1.input_layernorm.weight",
                                         "model.layers.1.self_attn.q_proj.weight",
                                         "model.layers.1.self_attn.k_proj.weight",
                                         "model.layers.1.self_attn.v_proj.weight",
                                         "model.layers.1.self_attn.o_proj.weight",
                                         "model.layers.1.post_attention_layernorm.weight",
                                         "model.layers.1.mlp.gate_proj.weight",
                                         "model.layers.1.mlp.up_proj.weight",
                                         "model.layers.1.mlp.down_proj.weight"};
  for (const std::string engine : {"fsdp2", "megatron", "ddp"}) {
    std::unique_ptr<DeviceMesh> mesh;
    const std::string mesh_keys = engine == "megatron" ? "[mesh]\npp = 2\n" : "";
    auto trainer = make_trainer(tiny_run(engine, 2, 6, kFreeze + mesh_keys), world(), mesh);
    std::set<std::string> names;
    for (const std::string& name : trainer->engine().parameter_names()) names.insert(name);
    std::set<std::string> all;  // over the pipeline stages
    for (const std::string& name : all_gather_bytes(world().handle(), [&] {
           std::string joined;
           for (const std::string& n : names) joined += n + "\n";
           return joined;
         }()))
      for (std::size_t at = 0, end; (end = name.find('\n', at)) != std::string::npos; at = end + 1)
        all.insert(name.substr(at, end - at));
    EXPECT_EQ(all, trained) << engine;
    if (engine != "ddp") continue;
    for (int i = 0; i < 3; ++i) trainer->step();
    for (const auto& item : trainer->model().named_parameters()) {
      const at::Tensor initial = model::init_parameter(item.key(), item.value().sizes(), 7);
      if (trained.count(item.key()) != 0)
        EXPECT_FALSE(at::equal(item.value(), initial)) << item.key() << " trains, so it must change";
      else
        EXPECT_TRUE(at::equal(item.value(), initial)) << item.key() << " is frozen, so it must not change";
    }
  }
}

// The memory a step leaves allocated (the CPU allocator's counter): fp32 weights of the whole
// model, and for what trains only: AdamW's two moments (8 bytes an element), ddp's bucket copy (4)
// or the sharded engines' reduced gradient shard (4 / n). Against the formula, and against the
// same engine's full fine-tuning.
TEST(FinetuningMemory, GradientAndOptimizerBytesFallToTheAdapters) {
  const int n = world().size();
  if (n != 2) GTEST_SKIP() << "runs at 2 ranks";
  ASSERT_TRUE(cpu_memory_counter_installed());
  at::set_num_threads(1);
  const std::string model =
      "per_device_train_batch_size = 1\ncutoff_len = 32\nmax_steps = 3\nseed = 3\n"
      "train_dataset = \"inputs/data/arithmetic.txt\"\n";
  const std::string shape =
      "[model]\nvocab_size = 512\nhidden_size = 256\nintermediate_size = 688\nnum_hidden_layers = 8\n"
      "num_attention_heads = 4\nnum_key_value_heads = 4\n";
  struct Held {
    double bytes = 0, trained = 0;  // held after two steps; elements that train
    engine::MemoryEstimate estimate;
  };
  auto held = [&](const std::string& engine, const std::string& finetuning) {
    const std::int64_t base = cpu_bytes_in_use();
    Held h;
    {
      std::unique_ptr<DeviceMesh> mesh;
      const std::string toml = "distributed = \"" + engine + "\"\n" + model + finetuning + shape;
      auto trainer = make_trainer(toml, world(), mesh);
      const config::Config cfg = config::parse_config(toml, "test.toml");
      h.estimate = engine::resolve_run_plan(cfg, mesh->shape()).memory;
      for (const auto& box : trainer->engine().parameter_boxes()) {
        double numel = 1;
        for (auto d : box.global_shape) numel *= static_cast<double>(d);
        h.trained += numel;
      }
      trainer->step();
      trainer->step();
      h.bytes = static_cast<double>(cpu_bytes_in_use() - base);
    }
    return h;
  };
  const double P = 512.0 * 256 * 2 + 8 * (4.0 * 256 * 256 + 3.0 * 256 * 688 + 2 * 256) + 256;
  const double MiB = 1048576.0;
  for (const std::string engine : {"ddp", "fsdp2"}) {
    const Held full = held(engine, "");
    const Held lora = held(engine, "finetuning_type = \"lora\"\nlora_rank = 8\n");
    const double T = lora.trained;
    // Adapters of rank 8 beside the 7 linears of 8 layers.
    EXPECT_EQ(T, 8 * 8 * (4 * (256 + 256) + 3 * (256 + 688)) + 0.0);
    const double weights = engine == "ddp" ? 4 * (P + T) : 4 * (P + T) / n;
    const double lora_expect = weights + (engine == "ddp" ? 12 * T : 12 * T / n);
    // fsdp2 also keeps its reduce-scatter's send and receive buffers across steps: the largest
    // unit's (a layer's L elements) fp32 gradients, whole and this rank's part.
    const double L = 4.0 * 256 * 256 + 3.0 * 256 * 688 + 2 * 256;
    const double full_expect = engine == "ddp" ? 16 * P : 16 * P / n + 4 * L * (n + 1) / n;
    if (world().rank() == 0)
      std::printf("[ finetuning ] %-6s full %.1f MiB (formula %.1f), lora %.1f MiB (formula %.1f): %.2fx less\n",
                  engine.c_str(), full.bytes / MiB, full_expect / MiB, lora.bytes / MiB, lora_expect / MiB,
                  full.bytes / lora.bytes);
    EXPECT_NEAR(lora.bytes, lora_expect, 0.05 * lora_expect + 2 * MiB) << engine;
    // The --check estimate counts the same: gradients and optimizer state of the adapters only.
    const double shards = engine == "ddp" ? 1 : n;
    EXPECT_NEAR(lora.estimate.optimizer, 8 * T / shards, 0.02 * 8 * T / shards) << engine;
    EXPECT_NEAR(lora.estimate.gradients, 4 * T / shards, 0.02 * 4 * T / shards) << engine;
    EXPECT_NEAR(full.estimate.optimizer, 8 * P / shards, 0.02 * 8 * P / shards) << engine;
    EXPECT_NEAR(full.bytes, full_expect, 0.05 * full_expect + 2 * MiB) << engine;
  }
}

}  // namespace
}  // namespace lft
