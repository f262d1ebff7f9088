// plot_loss: the logged losses read back from trainer_log.jsonl and drawn (loss_plots.h).
#include "lft/train/loss_plots.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "lft/train/loss_plot.h"
#include "lft/runtime/stage.h"

namespace lft::train {

const std::vector<std::string>& plotted_metrics(const std::string& stage) {
  static const std::vector<std::string> keys = {"loss", "eval_loss"};
  static const std::vector<std::string> dpo_keys = {"loss", "eval_loss", "rewards/accuracies"};
  return trains_on_pairs(stage) ? dpo_keys : keys;
}

MetricSeries read_logged_metric(const std::string& log_path, const std::string& key) {
  std::ifstream in(log_path);
  if (!in) throw std::runtime_error("cannot read " + log_path);
  MetricSeries series;
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object()) continue;
    const auto step = record.find("current_steps");
    const auto value = record.find(key);
    if (step == record.end() || value == record.end() || !step->is_number() || !value->is_number()) continue;
    series.steps.push_back(step->get<double>());
    series.values.push_back(value->get<double>());
  }
  if (in.bad()) throw std::runtime_error("cannot read " + log_path);
  return series;
}

void plot_losses(const std::string& output_dir, const std::string& log_path,
                 const std::function<void(const std::string&)>& log, const std::string& stage) {
  for (const std::string& key : plotted_metrics(stage)) {
    const MetricSeries series = read_logged_metric(log_path, key);
    if (series.values.empty()) {
      log("no metric " + key + " to plot");
      continue;
    }
    if (series.values.size() < 2) {
      log("plot_loss: one logged value of " + key + " is no line; nothing drawn (log more often: logging_steps)");
      continue;
    }
    std::string file = key;
    for (char& c : file)
      if (c == '/') c = '_';
    const std::string path = output_dir + "/training_" + file + ".png";
    write_metric_plot(path, key, output_dir, series.steps, series.values);
    log("figure saved at: " + path);
  }
}

}  // namespace lft::train
