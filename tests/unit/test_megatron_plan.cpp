// The megatron engine's layout: layers per (virtual) pipeline stage, the box of each parameter a
// tensor-parallel rank holds, and the settings that cannot work.
#include <gtest/gtest.h>

#include <fstream>

#include "lft/config/config.h"
#include "lft/engine/megatron_plan.h"
#include "lft/engine/mesh_plan.h"
#include "lft/engine/parallel_config.h"
#include "lft/engine/registry.h"
#include "lft/engine/run_plan.h"
#include "lft/model/families.h"
#include "test_util.h"

namespace lft::engine {
namespace {

std::string data_file() {
  static const std::string p = [] {
    std::string path = ::testing::TempDir() + "lft_test_megatron_plan_data.txt";
    std::ofstream(path) << "1 + 2 = 3\n";
    return path;
  }();
  return p;
}

config::Config run(const std::string& dist, std::int64_t layers = 8, std::int64_t accum = 4) {
  return config::parse_config("distributed = \"megatron\"\ntrain_dataset = \"" + data_file() +
                                  "\"\ncutoff_len = 32\ngradient_accumulation_steps = " + std::to_string(accum) +
                                  "\n[dist_config]\n" + dist +
                                  "[model]\nvocab_size = 259\nhidden_size = 32\nintermediate_size = 66\n"
                                  "num_hidden_layers = " + std::to_string(layers) +
                                  "\nnum_attention_heads = 4\nnum_key_value_heads = 2\n",
                              "megatron.toml");
}

MeshShape mesh(int pp, int tp) {
  MeshShape m;
  m[MeshDim::PP] = pp;
  m[MeshDim::TP] = tp;
  return m;
}

std::shared_ptr<model::CausalLM> meta_model(const config::Config& cfg) {
  return model::create_causal_lm(model::ModelConfig::from_run_config(cfg), at::TensorOptions().device(at::kMeta));
}

MegatronPlan plan(const config::Config& cfg, int pp, int tp) {
  return make_megatron_plan(cfg, *meta_model(cfg), mesh(pp, tp));
}

using Layers = std::vector<std::pair<std::int64_t, std::int64_t>>;

// Offload belongs to the sharded data-parallel component: megatron takes it with a sharding
// strategy (ZeRO over its boxes) and refuses it, naming the key, without one.
TEST(MegatronPlan, OffloadRidesOnTheShardedComponent) {
  const std::string offload = "offload_params = true\n";
  const std::string none = test::message_of<config::ConfigError>([&] { resolve_run_plan(run(offload), mesh(1, 1)); });
  EXPECT_NE(none.find("megatron.toml:"), std::string::npos) << none;
  EXPECT_NE(none.find("offload_params keeps the shards of megatron's sharded data parallelism"), std::string::npos) << none;
  const RunPlan sharded = resolve_run_plan(run(offload + "data_parallel_sharding_strategy = \"optim_grads_params\"\n"), mesh(1, 1));
  ASSERT_TRUE(sharded.parallel.sharded.has_value());
  EXPECT_TRUE(sharded.parallel.sharded->offload);
  EXPECT_TRUE(sharded.memory.offload);  // the estimate counts the shards on the host
}

// The float8 all-gather is the sharded component's too: megatron takes it where it gathers weights
// (optim_grads_params) and float8 linears exist, and otherwise refuses it naming the key and why.
TEST(MegatronPlan, Float8AllGatherNeedsGatheredWeightsAndFp8) {
  auto with = [](const std::string& top, const std::string& dist) {
    return config::parse_config(top + "distributed = \"megatron\"\ntrain_dataset = \"" + data_file() +
                                    "\"\ncutoff_len = 32\ngradient_accumulation_steps = 4\n[dist_config]\n"
                                    "fp8_enable_fsdp_float8_all_gather = true\n" + dist +
                                    "[model]\nvocab_size = 259\nhidden_size = 32\nintermediate_size = 64\n"
                                    "num_hidden_layers = 2\nnum_attention_heads = 4\nnum_key_value_heads = 2\n",
                                "megatron.toml");
  };
  const std::string zero3 = "data_parallel_sharding_strategy = \"optim_grads_params\"\n";
  const std::string no_fp8 = test::message_of<config::ConfigError>([&] { resolve_run_plan(with("", zero3), mesh(1, 1)); });
  EXPECT_NE(no_fp8.find("fp8_enable_fsdp_float8_all_gather"), std::string::npos) << no_fp8;
  EXPECT_NE(no_fp8.find("fp8 is false"), std::string::npos) << no_fp8;
  for (const std::string& strategy : {std::string(), std::string("data_parallel_sharding_strategy = \"optim_grads\"\n")}) {
    const std::string m = test::message_of<config::ConfigError>([&] { resolve_run_plan(with("fp8 = true\n", strategy), mesh(1, 1)); });
    EXPECT_NE(m.find("megatron.toml:"), std::string::npos) << m;
    EXPECT_NE(m.find("gathers its weights only with data_parallel_sharding_strategy = \"optim_grads_params\""),
              std::string::npos)
        << m;
  }
  const RunPlan ok = resolve_run_plan(with("fp8 = true\n", zero3), mesh(1, 1));
  ASSERT_TRUE(ok.parallel.sharded.has_value());
  EXPECT_TRUE(ok.parallel.sharded->float8_all_gather);
}

// DoRA takes each whole output row's norm: tensor parallelism (row-parallel linears split them)
// and fp8 (no base weight kept) are refused, naming use_dora; pipeline stages take it.
TEST(MegatronPlan, DoraRefusedUnderTensorParallelismAndFp8) {
  auto dora = [](const std::string& extra) {
    return config::parse_config("distributed = \"megatron\"\ntrain_dataset = \"" + data_file() +
                                    "\"\ncutoff_len = 32\ngradient_accumulation_steps = 4\nfinetuning_type = \"lora\"\n"
                                    "use_dora = true\n" + extra +
                                    "[model]\nvocab_size = 259\nhidden_size = 32\nintermediate_size = 64\n"
                                    "num_hidden_layers = 4\nnum_attention_heads = 4\nnum_key_value_heads = 2\n",
                                "dora.toml");
  };
  const std::string tp = test::message_of<config::ConfigError>([&] { resolve_run_plan(dora(""), mesh(1, 2)); });
  EXPECT_NE(tp.find("dora.toml:6:1: key 'use_dora' = true: DoRA takes the norm of each whole output row"), std::string::npos) << tp;
  EXPECT_NE(tp.find("tensor parallelism (mesh.tp = 2)"), std::string::npos) << tp;
  const std::string fp8 = test::message_of<config::ConfigError>([&] { resolve_run_plan(dora("fp8 = true\n"), mesh(1, 1)); });
  EXPECT_NE(fp8.find("fp8 = true keeps the base weights for float8 GEMMs only"), std::string::npos) << fp8;
  EXPECT_NO_THROW(resolve_run_plan(dora(""), mesh(2, 1)));
}

// Muon under megatron: each rank keeps one fp32 momentum of its box of a matrix where AdamW keeps
// two moments, and a sharding strategy cuts that again over the shard group. The tiny model's
// matrices: 4 layers of q, o (32 x 32), k, v (16 x 32), gate, up, down (64 x 32) = 36864 elements.
TEST(MegatronPlan, MuonKeepsOneMomentumPerBox) {
  auto optimizer = [](bool muon, const std::string& extra, int tp, int dp_shard) {
    const config::Config cfg = config::parse_config(
        "distributed = \"megatron\"\ntrain_dataset = \"" + data_file() +
            "\"\ncutoff_len = 32\ngradient_accumulation_steps = 4\nuse_muon = " + (muon ? "true" : "false") + "\n" +
            extra + "[model]\nvocab_size = 259\nhidden_size = 32\nintermediate_size = 64\n"
                    "num_hidden_layers = 4\nnum_attention_heads = 4\nnum_key_value_heads = 2\n",
        "muon.toml");
    MeshShape m = mesh(1, tp);
    m[MeshDim::DPShard] = dp_shard;
    return resolve_run_plan(cfg, m).memory.optimizer;
  };
  EXPECT_DOUBLE_EQ(optimizer(false, "", 2, 1) - optimizer(true, "", 2, 1), 4.0 * 36864 / 2);
  const std::string sharded = "[dist_config]\ndata_parallel_sharding_strategy = \"optim\"\n";
  EXPECT_DOUBLE_EQ(optimizer(false, sharded, 2, 2) - optimizer(true, sharded, 2, 2), 4.0 * 36864 / 4);
}

// QLoRA's 4-bit base outside the engines' parameters: megatron (boxes, stages) and fp8 are refused, naming
// quantization_bit; 8 bits (LLM.int8) are refused at the key.
TEST(MegatronPlan, QuantizedBaseRefusedUnderMegatronAndFp8) {
  auto qlora = [](const std::string& engine, const std::string& extra) {
    return config::parse_config("distributed = \"" + engine + "\"\ntrain_dataset = \"" + data_file() +
                                    "\"\ncutoff_len = 32\nfinetuning_type = \"lora\"\n" + extra +
                                    "[model]\nvocab_size = 259\nhidden_size = 32\nintermediate_size = 64\n"
                                    "num_hidden_layers = 4\nnum_attention_heads = 4\nnum_key_value_heads = 2\n",
                                "qlora.toml");
  };
  const std::string megatron =
      test::message_of<config::ConfigError>([&] { resolve_run_plan(qlora("megatron", "quantization_bit = 4\n"), mesh(2, 1)); });
  EXPECT_NE(megatron.find("qlora.toml:5:1: key 'quantization_bit' = 4: megatron's tensor-parallel boxes and pipeline stages of a 4-bit base are not built"),
            std::string::npos) << megatron;
  const std::string fp8 = test::message_of<config::ConfigError>(
      [&] { resolve_run_plan(qlora("fsdp2", "quantization_bit = 4\nfp8 = true\n"), MeshShape{}); });
  EXPECT_NE(fp8.find("not cast to float8"), std::string::npos) << fp8;
  const std::string int8 = test::message_of<config::ConfigError>([&] { qlora("ddp", "quantization_bit = 8\n"); });
  EXPECT_NE(int8.find("qlora.toml:5:1: quantization_bit = 8 asks for bitsandbytes' LLM.int8 base"), std::string::npos) << int8;
  EXPECT_NO_THROW(resolve_run_plan(qlora("fsdp2", "quantization_bit = 4\n"), MeshShape{}));
}

TEST(MegatronPlan, LayersBalancedOrGivenForTheFirstAndLastStage) {
  EXPECT_EQ(plan(run(""), 3, 1).stage_layers, (Layers{{0, 3}, {3, 6}, {6, 8}}));
  EXPECT_EQ(plan(run("decoder_first_pipeline_num_layers = 1\ndecoder_last_pipeline_num_layers = 2\n"), 3, 1)
                .stage_layers,
            (Layers{{0, 1}, {1, 6}, {6, 8}}));
  EXPECT_EQ(plan(run("decoder_first_pipeline_num_layers = 2\n"), 4, 1).stage_layers,
            (Layers{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  // interleaved: 2 stages x 2 chunks, chunk c of stage s is virtual stage 2c + s
  const MegatronPlan p = plan(run("pipeline_schedule = \"interleaved_1f1b\"\n"
                                  "virtual_pipeline_model_parallel_size = 2\n"), 2, 1);
  EXPECT_EQ(p.stage_layers, (Layers{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  EXPECT_EQ(p.virtual_stage(1, 1), 3);
}

TEST(MegatronPlan, TensorParallelBoxes) {
  const config::Config cfg = run("");
  const auto m = meta_model(cfg);  // head_dim 8, 2 kv heads, ffn 66
  auto tp_slice = [&m](const std::string& name, int tp, int rank) {
    return engine::tp_slice(m->placement(name).tp, tp, rank);
  };
  TpSlice q = tp_slice("model.layers.0.self_attn.q_proj.weight", 2, 1);
  EXPECT_EQ(q.dim, 0);
  EXPECT_EQ(q.begin, 16);
  EXPECT_EQ(q.count, 16);
  TpSlice o = tp_slice("model.layers.0.self_attn.o_proj.weight", 2, 1);
  EXPECT_EQ(o.dim, 1);
  EXPECT_EQ(o.begin, 16);
  // tp 4 > 2 kv heads: ranks 2 and 3 share kv head 1
  TpSlice k = tp_slice("model.layers.0.self_attn.k_proj.weight", 4, 3);
  EXPECT_EQ(k.begin, 8);
  EXPECT_EQ(k.count, 8);
  EXPECT_EQ(k.holders, 2);
  EXPECT_EQ(k.holder, 1);
  // 66 rows over 4 ranks: 17, 17, 17, 15; 259 vocabulary rows: 65, 65, 65, 64
  EXPECT_EQ(tp_slice("model.layers.0.mlp.up_proj.weight", 4, 3).count, 15);
  EXPECT_EQ(tp_slice("model.layers.0.mlp.down_proj.weight", 4, 3).dim, 1);
  EXPECT_EQ(tp_slice("lm_head.weight", 4, 3).begin, 195);
  EXPECT_EQ(tp_slice("lm_head.weight", 4, 3).count, 64);
  TpSlice norm = tp_slice("model.norm.weight", 4, 2);
  EXPECT_EQ(norm.dim, -1);
  EXPECT_EQ(norm.holders, 4);
}

TEST(MegatronPlan, ImpossibleSettingsNameTheNumbers) {
  auto error = [](auto&& make) { return test::message_of<config::ConfigError>(make); };
  EXPECT_CONTAINS(error([] { plan(run(""), 1, 3); }), "4 attention heads do not divide over 3");
  EXPECT_CONTAINS(error([] { plan(run("", 8, 1), 2, 1); }), "needs at least pp = 2 micro-batches");
  EXPECT_CONTAINS(error([] { plan(run("virtual_pipeline_model_parallel_size = 2\n"), 2, 1); }),
                  "virtual stages need pipeline_schedule = \"interleaved_1f1b\"");
  EXPECT_CONTAINS(error([] {
                    plan(run("pipeline_schedule = \"interleaved_1f1b\"\nvirtual_pipeline_model_parallel_size = 3\n"), 2, 1);
                  }),
                  "8 decoder layers do not divide into pp x virtual stages = 2 x 3 = 6");
  EXPECT_CONTAINS(error([] { plan(run("decoder_first_pipeline_num_layers = 7\n"), 3, 1); }), "cannot fill 3");
  EXPECT_CONTAINS(error([] { plan(run("sequence_parallel = true\n"), 1, 3); }), "attention heads");
}

// Megatron's data parallelism: a sharding strategy fills dp_shard by default; one that would
// shard over a single rank while replicating, dp_shard without a strategy, and a strategy that
// contradicts use_distributed_optimizer are refused, naming the keys.
TEST(MegatronPlan, DataParallelShardingMesh) {
  auto shape = [](const std::string& dist, const std::string& mesh_lines, int world) {
    const config::Config cfg = config::parse_config(
        "distributed = \"megatron\"\ntrain_dataset = \"" + data_file() + "\"\n[mesh]\n" + mesh_lines +
            "[dist_config]\n" + dist + "[model]\nvocab_size = 259\nhidden_size = 32\nintermediate_size = 66\n"
            "num_hidden_layers = 8\nnum_attention_heads = 4\nnum_key_value_heads = 2\n",
        "megatron.toml");
    const MeshShape m = plan_mesh(cfg, engine_for(cfg), world);
    make_megatron_plan(cfg, *meta_model(cfg), m);
    return m;
  };
  const std::string zero3 = "data_parallel_sharding_strategy = \"optim_grads_params\"\n";
  EXPECT_EQ(shape(zero3, "", 4)[MeshDim::DPShard], 4);
  EXPECT_EQ(shape("", "", 4)[MeshDim::DPReplicate], 4);
  EXPECT_EQ(shape("use_distributed_optimizer = true\n", "", 4)[MeshDim::DPReplicate], 4);
  const MeshShape hsdp = shape(zero3, "dp_replicate = 2\n", 8);
  EXPECT_EQ(hsdp[MeshDim::DPReplicate] * 10 + hsdp[MeshDim::DPShard], 24);
  auto error = [&](const std::string& dist, const std::string& mesh_lines) {
    return test::message_of<config::ConfigError>([&] { shape(dist, mesh_lines, 4); });
  };
  EXPECT_CONTAINS(error(zero3, "dp_replicate = 4\n"), "shards over [mesh] dp_shard x cp, which is 1 here");
  EXPECT_CONTAINS(error("", "dp_shard = 4\n"), "megatron shards over dp_shard only with a data_parallel_sharding_strategy");
  EXPECT_CONTAINS(error("use_distributed_optimizer = true\n", "dp_shard = 4\n"),
                  "use_distributed_optimizer shards over every data-parallel rank, which megatron keeps on dp_replicate");
  EXPECT_CONTAINS(error("use_distributed_optimizer = true\n" + zero3, ""),
                  "megatron.toml:6:1: key 'dist_config.data_parallel_sharding_strategy'");
}

// fp8's GEMMs (_scaled_mm on CUDA) take widths that are multiples of 16: each float8 linear is
// checked as every tensor-parallel rank holds it, when the run is planned.
TEST(MegatronPlan, Float8WidthsAreMultiplesOf16OnEveryTensorParallelRank) {
  auto fp8_run = [](std::int64_t ffn) {
    return config::parse_config("distributed = \"megatron\"\nfp8 = true\ntrain_dataset = \"" + data_file() +
                                    "\"\ncutoff_len = 32\n[model]\nvocab_size = 259\nhidden_size = 32\n"
                                    "intermediate_size = " + std::to_string(ffn) +
                                    "\nnum_hidden_layers = 2\nnum_attention_heads = 4\nnum_key_value_heads = 2\n",
                                "fp8.toml");
  };
  EXPECT_NO_THROW(resolve_run_plan(fp8_run(64), mesh(1, 1)));  // k/v 16 wide, q/o 32, ffn 64
  const std::string odd = test::message_of<config::ConfigError>([&] { resolve_run_plan(fp8_run(66), mesh(1, 1)); });
  EXPECT_CONTAINS(odd, "fp8.toml:2:1: key 'fp8'");
  EXPECT_CONTAINS(odd, "model.layers.0.mlp.gate_proj.weight is [66, 32]");
  EXPECT_CONTAINS(odd, "multiples of 16");
  // tp 2: each rank holds one of the two kv heads, 8 wide.
  const std::string split = test::message_of<config::ConfigError>([&] { resolve_run_plan(fp8_run(64), mesh(1, 2)); });
  EXPECT_CONTAINS(split, "model.layers.0.self_attn.k_proj.weight is [16, 32], [8, 32] on tensor-parallel rank 0 of 2");
}

}  // namespace
}  // namespace lft::engine
