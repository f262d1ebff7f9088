#include "lft/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace lft::optim {
namespace {

struct Shape {
  std::string name;
  std::vector<std::string> kwargs;  // the lr_scheduler_kwargs it takes
};

// HF's keyword arguments that lftrain's float-valued lr_scheduler_kwargs can hold. HF's
// get_scheduler silently drops any given to constant and constant_with_warmup; lftrain refuses
// them. wsd's warmup_type and decay_type are strings, left at their defaults (linear, cosine).
const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all = {
      {"linear", {}},
      {"cosine", {"num_cycles"}},
      {"cosine_with_restarts", {"num_cycles"}},
      {"polynomial", {"lr_end", "power"}},
      {"constant", {}},
      {"constant_with_warmup", {}},
      {"inverse_sqrt", {"timescale"}},
      {"cosine_with_min_lr", {"num_cycles", "min_lr", "min_lr_rate"}},
      {"cosine_warmup_with_min_lr", {"num_cycles", "min_lr", "min_lr_rate", "warmup_lr_rate"}},
      {"warmup_stable_decay",
       {"num_decay_steps", "num_stable_steps", "min_lr_ratio", "num_cycles"}},
  };
  return all;
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

std::string number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

const Shape& shape_named(const std::string& name) {
  for (const Shape& s : shapes())
    if (s.name == name) return s;
  throw std::invalid_argument("unknown lr_scheduler_type '" + name + "'; the schedules are " +
                              joined(lr_scheduler_names()));
}

void check_kwargs(const LrScheduleSpec& spec) {
  const std::vector<std::string>& taken = shape_named(spec.name).kwargs;
  for (const auto& kv : spec.kwargs)
    if (std::find(taken.begin(), taken.end(), kv.first) == taken.end())
      throw std::invalid_argument("lr_scheduler_type '" + spec.name +
                                  "' does not take lr_scheduler_kwargs." + kv.first +
                                  "; it takes " + (taken.empty() ? "none" : joined(taken)));
}

double kwarg(const LrScheduleSpec& spec, const std::string& key, double fallback) {
  const auto it = spec.kwargs.find(key);
  return it == spec.kwargs.end() ? fallback : it->second;
}

// min_lr as a fraction of base_lr; HF wants exactly one of min_lr and min_lr_rate.
double min_lr_rate(const LrScheduleSpec& spec) {
  const bool lr = spec.kwargs.count("min_lr") > 0, rate = spec.kwargs.count("min_lr_rate") > 0;
  if (lr == rate)
    throw std::invalid_argument("lr_scheduler_type '" + spec.name +
                                "' needs exactly one of lr_scheduler_kwargs.min_lr and "
                                "lr_scheduler_kwargs.min_lr_rate");
  return lr ? spec.kwargs.at("min_lr") / spec.base_lr : spec.kwargs.at("min_lr_rate");
}

double linear_warmup(std::int64_t step, std::int64_t warmup) {
  return static_cast<double>(step) / static_cast<double>(std::max<std::int64_t>(1, warmup));
}

double cosine(double num_cycles, double progress) {
  return 0.5 * (1.0 + std::cos(M_PI * num_cycles * 2.0 * progress));
}

// `factor` rescaled so that 0 becomes `min_rate` and 1 stays 1.
double with_min_rate(double factor, double min_rate) {
  return std::max(0.0, factor * (1.0 - min_rate) + min_rate);
}

// HF's lr_lambda for spec.name, its operations in HF's order so that the values match to the bit.
std::function<double(std::int64_t)> lambda_for(const LrScheduleSpec& spec) {
  const std::string& name = spec.name;
  const std::int64_t W = spec.warmup_steps, N = spec.total_steps;
  const double w = static_cast<double>(W), n = static_cast<double>(N);
  const double span = static_cast<double>(std::max<std::int64_t>(1, N - W));  // steps after warmup

  if (name == "linear")
    return [=](std::int64_t s) {
      return s < W ? linear_warmup(s, W) : std::max(0.0, static_cast<double>(N - s) / span);
    };
  if (name == "cosine" || name == "cosine_with_min_lr") {
    const double cycles = kwarg(spec, "num_cycles", 0.5);
    const double min_rate = name == "cosine" ? 0.0 : min_lr_rate(spec);
    return [=](std::int64_t s) {
      return s < W ? linear_warmup(s, W)
                   : with_min_rate(cosine(cycles, static_cast<double>(s - W) / span), min_rate);
    };
  }
  if (name == "cosine_with_restarts") {
    const double cycles = kwarg(spec, "num_cycles", 1.0);
    return [=](std::int64_t s) {
      if (s < W) return linear_warmup(s, W);
      const double progress = static_cast<double>(s - W) / span;
      if (progress >= 1.0) return 0.0;
      return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * std::fmod(cycles * progress, 1.0))));
    };
  }
  if (name == "polynomial") {
    const double lr_init = spec.base_lr;
    const double lr_end = kwarg(spec, "lr_end", 1e-7), power = kwarg(spec, "power", 1.0);
    if (!(lr_init > lr_end))
      throw std::invalid_argument("lr_scheduler_kwargs.lr_end (" + number(lr_end) +
                                  ") must be smaller than learning_rate (" + number(lr_init) + ")");
    return [=](std::int64_t s) {
      if (s < W) return linear_warmup(s, W);
      if (s > N) return lr_end / lr_init;
      const double remaining = 1 - static_cast<double>(s - W) / static_cast<double>(N - W);
      return ((lr_init - lr_end) * std::pow(remaining, power) + lr_end) / lr_init;
    };
  }
  if (name == "constant") return [](std::int64_t) { return 1.0; };
  if (name == "constant_with_warmup")
    return [=](std::int64_t s) { return s < W ? linear_warmup(s, W) : 1.0; };
  if (name == "inverse_sqrt") {
    const double timescale = kwarg(spec, "timescale", W > 0 ? w : 10000.0);
    const double shift = timescale - w;
    return [=](std::int64_t s) {
      return s < W ? linear_warmup(s, W)
                   : 1.0 / std::sqrt((static_cast<double>(s) + shift) / timescale);
    };
  }
  if (name == "cosine_warmup_with_min_lr") {
    const double cycles = kwarg(spec, "num_cycles", 0.5), min_rate = min_lr_rate(spec);
    const bool start_given = spec.kwargs.count("warmup_lr_rate") > 0;
    const double start = kwarg(spec, "warmup_lr_rate", 0.0);
    // Unlike the others, it counts step s as s + 1: warmup reaches 1 at W - 1, the cosine its
    // minimum at N - 1.
    return [=](std::int64_t step) {
      const double s = static_cast<double>(step);
      if (s < w)
        return start_given ? start + (1.0 - start) * s / std::max(1.0, w - 1.0)
                           : (s + 1.0) / std::max(1.0, w);
      return with_min_rate(cosine(cycles, (s - w + 1.0) / std::max(1.0, n - w)), min_rate);
    };
  }
  // warmup_stable_decay, with LlamaFactory's default phases: a third of the steps after warmup
  // stable (rounded down), the rest decaying.
  const std::int64_t after_warmup = N - W;
  const double stable = kwarg(spec, "num_stable_steps", static_cast<double>(after_warmup / 3));
  const double decay =
      kwarg(spec, "num_decay_steps", static_cast<double>(after_warmup - after_warmup / 3));
  const double min_rate = kwarg(spec, "min_lr_ratio", 0.0), cycles = kwarg(spec, "num_cycles", 0.5);
  return [=](std::int64_t step) {
    const double s = static_cast<double>(step);
    if (s < w) return with_min_rate(linear_warmup(step, W), min_rate);
    if (s < w + stable) return 1.0;
    if (s < w + stable + decay)
      return with_min_rate(cosine(cycles, (s - w - stable) / std::max(1.0, decay)), min_rate);
    return min_rate;
  };
}

}  // namespace

const std::vector<std::string>& lr_scheduler_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Shape& s : shapes()) out.push_back(s.name);
    return out;
  }();
  return names;
}

const std::vector<std::string>& lr_scheduler_kwarg_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Shape& s : shapes())
      for (const std::string& k : s.kwargs)
        if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
    return out;
  }();
  return names;
}

LrSchedule::LrSchedule(LrScheduleSpec spec) : spec_(std::move(spec)) {
  check_kwargs(spec_);
  lambda_ = lambda_for(spec_);
}

std::int64_t LrSchedule::warmup_steps() const {
  return spec_.name == "constant" ? 0 : spec_.warmup_steps;
}

std::int64_t resolve_warmup_steps(std::int64_t warmup_steps, double warmup_ratio,
                                  std::int64_t total_steps) {
  if (warmup_steps >= 1) return warmup_steps;
  return static_cast<std::int64_t>(std::ceil(static_cast<double>(total_steps) * warmup_ratio));
}

}  // namespace lft::optim
