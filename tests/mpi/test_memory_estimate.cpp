// The run plan's per-rank memory estimate (what `lftrain --check` prints) against the peak
// tensor bytes the same run measures (the CPU allocator's count, from before the trainer is
// built to the end of its third step; the largest over the ranks, as the estimate is the worst
// rank's), for every engine at 2 and 4 ranks (none alone): within 15%. The model (0.8 M parameters, 4 layers) is large enough that weights,
// gradients and optimizer state matter next to activations, as they do in real runs.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "lft/engine/registry.h"
#include "lft/engine/run_plan.h"
#include "lft/model/fused.h"
#include "lft/runtime/memory.h"
#include "lft/train/trainer.h"
#include "mpi_test_util.h"
#include "trainer_util.h"

namespace lft {
namespace {

using test::make_trainer;
using test::world;

// A small text file, so that the tokenized data is negligible next to the model.
std::string data_file() {
  const std::string path = "/tmp/lft_memory_estimate_rank" + std::to_string(world().rank()) + ".txt";
  std::ofstream out(path);
  for (int i = 0; i < 120; ++i) out << i << " + " << 3 * i + 1 << " = " << 4 * i + 1 << "\n";
  return path;
}

std::string zero1_file() {
  const std::string path = "/tmp/lft_memory_estimate_z1_rank" + std::to_string(world().rank()) + ".json";
  std::ofstream(path) << R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
  "gradient_accumulation_steps": "auto", "zero_optimization": {"stage": 1}})";
  return path;
}

const char* const kModel =
    "[model]\nvocab_size = 259\nhidden_size = 128\nintermediate_size = 352\nnum_hidden_layers = 4\n"
    "num_attention_heads = 4\nnum_key_value_heads = 2\n";

std::string run_toml(const std::string& engine, const std::string& extra, int accumulation = 2) {
  return "distributed = \"" + engine + "\"\ntrain_dataset = \"" + data_file() +
         "\"\nper_device_train_batch_size = 2\ngradient_accumulation_steps = " + std::to_string(accumulation) +
         "\ncutoff_len = 32\n"
         "learning_rate = 1e-3\nmax_steps = 3\nseed = 3\n" + extra + kModel;
}

struct Case {
  std::string label, engine, extra;
  int ranks;  // 0: 2 and 4
  int accumulation = 2;
};

std::vector<Case> cases() {
  return {
      {"ddp", "ddp", "", 0},
      {"ddp, no accumulation", "ddp", "", 0, 1},
      {"ZeRO-3, no accumulation", "deepspeed", "deepspeed = \"inputs/ds_z3_config.json\"\n", 0, 1},
      {"fsdp2", "fsdp2", "", 0},
      {"fsdp2 no reshard", "fsdp2", "[dist_config]\nreshard_after_forward = false\n", 0},
      {"fsdp2 offload (host to host on the CPU)", "fsdp2", "[dist_config]\noffload_params = true\n", 0},
      {"fsdp FULL_SHARD", "fsdp", "", 0},
      {"fsdp SHARD_GRAD_OP", "fsdp", "[dist_config]\nsharding_strategy = \"SHARD_GRAD_OP\"\n", 0},
      {"fsdp NO_SHARD", "fsdp", "[dist_config]\nsharding_strategy = \"NO_SHARD\"\n", 0},
      {"ZeRO-1", "deepspeed", "deepspeed = \"" + zero1_file() + "\"\n", 0},
      {"ZeRO-2", "deepspeed", "deepspeed = \"inputs/ds_z2_config.json\"\n", 0},
      {"ZeRO-3", "deepspeed", "deepspeed = \"inputs/ds_z3_config.json\"\n", 0},
      {"megatron tp 2", "megatron", "[mesh]\ntp = 2\n", 2},
      {"megatron pp 2", "megatron", "[mesh]\npp = 2\n", 2},
      {"megatron pp 2, 4 micro-batches", "megatron", "[mesh]\npp = 2\n", 2, 4},
      {"megatron tp 2 x pp 2", "megatron", "[mesh]\ntp = 2\npp = 2\n", 4},
      {"megatron dp 2 (gradient buckets)", "megatron", "", 2},
      {"megatron tp 2 x dp 2", "megatron", "[mesh]\ntp = 2\n", 4},
      {"megatron tp 2 x dp 2, distributed optimizer", "megatron",
       "[mesh]\ntp = 2\n[dist_config]\nuse_distributed_optimizer = true\n", 4},
      {"megatron dp 2 ZeRO-2 (optim_grads)", "megatron",
       "[dist_config]\ndata_parallel_sharding_strategy = \"optim_grads\"\n", 2},
      {"megatron dp 2 ZeRO-3 (optim_grads_params)", "megatron",
       "[dist_config]\ndata_parallel_sharding_strategy = \"optim_grads_params\"\n", 2},
      {"megatron tp 2 x dp 2 ZeRO-3", "megatron",
       "[mesh]\ntp = 2\n[dist_config]\ndata_parallel_sharding_strategy = \"optim_grads_params\"\n", 4},
      {"megatron pp 2 x dp 2 ZeRO-3, 4 micro-batches", "megatron",
       "[mesh]\npp = 2\n[dist_config]\ndata_parallel_sharding_strategy = \"optim_grads_params\"\n", 4, 4},
      {"megatron HSDP 2 x 2 ZeRO-3", "megatron",
       "[mesh]\ndp_replicate = 2\n[dist_config]\ndata_parallel_sharding_strategy = \"optim_grads_params\"\n", 4},
  };
}

// {estimate, measured}: the plan's estimate is the worst rank's, so it is held to the largest
// peak of the ranks of `comm`.
std::pair<double, double> estimate_and_peak(const std::string& toml, MpiCommunicator& comm) {
  std::unique_ptr<DeviceMesh> mesh;
  const double base = static_cast<double>(cpu_bytes_in_use());
  reset_cpu_peak_bytes();
  auto trainer = make_trainer(toml, comm, mesh);
  for (int i = 0; i < 3; ++i) trainer->step();
  at::Tensor peak = at::full({1}, static_cast<double>(cpu_peak_bytes_in_use()) - base, at::kDouble);
  comm.all_reduce(peak, ReduceOp::Max);
  const config::Config cfg = config::parse_config(toml, "test.toml");
  return {engine::resolve_run_plan(cfg, mesh->shape()).memory.total(), peak.item<double>()};
}

void expect_close(const std::string& label, const std::pair<double, double>& r, int ranks) {
  const auto [estimate, peak] = r;
  const double error = estimate / peak - 1.0;
  if (world().rank() == 0)
    std::printf("[ memory ] %-44s %d rank(s): estimate %7.2f MiB, measured %7.2f MiB (%+.1f%%)\n", label.c_str(),
                ranks, estimate / 1048576.0, peak / 1048576.0, 100 * error);
  EXPECT_LE(std::abs(error), 0.15) << label << ": estimate " << estimate << " B, measured " << peak << " B";
}

TEST(MemoryEstimate, WithinFifteenPercentOfTheMeasuredPeak) {
  ASSERT_TRUE(cpu_memory_counter_installed());
  const int n = world().size();
  if (n != 2 && n != 4) GTEST_SKIP() << "runs at 2 and 4 ranks";
  at::set_num_threads(1);
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  expect_close("none", estimate_and_peak(run_toml("none", ""), self), 1);
  for (const Case& c : cases()) {
    if (c.ranks != 0 && c.ranks != n) continue;
    SCOPED_TRACE(c.label);
    expect_close(c.label, estimate_and_peak(run_toml(c.engine, c.extra, c.accumulation), world()), n);
  }
}

// Preference pairs (alpaca ranking records), or the same records as SFT answers (the chosen one).
std::string pairs_file(bool sft) {
  const std::string path = std::string("/tmp/lft_memory_estimate_") + (sft ? "sft" : "pairs") + "_rank" +
                           std::to_string(world().rank()) + ".json";
  std::ofstream out(path);
  out << "[";
  for (int i = 0; i < 40; ++i)
    out << (i ? ",\n" : "") << "{\"instruction\": \"What is " << i << " + " << 3 * i + 1 << "?\", \""
        << (sft ? "output" : "chosen") << "\": \"" << 4 * i + 1 << "\""
        << (sft ? std::string() : ", \"rejected\": \"" + std::to_string(4 * i + 2) + "\"") << "}";
  out << "]\n";
  return path;
}

// stage dpo under fsdp2: a micro-batch of P pairs holds 2P sequences (every one padded to
// cutoff_len here), so its peak is SFT's on 2P sequences, and the estimate holds it within 15%.
// The reference pass before the first step (forward only) stays under the training peak.
TEST(MemoryEstimate, DpoIsSftOnTwiceTheSequences) {
  ASSERT_TRUE(cpu_memory_counter_installed());
  if (world().size() != 2) GTEST_SKIP() << "runs at 2 ranks";
  at::set_num_threads(1);
  const auto toml = [](bool sft) {
    return std::string("distributed = \"fsdp2\"\nstage = \"") + (sft ? "sft" : "dpo") + "\"\ntrain_dataset = \"" +
           pairs_file(sft) + "\"\ntokenizer = \"bytes\"\npad_to_multiple_of = 0\ncutoff_len = 32\n" +
           "per_device_train_batch_size = " + (sft ? "2" : "1") + "\ngradient_accumulation_steps = 2\n" +
           "learning_rate = 1e-3\nmax_steps = 3\nseed = 3\n" + kModel;
  };
  const auto dpo = estimate_and_peak(toml(false), world());
  const auto sft = estimate_and_peak(toml(true), world());
  expect_close("fsdp2 dpo, 1 pair a micro-batch", dpo, 2);
  expect_close("fsdp2 sft, 2 sequences a micro-batch", sft, 2);
  EXPECT_EQ(dpo.first, sft.first);  // the same estimate: 2 sequences of cutoff_len either way
  EXPECT_LE(std::abs(dpo.second / sft.second - 1.0), 0.05) << "dpo " << dpo.second << " B, sft " << sft.second << " B";
}

// Context parallelism on a long sequence (one of 4096 tokens a step): a step's transient peak
// (activations, gradients, the exchanges' buffers: measured from after a first step, when the
// optimizer state exists) at cp 4 is about a quarter of the one-rank run's (measured 0.287 with
// Ulysses, 0.321 with ring attention), and the cp runs' estimates stay within 15% of their
// measured totals.
TEST(MemoryEstimate, ContextParallelHoldsAQuarterOfTheActivations) {
  ASSERT_TRUE(cpu_memory_counter_installed());
  if (world().size() != 4) GTEST_SKIP() << "runs at 4 ranks";
  at::set_num_threads(1);
  const auto toml = [](const std::string& engine, const std::string& mesh) {
    return "distributed = \"" + engine + "\"\ntrain_dataset = \"inputs/data/arithmetic.txt\"\n"
           "per_device_train_batch_size = 1\ngradient_accumulation_steps = 1\ncutoff_len = 4096\n"
           "learning_rate = 1e-3\nmax_steps = 3\nseed = 3\n" + mesh + kModel;
  };
  // {transient peak of step 2, whole peak, estimate}, the largest over the ranks.
  const auto measure = [](const std::string& text, MpiCommunicator& comm) {
    std::unique_ptr<DeviceMesh> mesh;
    const double base = static_cast<double>(cpu_bytes_in_use());
    reset_cpu_peak_bytes();
    auto trainer = make_trainer(text, comm, mesh);
    trainer->step();
    const double whole = static_cast<double>(cpu_peak_bytes_in_use()) - base;
    const double before = static_cast<double>(cpu_bytes_in_use());
    reset_cpu_peak_bytes();
    trainer->step();
    at::Tensor peaks = at::tensor({static_cast<double>(cpu_peak_bytes_in_use()) - before,
                                   std::max(whole, static_cast<double>(cpu_peak_bytes_in_use()) - base)}, at::kDouble);
    comm.all_reduce(peaks, ReduceOp::Max);
    const config::Config cfg = config::parse_config(text, "test.toml");
    return std::array<double, 3>{peaks[0].item<double>(), peaks[1].item<double>(),
                                 engine::resolve_run_plan(cfg, mesh->shape()).memory.total()};
  };
  // The one-rank run on rank 0 alone (the others would repeat it on the same two cores).
  at::Tensor one_t = at::zeros({3}, at::kDouble);
  if (world().rank() == 0) {
    MpiCommunicator self(MPI_COMM_SELF, "self", false);
    const auto m = measure(toml("none", ""), self);
    one_t = at::tensor({m[0], m[1], m[2]}, at::kDouble);
  }
  world().broadcast(one_t, 0);
  const std::array<double, 3> one{one_t[0].item<double>(), one_t[1].item<double>(), one_t[2].item<double>()};
  const auto cp4 = measure(toml("ddp", "[mesh]\ncp = 4\n"), world());
  const auto ring4 = measure(toml("ddp", "[mesh]\ncp = 4\n[dist_config]\ncp_mode = \"ring\"\n"), world());
  const double ratio = cp4[0] / one[0], ring_ratio = ring4[0] / one[0];
  if (world().rank() == 0)
    std::printf("[ memory ] cp 4 vs one rank, 4096 tokens: step peak %.2f (ulysses), %.2f (ring) vs %.2f MiB (%.3f, %.3f)\n",
                cp4[0] / 1048576.0, ring4[0] / 1048576.0, one[0] / 1048576.0, ratio, ring_ratio);
  // A quarter, plus what the exchanges hold (ring: the travelling block, a tile of scores, the
  // repeated kv heads).
  EXPECT_GT(ratio, 0.2);
  EXPECT_LT(ratio, 0.35);
  EXPECT_GT(ring_ratio, 0.2);
  EXPECT_LT(ring_ratio, 0.35);
  // The one-rank estimate at 4096 tokens is 34% above its measured peak (the activation terms are
  // sized for short sequences; issue 33's memory item), so only the cp run is held to 15% here.
  if (world().rank() == 0)
    std::printf("[ memory ] none, 4096 tokens: estimate %.2f MiB, measured %.2f MiB\n", one[2] / 1048576.0,
                one[1] / 1048576.0);
  expect_close("ddp cp 4, 4096 tokens", {cp4[2], cp4[1]}, 4);
  expect_close("ddp cp 4 ring, 4096 tokens", {ring4[2], ring4[1]}, 4);
}

// On a CPU the blocked attention keeps its probabilities for backward (fp32 up to 1024 tokens,
// with the fused softmax), where LibTorch's flash attention keeps O(T) per head: the estimate
// counts them, and its difference between the two is what the run measures.
TEST(MemoryEstimate, BlockedAttentionsKeptProbabilitiesAreCounted) {
  ASSERT_TRUE(cpu_memory_counter_installed());
  if (world().size() != 1) GTEST_SKIP() << "runs at 1 rank";
  if (!model::fused_kernels_supported()) GTEST_SKIP() << "this CPU has no AVX2/FMA: fp32 takes LibTorch's attention";
  at::set_num_threads(1);
  const auto toml = [](const std::string& kernels) {
    return "distributed = \"none\"\ntrain_dataset = \"inputs/data/arithmetic.txt\"\nper_device_train_batch_size = 1\n"
           "gradient_accumulation_steps = 1\ncutoff_len = 1024\nlearning_rate = 1e-3\nmax_steps = 3\nseed = 3\n"
           "fused_kernels = \"" + kernels + "\"\n" + std::string(kModel);
  };
  const unsigned all = model::fused_kernels(), without = all & ~static_cast<unsigned>(model::kFusedAttention);
  const auto blocked = estimate_and_peak(toml("all"), world());
  model::set_fused_kernels(without);
  const auto flash = estimate_and_peak(toml(model::fused_kernels_name(without)), world());
  model::set_fused_kernels(all);
  // At 1024 tokens the one-rank estimate is 15-30% above its measured peak (the activation terms
  // are sized for short sequences, as ContextParallelHoldsAQuarterOfTheActivations says): the
  // probabilities' term is held to the difference the attention makes.
  if (world().rank() == 0)
    std::printf("[ memory ] none, 1024 tokens: estimate / measured %.2f / %.2f MiB (blocked attention), "
                "%.2f / %.2f MiB (LibTorch's)\n", blocked.first / 1048576.0, blocked.second / 1048576.0,
                flash.first / 1048576.0, flash.second / 1048576.0);
  EXPECT_GE(blocked.first, blocked.second);
  // 4 layers x 4 heads x 1024 tokens x 2304 bytes (576 keys a row on average, fp32).
  const double scores = 4.0 * 4 * 1024 * 2304;
  EXPECT_DOUBLE_EQ(blocked.first - flash.first, scores);
  EXPECT_NEAR(blocked.second - flash.second, scores, 0.15 * scores);
}

// Offload: the same bytes in all, but on a GPU the device holds only the gathered parameters, the
// activations and the buffers; the fp32 shards, gradients and AdamW state are in host memory.
TEST(MemoryEstimate, OffloadLeavesTheGatheredAndActivationTermsOnTheDevice) {
  const MeshShape shape{{1, 1, world().size(), 1, 1}};
  const auto plan = [&](const std::string& extra) {
    return engine::resolve_run_plan(config::parse_config(run_toml("fsdp2", extra), "test.toml"), shape).memory;
  };
  const engine::MemoryEstimate on = plan("[dist_config]\noffload_params = true\n"), off = plan("");
  EXPECT_FALSE(off.offload);
  EXPECT_EQ(off.device_total(), off.total());
  EXPECT_TRUE(on.offload);
  EXPECT_EQ(on.total(), off.total());
  EXPECT_EQ(on.offloaded_weights, on.weights);  // fsdp2 keeps only the fp32 shards
  EXPECT_EQ(on.device_total(), on.gathered + std::max(on.activations, on.buffers));
  EXPECT_LT(on.device_total(), 0.8 * on.total());
  EXPECT_NE(on.str().find("offload keeps the fp32 shards"), std::string::npos) << on.str();
}

}  // namespace
}  // namespace lft
