// Stage dpo before its first step: the loss options, each sequence's answer length, and the
// reference model's log-probability of every sequence the remaining steps train on, computed once
// (forward only, no gradients or optimizer state) and kept on the host (8 bytes a sequence).
// The reference is the policy itself where it can be: its starting weights before the first step,
// or with LoRA the base with the adapters off. Only a ref_model folder, or a full or freeze run
// resumed from a checkpoint, needs a second model: built by the same engine (so sharded as the
// policy is), used, and freed before training goes on.
#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <optional>

#include "lft/comm/device_read.h"
#include "lft/comm/watchdog.h"
#include "lft/engine/registry.h"
#include "lft/model/layers.h"
#include "lft/model/parameter_storage.h"
#include "lft/runtime/log.h"
#include "trainer_state.h"

namespace lft::train {
namespace {

// The samples (pairs) that steps [from, to) of `sampler`'s order visit, ascending.
std::vector<std::int64_t> samples_ahead(data::GlobalSampler sampler, std::int64_t from, std::int64_t to) {
  std::vector<char> seen(static_cast<std::size_t>(sampler.num_samples()), 0);
  for (std::int64_t step = from; step < to; ++step) {
    for (const std::int64_t i : sampler.global_batch_indices()) seen[static_cast<std::size_t>(i)] = 1;
    sampler.advance();
  }
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < seen.size(); ++i)
    if (seen[i]) out.push_back(static_cast<std::int64_t>(i));
  return out;
}

}  // namespace

void Trainer::prepare_preference() {
  State& s = *s_;
  s.preference = PreferenceOptions::from(s.cfg);
  const std::int64_t sequences = s.data->num_sequences();
  s.answer_lengths.resize(static_cast<std::size_t>(sequences));
  for (std::int64_t i = 0; i < sequences; ++i) s.answer_lengths[static_cast<std::size_t>(i)] = s.data->weight_sum({i});
  if (!s.preference->uses_reference()) return;
  // The summed log-probability of the sequences of `samples` under `model`, run through `engine`:
  // each data-parallel rank takes micro-batches of them in turn (a rank past the end runs sample
  // 0 again for the collectives, not kept), and one all-gather brings every value to every rank.
  const auto reference_pass = [&s](engine::Engine& engine, model::CausalLM& model,
                                   const std::vector<std::int64_t>& samples) {
    const auto n = static_cast<std::int64_t>(samples.size());
    const std::int64_t dp = s.mesh.shape().dp_size(), rank = s.mesh.dp_rank(), micro = s.plan.micro_batch;
    const std::int64_t chunks = (n + dp * micro - 1) / (dp * micro), per_rank = chunks * micro * 2;
    at::Tensor local = at::zeros({per_rank}, at::TensorOptions().dtype(at::kDouble).device(s.mesh.device()));
    c10::NoGradGuard no_grad;
    std::optional<model::AdaptersOffScope> adapters_off;  // with LoRA the reference is the base
    if (s.plan.finetuning.type == "lora") adapters_off.emplace();
    engine::MicroBatchOptions options;
    options.compute = s.plan.compute;
    options.backward = false;
    for (std::int64_t c = 0; c < chunks; ++c) {
      std::vector<std::int64_t> picked;
      for (std::int64_t j = 0; j < micro; ++j)
        if (const std::int64_t pos = (c * dp + rank) * micro + j; pos < n) picked.push_back(samples[static_cast<std::size_t>(pos)]);
      const bool keep = !picked.empty();
      if (!keep) picked.push_back(samples.front());
      const std::vector<std::int64_t> seqs = s.data->sequences(picked);
      const at::Tensor sums = engine.run_micro_batches(model, {s.device_batch(s.data->batch(seqs))}, options);
      if (keep) local.narrow(0, c * micro * 2, sums.size(0)).copy_(sums);
    }
    at::Tensor all = at::empty({per_rank * dp}, local.options());
    s.mesh.device_dp().all_gather(local, all);
    const at::Tensor host = read_on_host(all, "reading the reference log-probabilities");
    const double* p = host.data_ptr<double>();
    for (std::int64_t r = 0; r < dp; ++r)
      for (std::int64_t c = 0; c < chunks; ++c)
        for (std::int64_t j = 0; j < micro; ++j) {
          const std::int64_t pos = (c * dp + r) * micro + j;
          if (pos >= n) continue;
          const std::int64_t sample = samples[static_cast<std::size_t>(pos)];
          const double* sum = p + r * per_rank + (c * micro + j) * 2;
          s.reference_logps[static_cast<std::size_t>(2 * sample)] = -sum[0];  // token losses are -log p
          s.reference_logps[static_cast<std::size_t>(2 * sample + 1)] = -sum[1];
        }
  };

  s.reference_logps.assign(static_cast<std::size_t>(sequences), std::numeric_limits<double>::quiet_NaN());
  const std::vector<std::int64_t> samples = samples_ahead(*s.sampler, s.step, s.total);
  if (samples.empty()) return;
  const auto start = Clock::now();
  const bool lora = s.plan.finetuning.type == "lora";
  std::string folder = s.cfg.is_set("ref_model") ? s.cfg.string("ref_model") : "";
  const bool separate = !folder.empty() || (!lora && s.step > 0);
  if (folder.empty() && s.cfg.is_set("model_name_or_path")) folder = s.cfg.string("model_name_or_path");
  std::string what;
  Watchdog::Scope scope("the reference log-probabilities of stage dpo", Watchdog::setup_timeout(), "setup_timeout");
  if (!separate) {
    what = lora ? "the base model (adapters off)" : "the starting weights";
    reference_pass(s, *s.engine, *s.model, samples);
  } else {
    // A second model of the same engine and layout, from the reference's weights.
    what = s.cfg.is_set("ref_model") ? "ref_model " + folder : "the starting weights (a second model: the policy has trained)";
    const std::unique_ptr<engine::Engine> engine = engine::engine_for(s.cfg).create(engine::EngineContext{s.cfg, s.mesh, s.plan});
    std::shared_ptr<model::CausalLM> model;
    {
      std::optional<model::UnallocatedParameters> unallocated;
      if (engine->reads_weight_shards()) unallocated.emplace();
      model = engine::create_run_model(s.cfg, s.plan, at::TensorOptions().device(s.torch_device()));
    }
    engine->prepare_from(*model, *starting_weights(s.cfg, s.plan, *model, folder));
    reference_pass(s, *engine, *model, samples);
  }
  for (Communicator* c : s.engine->communicators()) c->reset_stats();  // count training only
  log0("dpo: reference log-probabilities of " + std::to_string(samples.size()) + " pairs from " + what + " in " +
       std::to_string(seconds_since(start)).substr(0, 5) + " s");
}

}  // namespace lft::train
