// What a training run reports: the model-FLOP count, the log record (console line and
// trainer_log.jsonl with LlamaFactory's fields), durations and peak memory.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lft::train {

// The FLOPs of a step as torchtitan and Megatron-LM count model FLOPs: 6 x the matmul weights a
// token passes through (every layer's projections and the output head, tied or not; the embedding
// lookup is no matmul) per real token, plus 12 x layers x attention width (heads x head_dim) x t
// per token of a sequence (or packed segment) of t real tokens: scores and values, forward and
// backward, the causal half not discounted. Hardware FLOPs add what gradient checkpointing
// recomputes: the layers' forward (2 x their weights per token, 4 x layers x width x t) once more.
struct FlopShape {
  std::int64_t layers = 0;
  std::int64_t layers_matmul_params = 0;  // the decoder layers' matmul weights a token goes through (the family's count)
  std::int64_t head_params = 0;          // vocab x hidden
  std::int64_t attention_width = 0;      // heads x head_dim
  bool recompute = false;                // gradient checkpointing
};
struct StepFlops {
  double model = 0.0;
  double hardware = 0.0;
};
// `tokens` real tokens in sequences (segments) whose squared lengths add up to `attention_pairs`.
StepFlops step_flops(const FlopShape& shape, std::int64_t tokens, std::int64_t attention_pairs);

struct LogRecord {
  std::int64_t step = 0;
  std::int64_t total_steps = 0;
  double loss = 0.0;  // mean over the steps since the previous record
  double lr = 0.0;
  double grad_norm = 0.0;
  double epoch = 0.0;  // fractional
  double elapsed_s = 0.0;
  double remaining_s = 0.0;
  double tokens_per_s = 0.0;
  double flops_per_s = 0.0;           // model FLOPs
  double hardware_flops_per_s = 0.0;  // with recomputation (= flops_per_s without checkpointing)
  double padding = 0.0;  // share of the computed positions that were padding
  // More fields after loss, in order (stage dpo: rewards/chosen, ..., logps/rejected).
  std::vector<std::pair<std::string, double>> extra;
  // A mixture of experts: each MoE layer's busiest expert's tokens over the mean (1: even; empty:
  // dense), written as "expert_load" in the JSON line.
  std::vector<double> expert_load;
};

// A mixture of experts' routing over the steps of a log window: the auxiliary loss's mean and,
// per MoE layer, the busiest and the idlest expert's tokens over the mean.
class RoutingWindow {
 public:
  // expert_dropped: the share of the step's (row, expert) pairs an expert capacity dropped
  // (negative: dropless).
  void add(double aux_loss, const at::Tensor& expert_rows, double expert_dropped);
  // ("aux_loss", mean), ("expert_load", the worst layer's max / mean), ("expert_idle", the worst
  // layer's min / mean), with a capacity ("expert_dropped", the mean share dropped) into rec.extra,
  // each layer's max / mean into rec.expert_load; then empty.
  void take(LogRecord& rec);

 private:
  double aux_sum_ = 0.0, dropped_sum_ = 0.0;
  std::int64_t steps_ = 0, capacity_steps_ = 0;
  at::Tensor rows_;
};

// One JSON object, LlamaFactory's trainer_log fields (current_steps, total_steps, loss, lr, epoch,
// percentage, elapsed_time, remaining_time) plus step, grad_norm, tokens_per_s, padding.
std::string to_json_line(const LogRecord& r);
// "step 10/100 | loss 2.3456 | lr 3.00e-03 | grad 1.234 | 1234 tok/s | 1.2 GFLOP/s | 0:00:12 < 0:01:40"
std::string to_console_line(const LogRecord& r);

// The ETA: `steps_left` at the pace of the `steps_run` steps this process ran in `elapsed_s` (after
// a resume, not the steps of the run it resumed).
double remaining_seconds(double elapsed_s, std::int64_t steps_run, std::int64_t steps_left);

std::string format_duration(double seconds);  // "H:MM:SS", as LlamaFactory's logs
std::string format_seconds(double seconds);   // "12.3 s"
double peak_rss_bytes();                       // of this process, so far

}  // namespace lft::train
