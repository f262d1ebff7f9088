// LlamaFactory's plot_loss (extras/ploting.py): training_<key>.png in output_dir, the raw metric
// drawn light (alpha 0.4) and its TensorBoard-style smoothing drawn solid, both in #1f77b4, with a
// title, axis labels and a legend, 640x480 pixels. Drawn through PLplot's pngcairo device.
#pragma once

#include <string>
#include <vector>

namespace lft::train {

// LlamaFactory's smoothing of a metric series (an EMA whose weight grows with the series length):
// weight = 1.8 * (sigmoid(0.05 * n) - 0.5), s[0] = v[0], s[i] = s[i-1] * weight + (1 - weight) *
// v[i].
std::vector<double> smooth_metric(const std::vector<double>& values);

// Draws `values` over `steps` (raw, light, and smoothed, as LlamaFactory does) into a 640x480 PNG
// at `png_path`, titled "training <key> of <output_dir>", axes "step" and `key`, with a legend.
// Throws std::runtime_error naming the path if it cannot be written. Needs at least one point
// (std::invalid_argument otherwise, or when steps and values differ in length).
// PLplot keeps global state; calls are serialized by a lock inside, so any thread may call it.
void write_metric_plot(const std::string& png_path, const std::string& key,
                       const std::string& output_dir, const std::vector<double>& steps,
                       const std::vector<double>& values);

}  // namespace lft::train
