// Stage dpo before its first step: the loss options, each sequence's answer length, and the
// reference model's log-probability of every sequence the remaining steps train on, computed once
// (forward only, no gradients or optimizer state) and kept on the host (8 bytes a sequence).
// The reference is the policy itself where it can be: its starting weights before the first step,
// or with LoRA the base with the adapters off. Only a ref_model folder, or a full or freeze run
// resumed from a checkpoint, needs a second model: built by the same engine (so sharded as the
// policy is), used, and freed before training goes on.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "lft/comm/device_read.h"
#include "lft/comm/watchdog.h"
#include "lft/engine/parallelize.h"
#include "lft/runtime/error.h"
#include "lft/runtime/log.h"
#include "trainer_state.h"

namespace lft::train {
void Trainer::prepare_preference() {
  State& s = *s_;
  s.preference = s.options.preference;
  const std::int64_t sequences = s.data->num_sequences();
  s.answer_lengths.resize(static_cast<std::size_t>(sequences));
  for (std::int64_t i = 0; i < sequences; ++i) s.answer_lengths[static_cast<std::size_t>(i)] = s.data->weight_sum({i});
  // A loss over per-token means (ipo, orpo, simpo) divides by each answer's trained tokens, and
  // pref_ftx by the chosen one's: an answer that cutoff_len cuts to nothing would make its step NaN
  // (0 / 0). sigmoid and hinge take its log-probability as 0, as LlamaFactory does.
  for (std::int64_t i = 0; i < sequences; ++i)
    if (s.preference->averages() || (s.preference->ftx > 0 && i % 2 == 0))
      if (s.answer_lengths[static_cast<std::size_t>(i)] <= 0)
        throw UsageError("stage dpo: pair " + std::to_string(i / 2 + 1) + " of the training data (in the dataset files' order) "
                         "keeps no token of its " + (i % 2 == 0 ? "chosen" : "rejected") + " answer at cutoff_len = " +
                         std::to_string(s.plan.seq_len) + ": its prompt takes them all (or the answer is empty), and pref_loss = \"" +
                         s.preference->loss + "\"" + (s.preference->ftx > 0 ? " with pref_ftx" : "") +
                         " divides by the answer's length\n  hint: raise cutoff_len, shorten or remove that record, or use "
                         "pref_loss = \"sigmoid\" or \"hinge\" without pref_ftx (an empty answer's log-probability counts 0)");
  // A reward model scores each sequence at its last token (last_token_weights): the second token
  // at least, as a pair's prompt and answer always give.
  if (s.preference->reward_model)
    for (std::int64_t i = 0; i < sequences; ++i)
      if (s.data->real_tokens({i}) < 2)
        throw UsageError("stage rm: pair " + std::to_string(i / 2 + 1) + " of the training data (in the dataset files' order) "
                         "has a " + (i % 2 == 0 ? "chosen" : "rejected") + " sequence of fewer than 2 tokens at cutoff_len = " +
                         std::to_string(s.plan.seq_len) + "\n  hint: raise cutoff_len, or remove that record");
  if (!s.preference->uses_reference()) return;
  // The summed log-probability of the sequences of steps [s.step, s.total) under `model`, run
  // through `engine`, in the micro-batches those steps train them in (the same sequences padded
  // alike, so the first step's policy equals its reference to the last bit); a step whose pairs
  // are all known already (a later epoch) is skipped. One all-gather brings every value to every rank.
  const auto reference_pass = [&s](engine::Engine& engine, model::CausalLM& model) {
    const int dp = s.mesh.shape().dp_size(), rank = s.mesh.dp_rank();
    const std::int64_t micro = s.plan.micro_batch, accum = s.plan.accumulation;
    c10::NoGradGuard no_grad;
    const engine::BaseModelScope base_only(s.plan);  // with LoRA the reference is the base
    engine::MicroBatchOptions options;
    options.compute = s.plan.compute;
    options.backward = false;
    data::GlobalSampler walk = *s.sampler;
    std::vector<char> known(static_cast<std::size_t>(s.data->num_samples()), 0);
    std::vector<std::vector<std::int64_t>> steps;  // the global batches computed
    std::vector<at::Tensor> sums;                  // this rank's sequences of each, in training order
    std::int64_t known_pairs = 0;
    for (std::int64_t step = s.step; step < s.total; ++step, walk.advance()) {
      if (known_pairs == s.data->num_samples()) break;  // every pair known: the later steps only repeat them
      const std::vector<std::int64_t> indices = walk.global_batch_indices();
      if (std::all_of(indices.begin(), indices.end(), [&](std::int64_t i) { return known[static_cast<std::size_t>(i)]; }))
        continue;
      std::vector<engine::MicroBatch> batches;
      for (std::int64_t m = 0; m < accum; ++m) {
        const auto seqs = s.data->sequences(data::local_micro_batch(indices, rank, dp, micro, accum, m));
        batches.push_back(s.device_batch(s.data->batch(seqs)));
      }
      sums.push_back(engine.run_micro_batches(model, batches, options));
      for (const std::int64_t i : indices) {
        char& k = known[static_cast<std::size_t>(i)];
        known_pairs += k ? 0 : 1;
        k = 1;
      }
      steps.push_back(indices);
    }
    const at::Tensor local = at::cat(sums);
    at::Tensor all = at::empty({local.size(0) * dp}, local.options());
    s.mesh.device_dp().all_gather(local, all);
    const at::Tensor host = read_on_host(all, "reading the reference log-probabilities");
    const double* p = host.data_ptr<double>();
    for (int r = 0; r < dp; ++r)
      for (const auto& indices : steps)
        for (std::int64_t m = 0; m < accum; ++m)
          for (const std::int64_t seq : s.data->sequences(data::local_micro_batch(indices, r, dp, micro, accum, m))) {
            double& ref = s.reference_logps[static_cast<std::size_t>(seq)];
            if (std::isnan(ref)) ref = -*p;  // token losses are -log p
            ++p;
          }
    return static_cast<std::int64_t>(std::count(known.begin(), known.end(), 1));
  };

  s.reference_logps.assign(static_cast<std::size_t>(sequences), std::numeric_limits<double>::quiet_NaN());
  if (s.step >= s.total) return;
  const auto start = Clock::now();
  const bool lora = s.plan.finetuning.type == "lora";
  std::string folder = s.options.ref_model;
  const bool separate = !folder.empty() || (!lora && s.step > 0);
  if (folder.empty()) folder = s.options.model_folder;
  std::string what;
  std::int64_t pairs = 0;
  Watchdog::Scope scope("the reference log-probabilities of stage dpo", Watchdog::setup_timeout(), "setup_timeout");
  if (!separate) {
    what = lora ? "the base model (adapters off)" : "the starting weights";
    pairs = reference_pass(*s.engine, *s.model);
  } else {
    // A second model of the same engine and layout, from the reference's weights.
    what = !s.options.ref_model.empty() ? "ref_model " + folder : "the starting weights (a second model: the policy has trained)";
    const engine::ParallelModel reference = engine::parallelize(s.plan, s.mesh, s.torch_device(), folder);
    pairs = reference_pass(*reference.engine, *reference.model);
  }
  for (Communicator* c : s.counted_communicators()) c->reset_stats();  // count training only
  log0("dpo: reference log-probabilities of " + std::to_string(pairs) + " pairs from " + what + " in " +
       std::to_string(seconds_since(start)).substr(0, 5) + " s");
}

}  // namespace lft::train
