// The model and hardware FLOPs of a step (torchtitan's and Megatron-LM's count) and the attention
// spans they are counted over.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lft/data/sft_dataset.h"
#include "lft/data/sft_sequences.h"
#include "lft/train/metrics.h"

namespace lft {
namespace {

// Qwen3-0.6B: hidden 1024, 28 layers, 16 heads x head_dim 128 (width 2048 > hidden), 8 kv heads,
// intermediate 3072, vocab 151936, tied embeddings.
train::FlopShape qwen3_0_6b(bool recompute) {
  const std::int64_t h = 1024, q = 16 * 128, kv = 8 * 128, ffn = 3072;
  train::FlopShape s;
  s.layers = 28;
  s.layers_matmul_params = 28 * (h * q + 2 * h * kv + q * h + 3 * h * ffn);
  s.head_params = 151936 * h;
  s.attention_width = q;
  s.recompute = recompute;
  return s;
}

TEST(StepFlops, CountsTheTiedHeadTheAttentionWidthAndRealTokens) {
  // Two sequences of 300 and 212 real tokens (512 tokens; padding not counted).
  const std::int64_t tokens = 512, pairs = 300 * 300 + 212 * 212;
  const train::StepFlops f = train::step_flops(qwen3_0_6b(false), tokens, pairs);
  const double matmul = 28.0 * (1024.0 * 2048 * 2 + 2 * 1024.0 * 1024 + 3 * 1024.0 * 3072) + 151936.0 * 1024;
  EXPECT_DOUBLE_EQ(f.model, 6 * matmul * tokens + 12.0 * 28 * 2048 * pairs);
  EXPECT_DOUBLE_EQ(f.hardware, f.model);
  // The head is 26% of this model's matmul FLOPs: leaving it out (the old count) is not a detail.
  EXPECT_GT(151936.0 * 1024 / matmul, 0.25);
}

TEST(StepFlops, HardwareFlopsAddTheRecomputedForward) {
  const std::int64_t tokens = 1024, pairs = 1024 * 1024;
  const train::StepFlops plain = train::step_flops(qwen3_0_6b(false), tokens, pairs);
  const train::StepFlops ckpt = train::step_flops(qwen3_0_6b(true), tokens, pairs);
  EXPECT_DOUBLE_EQ(ckpt.model, plain.model);
  const train::FlopShape s = qwen3_0_6b(true);
  const double layers_forward = 2.0 * static_cast<double>(s.layers_matmul_params) * tokens +
                                4.0 * 28 * 2048 * static_cast<double>(pairs);
  EXPECT_DOUBLE_EQ(ckpt.hardware, plain.model + layers_forward);
}

TEST(StepFlops, ConsoleLineNamesHardwareFlopsOnlyWhenTheyDiffer) {
  train::LogRecord r;
  r.flops_per_s = r.hardware_flops_per_s = 2e9;
  EXPECT_EQ(train::to_console_line(r).find("hardware"), std::string::npos);
  r.hardware_flops_per_s = 2.5e9;
  EXPECT_NE(train::to_console_line(r).find("| hardware 2.50 GFLOP/s"), std::string::npos);
}

// A run resumed at step 100 that reached step 150 in 6 s has 50 steps left: 6 s, not 2 s.
TEST(RemainingSeconds, AreAtThePaceOfThisProcesssOwnSteps) {
  EXPECT_DOUBLE_EQ(train::remaining_seconds(6.0, 150 - 100, 200 - 150), 6.0);
  EXPECT_DOUBLE_EQ(train::remaining_seconds(0.0, 0, 10), 0.0);
}

TEST(AttentionPairs, AreTheSquaredSpansOfPackedSegments) {
  auto seqs = std::make_shared<data::PackedSequences>();
  seqs->seq_len = 8;
  seqs->offsets = {0, 5, 8};
  seqs->tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  seqs->weights.assign(8, 1.0f);
  seqs->segments = {1, 1, 2, 2, 2, 1, 1, 1};  // neat packing: spans 2 and 3; then one span of 3
  const data::SftDataset ds(seqs, {0, 1}, 0);
  EXPECT_EQ(ds.attention_pairs(0), 2 * 2 + 3 * 3);
  EXPECT_EQ(ds.attention_pairs(1), 3 * 3);
}

}  // namespace
}  // namespace lft
