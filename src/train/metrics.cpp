#include "lft/train/metrics.h"

#include <sys/resource.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace lft::train {

StepFlops step_flops(const FlopShape& shape, std::int64_t tokens, std::int64_t attention_pairs) {
  const double layer_weights = static_cast<double>(shape.layers_matmul_params);
  const double matmul = (layer_weights + static_cast<double>(shape.head_params)) * static_cast<double>(tokens);
  const double attention = static_cast<double>(shape.layers) * static_cast<double>(shape.attention_width) *
                           static_cast<double>(attention_pairs);
  StepFlops f;
  f.model = 6.0 * matmul + 12.0 * attention;
  f.hardware = f.model;
  if (shape.recompute) f.hardware += 2.0 * layer_weights * static_cast<double>(tokens) + 4.0 * attention;
  return f;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  const long s = std::lround(seconds);
  char text[32];
  std::snprintf(text, sizeof(text), "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  return text;
}

double remaining_seconds(double elapsed_s, std::int64_t steps_run, std::int64_t steps_left) {
  return steps_run > 0 ? elapsed_s / static_cast<double>(steps_run) * static_cast<double>(steps_left) : 0.0;
}

std::string format_seconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.*f s", seconds < 10 ? 2 : 1, seconds);
  return text;
}

std::string to_json_line(const LogRecord& r) {
  nlohmann::ordered_json j;
  j["current_steps"] = r.step;
  j["total_steps"] = r.total_steps;
  j["loss"] = r.loss;
  for (const auto& [name, value] : r.extra) j[name] = value;
  j["lr"] = r.lr;
  j["epoch"] = std::round(r.epoch * 100.0) / 100.0;
  j["percentage"] = std::round(10000.0 * r.step / std::max<std::int64_t>(1, r.total_steps)) / 100.0;
  j["elapsed_time"] = format_duration(r.elapsed_s);
  j["remaining_time"] = format_duration(r.remaining_s);
  j["step"] = r.step;
  j["grad_norm"] = r.grad_norm;
  j["tokens_per_s"] = r.tokens_per_s;
  j["padding"] = std::round(r.padding * 10000.0) / 10000.0;
  if (!r.expert_load.empty()) j["expert_load"] = r.expert_load;
  return j.dump();
}

void RoutingWindow::add(double aux_loss, const at::Tensor& expert_rows, double expert_dropped) {
  if (!expert_rows.defined()) return;
  aux_sum_ += aux_loss;
  ++steps_;
  if (expert_dropped >= 0) {
    dropped_sum_ += expert_dropped;
    ++capacity_steps_;
  }
  rows_ = rows_.defined() ? rows_ + expert_rows : expert_rows.clone();
}

void RoutingWindow::take(LogRecord& rec) {
  if (steps_ == 0) return;
  const at::Tensor mean = rows_.mean(1).clamp_min(1e-30);
  const at::Tensor busiest = std::get<0>(rows_.max(1)) / mean, idlest = std::get<0>(rows_.min(1)) / mean;
  rec.extra.emplace_back("aux_loss", aux_sum_ / static_cast<double>(steps_));
  rec.extra.emplace_back("expert_load", busiest.max().item<double>());
  rec.extra.emplace_back("expert_idle", idlest.min().item<double>());
  if (capacity_steps_ > 0) rec.extra.emplace_back("expert_dropped", dropped_sum_ / static_cast<double>(capacity_steps_));
  rec.expert_load.clear();
  for (std::int64_t l = 0; l < busiest.size(0); ++l)
    rec.expert_load.push_back(std::round(busiest[l].item<double>() * 1000.0) / 1000.0);
  *this = RoutingWindow{};
}

std::string to_console_line(const LogRecord& r) {
  char text[256];
  std::snprintf(text, sizeof(text),
                "step %lld/%lld | loss %.4f | lr %.2e | grad %.3f | %.0f tok/s | %.2f GFLOP/s | %s < %s",
                static_cast<long long>(r.step), static_cast<long long>(r.total_steps), r.loss, r.lr,
                r.grad_norm, r.tokens_per_s, r.flops_per_s / 1e9, format_duration(r.elapsed_s).c_str(),
                format_duration(r.remaining_s).c_str());
  std::string line = text;
  for (const auto& [name, value] : r.extra) {
    char field[96];
    std::snprintf(field, sizeof field, " | %s %.4g", name.c_str(), value);
    line += field;
  }
  if (r.hardware_flops_per_s > r.flops_per_s * (1 + 1e-9)) {
    char field[64];
    std::snprintf(field, sizeof field, " | hardware %.2f GFLOP/s", r.hardware_flops_per_s / 1e9);
    line += field;
  }
  if (r.padding > 0) line += " | pad " + std::to_string(std::lround(r.padding * 100.0)) + "%";
  return line;
}

double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux reports KiB
}

}  // namespace lft::train
