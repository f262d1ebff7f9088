// What a training run reports: the model-FLOP count, the log record (console line and
// trainer_log.jsonl with LlamaFactory's fields), durations and peak memory.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lft::train {

// Model FLOPs per trained token: 6 x non-embedding parameters (forward + backward matmuls) plus
// 12 x layers x hidden x sequence (attention scores and values, forward + backward).
double flops_per_token(std::int64_t non_embedding_params, std::int64_t layers, std::int64_t hidden,
                       std::int64_t seq_len);

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
  double flops_per_s = 0.0;
  double padding = 0.0;  // share of the computed positions that were padding
  // More fields after loss, in order (stage dpo: rewards/chosen, ..., logps/rejected).
  std::vector<std::pair<std::string, double>> extra;
};

// One JSON object, LlamaFactory's trainer_log fields (current_steps, total_steps, loss, lr, epoch,
// percentage, elapsed_time, remaining_time) plus step, grad_norm, tokens_per_s, padding.
std::string to_json_line(const LogRecord& r);
// "step 10/100 | loss 2.3456 | lr 3.00e-03 | grad 1.234 | 1234 tok/s | 1.2 GFLOP/s | 0:00:12 < 0:01:40"
std::string to_console_line(const LogRecord& r);

std::string format_duration(double seconds);  // "H:MM:SS", as LlamaFactory's logs
double peak_rss_bytes();                       // of this process, so far

}  // namespace lft::train
