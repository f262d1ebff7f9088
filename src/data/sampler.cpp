#include "lft/data/sampler.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "lft/runtime/error.h"

namespace lft::data {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): fixed arithmetic, so the same on every platform.
std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) : state_(state) {}
  std::uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ULL;
    return mix64(state_);
  }
  // Uniform in [0, bound), bound >= 1, without modulo bias (rejection sampling).
  std::uint64_t below(std::uint64_t bound) {
    const std::uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    for (;;) {
      const std::uint64_t r = next();
      if (r >= threshold) return r % bound;
    }
  }

 private:
  std::uint64_t state_;
};

[[noreturn]] void bad_state(const std::string& what) {
  throw UsageError("cannot resume the data order from the checkpoint: " + what);
}

}  // namespace

std::vector<std::int64_t> GlobalSampler::epoch_permutation(std::int64_t num_samples,
                                                           std::uint64_t seed,
                                                           std::int64_t epoch) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(num_samples));
  for (std::int64_t i = 0; i < num_samples; ++i) order[static_cast<std::size_t>(i)] = i;
  // One stream per (seed, epoch): the epoch is mixed into the seed so epochs are independent.
  SplitMix64 rng(mix64(seed ^ mix64(static_cast<std::uint64_t>(epoch) + 0x6C46545241494EULL)));
  for (std::int64_t i = num_samples - 1; i > 0; --i) {  // Fisher-Yates
    const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i) + 1));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}

std::vector<std::int64_t> GlobalSampler::torch_permutation(std::int64_t num_samples, std::uint64_t seed,
                                                           std::int64_t epoch) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed + static_cast<std::uint64_t>(epoch));
  const at::Tensor perm = at::randperm(num_samples, gen, at::TensorOptions().dtype(at::kLong));
  const std::int64_t* p = perm.data_ptr<std::int64_t>();
  return std::vector<std::int64_t>(p, p + num_samples);
}

std::vector<std::int64_t> GlobalSampler::per_rank_order(std::int64_t num_samples, std::uint64_t seed,
                                                        std::int64_t epoch, int dp_size,
                                                        std::int64_t global_batch, const std::vector<bool>& skipped) {
  if (dp_size < 1 || global_batch % dp_size != 0)
    throw std::invalid_argument("GlobalSampler: the per-rank order needs dp_size >= 1 dividing the global batch");
  std::vector<std::int64_t> p = torch_permutation(num_samples, seed, epoch);
  const std::int64_t per_rank_batch = global_batch / dp_size;
  // Each rank's stream: every dp_size-th of the permutation padded with its start (DistributedSampler).
  const std::int64_t padded = (num_samples + dp_size - 1) / dp_size * dp_size;
  for (std::int64_t i = num_samples; i < padded && num_samples > 0; ++i) p.push_back(p[static_cast<std::size_t>(i - num_samples)]);
  std::vector<std::vector<std::int64_t>> streams(static_cast<std::size_t>(dp_size));
  for (std::int64_t i = 0; i < padded; ++i) {
    const std::int64_t sample = p[static_cast<std::size_t>(i)];
    if (!skipped.empty() && skipped[static_cast<std::size_t>(sample)]) continue;
    streams[static_cast<std::size_t>(i % dp_size)].push_back(sample);
  }
  // Without skipping, num_samples / global_batch steps (the padded tail is not reached, as v1
  // 0.9.5's parity has it); with skipping, as many as every rank's stream fills.
  std::int64_t steps = skipped.empty() ? num_samples / global_batch : padded;
  for (const auto& stream : streams) steps = std::min(steps, static_cast<std::int64_t>(stream.size()) / per_rank_batch);
  std::vector<std::int64_t> order;
  order.reserve(static_cast<std::size_t>(steps * global_batch));
  for (std::int64_t k = 0; k < steps; ++k)
    for (int r = 0; r < dp_size; ++r)
      for (std::int64_t j = 0; j < per_rank_batch; ++j)
        order.push_back(streams[static_cast<std::size_t>(r)][static_cast<std::size_t>(k * per_rank_batch + j)]);
  return order;
}

GlobalSampler::GlobalSampler(std::int64_t num_samples, std::int64_t global_batch,
                             std::uint64_t seed, int per_rank_dp)
    : num_samples_(num_samples), global_batch_(global_batch), seed_(seed), steps_per_epoch_(0),
      per_rank_dp_(per_rank_dp) {
  if (num_samples < 0) {
    throw std::invalid_argument("GlobalSampler: num_samples must be >= 0, got " +
                                std::to_string(num_samples));
  }
  if (global_batch < 1) {
    throw std::invalid_argument("GlobalSampler: global_batch must be >= 1, got " +
                                std::to_string(global_batch));
  }
  steps_per_epoch_ = num_samples / global_batch;
  if (steps_per_epoch_ == 0) {
    throw UsageError("the training data has " + std::to_string(num_samples) +
                     " sequences, fewer than one global batch of " + std::to_string(global_batch) +
                     " (data-parallel size x gradient_accumulation_steps x "
                     "per_device_train_batch_size); use more data, a smaller cutoff_len or a "
                     "smaller global batch");
  }
  set_epoch(0);
}

void GlobalSampler::set_epoch(std::int64_t epoch) {
  epoch_ = epoch;
  order_ = per_rank_dp_ > 0 ? per_rank_order(num_samples_, seed_, epoch, per_rank_dp_, global_batch_, skipped_)
                           : epoch_permutation(num_samples_, seed_, epoch);
  if (per_rank_dp_ > 0) steps_per_epoch_ = static_cast<std::int64_t>(order_.size()) / global_batch_;
  if (steps_per_epoch_ == 0)
    throw UsageError("epoch " + std::to_string(epoch) + " of the training data has no whole global batch of " +
                     std::to_string(global_batch_) + " sequences once the sequences with nothing to train within "
                     "cutoff_len are left out (as LlamaFactory main leaves them out); use a larger cutoff_len or a "
                     "smaller global batch");
}

void GlobalSampler::skip_samples(std::vector<bool> skipped) {
  if (per_rank_dp_ == 0) throw std::logic_error("GlobalSampler::skip_samples: the global order skips nothing");
  if (static_cast<std::int64_t>(skipped.size()) != num_samples_)
    throw std::invalid_argument("GlobalSampler::skip_samples: one flag per sample");
  skipped_ = std::move(skipped);
  step_ = 0;
  set_epoch(epoch_);
}

std::vector<std::int64_t> GlobalSampler::global_batch_indices() const {
  const auto begin = order_.begin() + step_ * global_batch_;
  return std::vector<std::int64_t>(begin, begin + global_batch_);
}

void GlobalSampler::advance() {
  ++step_;
  if (step_ == steps_per_epoch_) {
    step_ = 0;
    set_epoch(epoch_ + 1);
  }
}

SamplerState GlobalSampler::state() const {
  SamplerState s;
  s.epoch = epoch_;
  s.step_in_epoch = step_;
  s.seed = seed_;
  s.num_samples = num_samples_;
  s.global_batch = global_batch_;
  s.order_dp = per_rank_dp_;
  return s;
}

void GlobalSampler::restore(const SamplerState& s) {
  if (s.seed != seed_) {
    bad_state("it was written with seed = " + std::to_string(s.seed) + ", this run has seed = " +
              std::to_string(seed_) + "; resume with the checkpoint's seed");
  }
  if (s.num_samples != 0 && s.num_samples != num_samples_) {
    bad_state("it was written for " + std::to_string(s.num_samples) +
              " training sequences, this run has " + std::to_string(num_samples_) +
              "; resume with the same train_dataset, tokenizer and cutoff_len");
  }
  if (s.global_batch != 0 && s.global_batch != global_batch_) {
    bad_state("it was written with a global batch of " + std::to_string(s.global_batch) +
              " sequences, this run has " + std::to_string(global_batch_) +
              "; keep data-parallel size x gradient_accumulation_steps x "
              "per_device_train_batch_size the same");
  }
  if (s.order_dp != per_rank_dp_) {
    const auto order = [](std::int64_t dp) {
      return dp == 0 ? std::string("sample_order = \"global\"")
                     : "sample_order = \"per_rank\" over " + std::to_string(dp) + " data-parallel ranks";
    };
    bad_state("it was written with " + order(s.order_dp) + ", this run has " + order(per_rank_dp_) +
              "; resume with the checkpoint's sample_order and data-parallel size");
  }
  if (s.epoch < 0 || s.step_in_epoch < 0 || s.step_in_epoch >= steps_per_epoch_) {
    bad_state("its position (epoch " + std::to_string(s.epoch) + ", step " +
              std::to_string(s.step_in_epoch) + ") is impossible with " +
              std::to_string(steps_per_epoch_) + " steps per epoch");
  }
  if (s.epoch != epoch_) set_epoch(s.epoch);
  step_ = s.step_in_epoch;
}

std::vector<std::int64_t> local_micro_batch(const std::vector<std::int64_t>& global_indices,
                                            int dp_rank, int dp_size, std::int64_t micro_batch,
                                            std::int64_t accumulation_steps,
                                            std::int64_t micro_index) {
  if (dp_size < 1 || micro_batch < 1 || accumulation_steps < 1) {
    throw std::invalid_argument("local_micro_batch: dp_size, micro_batch and accumulation_steps "
                                "must be >= 1, got " + std::to_string(dp_size) + ", " +
                                std::to_string(micro_batch) + ", " +
                                std::to_string(accumulation_steps));
  }
  if (dp_rank < 0 || dp_rank >= dp_size) {
    throw std::invalid_argument("local_micro_batch: dp_rank " + std::to_string(dp_rank) +
                                " is outside [0, " + std::to_string(dp_size) + ")");
  }
  if (micro_index < 0 || micro_index >= accumulation_steps) {
    throw std::invalid_argument("local_micro_batch: micro_index " + std::to_string(micro_index) +
                                " is outside [0, " + std::to_string(accumulation_steps) + ")");
  }
  const std::int64_t per_rank = accumulation_steps * micro_batch;
  const std::int64_t g = per_rank * dp_size;
  if (static_cast<std::int64_t>(global_indices.size()) != g) {
    throw std::invalid_argument(
        "local_micro_batch: the global batch has " + std::to_string(global_indices.size()) +
        " samples, but dp_size x accumulation_steps x micro_batch = " + std::to_string(dp_size) +
        " x " + std::to_string(accumulation_steps) + " x " + std::to_string(micro_batch) + " = " +
        std::to_string(g));
  }
  const auto begin = global_indices.begin() + dp_rank * per_rank + micro_index * micro_batch;
  return std::vector<std::int64_t>(begin, begin + micro_batch);
}

}  // namespace lft::data
