// [mesh] cp and cp_mode are checked before anything starts: an engine without the cp dim and,
// under Ulysses, a cp (x tp) that does not divide the attention heads are
// config errors that name the key and the numbers; a cp layout's memory estimate counts each
// rank's chunk of the sequences.
#include <gtest/gtest.h>

#include <list>

#include "lft/config/config.h"
#include "lft/engine/mesh_plan.h"
#include "lft/engine/parallel_config.h"
#include "lft/engine/registry.h"
#include "lft/engine/run_plan.h"

namespace lft {
namespace {

// The repository's example data (unit tests run in the build folder).
std::string data_file() {
  const std::string here = __FILE__;  // <root>/tests/unit/test_context_parallel_plan.cpp
  return here.substr(0, here.rfind("/tests/")) + "/inputs/data/arithmetic.txt";
}

std::string toml(const std::string& engine, int kv_heads, const std::string& mesh, const std::string& extra = "") {
  return "distributed = \"" + engine + "\"\ntrain_dataset = \"" + data_file() + "\"\ncutoff_len = 4096\n" + extra +
         "[model]\nvocab_size = 259\nhidden_size = 64\nintermediate_size = 128\nnum_hidden_layers = 2\n"
         "num_attention_heads = 4\nnum_key_value_heads = " + std::to_string(kv_heads) + "\n[mesh]\n" + mesh;
}

engine::RunPlan plan_of(const std::string& text, int world) {
  static std::list<config::Config> keep;  // a plan refers to its config
  keep.push_back(config::parse_config(text, "job.toml"));
  const config::Config& cfg = keep.back();
  return engine::resolve_run_plan(cfg, engine::plan_mesh(cfg, engine::engine_for(cfg), world));
}

std::string error_of(const std::string& text, int world) {
  try {
    plan_of(text, world);
  } catch (const config::ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ContextParallelPlan, LayoutsThatCannotSplitTheSequencesAreRefused) {
  const std::string none = error_of(toml("none", 2, "cp = 2\n"), 1);
  EXPECT_NE(none.find("engine 'none' does not use the cp dim"), std::string::npos) << none;
  const std::string tp = error_of(toml("megatron", 2, "tp = 2\ncp = 4\n"), 8);
  EXPECT_NE(tp.find("mesh.cp = 4 x mesh.tp = 2 does not divide the model's 4 attention heads"), std::string::npos) << tp;
  const std::string heads = error_of(toml("ddp", 4, "cp = 8\n"), 8);
  EXPECT_NE(heads.find("mesh.cp = 8 does not divide the model's 4 attention heads"), std::string::npos) << heads;
  EXPECT_NE(heads.find("job.toml:"), std::string::npos) << heads;
  EXPECT_NE(heads.find("or dist_config.cp_mode = \"ring\""), std::string::npos) << heads;  // issue 50: the way out
  // A cp that does not divide the ranks: the dims that multiply are named at their lines (issue 50).
  const std::string fill = error_of(toml("fsdp2", 2, "cp = 3\n"), 2);
  EXPECT_NE(fill.find("the other dims multiply to 3 (job.toml:12:1: key 'mesh.cp' = 3), which does not divide the job's 2 ranks"),
            std::string::npos) << fill;
  EXPECT_EQ(error_of(toml("fsdp2", 2, "cp = 4\n"), 4), "");  // 2 kv heads repeated over 4 cp ranks
  // Ring attention keeps every head on every rank: any cp.
  EXPECT_EQ(error_of(toml("ddp", 4, "cp = 8\n", "[dist_config]\ncp_mode = \"ring\"\n"), 8), "");
}

TEST(ContextParallelPlan, EachRankHoldsItsChunksActivations) {
  const engine::RunPlan one = plan_of(toml("fsdp2", 4, "cp = 1\n"), 4);
  const engine::RunPlan four = plan_of(toml("fsdp2", 4, "cp = 4\ndp_shard = 1\n"), 4);
  EXPECT_EQ(four.mesh[MeshDim::CP], 4);
  EXPECT_EQ(four.global_batch, 1);  // the cp ranks train on the same sequences
  EXPECT_NEAR(four.memory.activations, one.memory.activations / 4, 1e-6 * one.memory.activations);
}

}  // namespace
}  // namespace lft
