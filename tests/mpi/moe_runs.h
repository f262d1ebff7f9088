// Mixture-of-experts runs for multi-rank tests (test_moe_engines.cpp, test_expert_parallel.cpp):
// tiny Qwen3-MoE and Qwen2-MoE folders, their run files, and the comparison of a layout's losses
// and gradient norms with the one-rank run of the same folder, computed in the same test run (each
// rank alone over MPI_COMM_SELF): the same global batch of 24 sequences in micro-batches of 2, 8
// steps, fp32, within 1e-6 relative at step 1 and 1e-5 after.
#pragma once

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "lft/model/model_config.h"
#include "model_folder.h"
#include "mpi_test_util.h"
#include "trainer_util.h"

namespace lft::test {

inline constexpr int kSteps = 8;

inline model::ModelConfig moe_config(const std::string& family) {
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

// The router's 0.02 init leaves routing near uniform; larger router weights (x router_scale)
// make it uneven, so that the auxiliary loss and its gradient are far from their balanced values.
// router_scale 0: every router weight zero, so every token picks the same experts (the lowest ones).
inline std::string moe_folder(const std::string& family, double router_scale = 50) {
  const std::string tag = router_scale == 50 ? "" : "_router" + std::to_string(static_cast<int>(router_scale));
  return write_model_folder("/tmp/lft_moe_" + family + tag + "_np" + std::to_string(world().size()),
                            moe_config(family), 11, [router_scale](const std::string& name, const at::Tensor& t) {
                              return name.find("mlp.gate.weight") != std::string::npos ? t * router_scale : t;
                            });
}

inline std::string run_toml(const std::string& folder, const std::string& engine, int accum, const std::string& extra) {
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

inline void engines_match_the_one_rank_run(const std::string& family, const std::string& data, const std::vector<Case>& cases,
                                            const std::string& folder_given = "") {
  const int n = world().size();
  at::set_num_threads(1);
  const std::string folder = folder_given.empty() ? moe_folder(family) : folder_given;
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  const auto reference = losses_and_grad_norms(run_toml(folder, "none", 12, data), self, kSteps);
  for (const Case& c : cases) {
    if (c.ranks != 0 && c.ranks != n) continue;
    SCOPED_TRACE(c.label);
    const int dp = c.dp_ranks == 0 ? n : c.dp_ranks;
    const auto got = losses_and_grad_norms(run_toml(folder, c.engine, 24 / (2 * dp), data + c.extra), world(), kSteps);
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double tolerance = i == 0 ? 1e-6 : 1e-5;  // step 1: the same weights, only the sums' order differs
      EXPECT_NEAR(got[i].first, reference[i].first, tolerance * std::abs(reference[i].first))
          << family << ", " << c.label << " step " << i + 1;
      EXPECT_NEAR(got[i].second, reference[i].second, tolerance * std::abs(reference[i].second))
          << family << ", " << c.label << " gradient norm, step " << i + 1;
    }
  }
}

// Trains to max_steps over `comm`, saving at step `save_at` (> 0); the losses of the steps it ran.
inline std::vector<double> train_saving(const std::string& toml, MpiCommunicator& comm, int save_at) {
  std::unique_ptr<DeviceMesh> mesh;
  auto trainer = make_trainer(toml, comm, mesh);
  std::vector<double> losses;
  while (trainer->current_step() < trainer->total_steps()) {
    losses.push_back(trainer->step().loss);
    if (trainer->current_step() == save_at) trainer->save();
  }
  return losses;
}

}  // namespace lft::test
