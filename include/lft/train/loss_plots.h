// plot_loss at the end of a run, as LlamaFactory's (extras/ploting.py, after training and saving,
// on world rank 0): training_loss.png and training_eval_loss.png in output_dir, drawn by
// write_metric_plot (loss_plot.h) from trainer_log.jsonl, which after a resume also holds the
// earlier run's records.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace lft::train {

// The metrics plot_losses draws for `stage`, in order: LlamaFactory's keys (sft and pt: loss,
// eval_loss, less eval_accuracy, which lftrain does not compute; dpo: and rewards/accuracies).
const std::vector<std::string>& plotted_metrics(const std::string& stage = "sft");

struct MetricSeries {
  std::vector<double> steps;
  std::vector<double> values;
};

// (current_steps, `key`) of every record of the trainer_log.jsonl at `log_path` that has both as
// numbers, in file order. Lines that are not JSON objects (a record cut short) are skipped.
// Throws std::runtime_error naming the file when it cannot be read.
MetricSeries read_logged_metric(const std::string& log_path, const std::string& key);

// For each plotted metric: <output_dir>/training_<key>.png, then `log("figure saved at: <path>")`;
// a metric with no value is skipped with `log("no metric <key> to plot")`. Throws
// std::runtime_error (the log cannot be read, a PNG cannot be written).
void plot_losses(const std::string& output_dir, const std::string& log_path,
                 const std::function<void(const std::string&)>& log, const std::string& stage = "sft");

}  // namespace lft::train
