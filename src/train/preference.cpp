#include "lft/train/preference.h"

#include <ATen/ATen.h>

namespace lft::train {

PairTerms pair_terms(const PreferenceOptions& o, const at::Tensor& logps, const at::Tensor& lengths,
                     const at::Tensor& reference) {
  const at::Tensor pairs = logps.view({-1, 2});
  const at::Tensor length = lengths.to(logps.scalar_type()).view({-1, 2});
  const at::Tensor policy = o.averages() ? pairs / length : pairs;
  const at::Tensor chosen = policy.select(1, 0), rejected = policy.select(1, 1);
  PairTerms t;
  if (o.reward_model) {  // LlamaFactory's PairwiseTrainer, on fp32 scores
    t.losses = -at::log_sigmoid(chosen - rejected);
    t.chosen_rewards = chosen.detach();
    t.rejected_rewards = rejected.detach();
    return t;
  }
  t.chosen_logps = chosen.detach();
  t.rejected_logps = rejected.detach();
  if (o.loss == "orpo") {  // odds ratio on per-token means, plus the chosen answer's NLL
    const at::Tensor log_odds = (chosen - rejected) - (at::log1p(-at::exp(chosen)) - at::log1p(-at::exp(rejected)));
    t.losses = -chosen - o.beta * at::log_sigmoid(log_odds);
  } else if (o.loss == "simpo") {
    t.losses = -at::log_sigmoid(o.beta * ((chosen - rejected) - o.simpo_gamma / o.beta));
  }
  if (!o.uses_reference()) {
    t.chosen_rewards = o.beta * t.chosen_logps;
    t.rejected_rewards = o.beta * t.rejected_logps;
  } else {
    const at::Tensor ref_pairs = reference.to(logps.scalar_type()).view({-1, 2});
    const at::Tensor ref = o.averages() ? ref_pairs / length : ref_pairs;
    const at::Tensor ref_chosen = ref.select(1, 0), ref_rejected = ref.select(1, 1);
    const at::Tensor logits = (chosen - rejected) - (ref_chosen - ref_rejected);
    if (o.loss == "sigmoid")
      t.losses = -at::log_sigmoid(o.beta * logits) * (1.0 - o.label_smoothing) - at::log_sigmoid(-o.beta * logits) * o.label_smoothing;
    else if (o.loss == "hinge")
      t.losses = at::relu(1.0 - o.beta * logits);
    else  // ipo: (logits - 1 / (2 beta))^2
      t.losses = (logits - 1.0 / (2.0 * o.beta)).square();
    t.chosen_rewards = o.beta * (chosen - ref_chosen).detach();
    t.rejected_rewards = o.beta * (rejected - ref_rejected).detach();
  }
  if (o.ftx > 1e-6)  // LlamaFactory: the chosen answer's per-token mean NLL
    t.losses = t.losses + o.ftx * -(o.averages() ? chosen : chosen / length.select(1, 0));
  return t;
}

at::Tensor last_token_weights(const at::Tensor& token_mask) {
  const std::int64_t rows = token_mask.size(0), columns = token_mask.size(1) - 1;
  const at::Tensor last_column = token_mask.to(at::kLong).sum(1) - 2;  // position length - 1
  TORCH_CHECK(rows == 0 || last_column.min().item<std::int64_t>() >= 0, "last_token_weights: a row has fewer than 2 tokens");
  return at::zeros({rows, columns}, at::kFloat).scatter_(1, last_column.unsqueeze(1), 1.0);
}

at::Tensor length_desensitized_weights(const at::Tensor& weights, double ld_alpha) {
  const at::Tensor trained = weights.gt(0);
  const at::Tensor counts = trained.sum(1).view({-1, 2});
  const at::Tensor shorter = std::get<0>(counts.min(1)).repeat_interleave(2).unsqueeze(1);  // [B, 1]
  const at::Tensor rear = trained.logical_and(trained.cumsum(1).gt(shorter));
  return at::where(rear, weights * ld_alpha, weights);
}

engine::SequenceObjective preference_objective(const PreferenceOptions& o) {
  return [o](const at::Tensor& token_losses, const engine::MicroBatch& batch) {
    const at::Tensor logps = o.sequence_values(token_losses.sum(1));
    const at::Tensor lengths = batch.weights.gt(0).sum(1);
    const at::Tensor sum = pair_terms(o, logps, lengths, batch.reference_logps).losses.sum();
    return batch.pair_loss_weight == 1.0 ? sum : sum * batch.pair_loss_weight;
  };
}

void PreferenceMetrics::add(const PairTerms& t) {
  const at::Tensor values[6] = {t.chosen_rewards,
                                t.rejected_rewards,
                                t.chosen_rewards.gt(t.rejected_rewards).to(at::kDouble),
                                t.chosen_rewards - t.rejected_rewards,
                                t.chosen_logps,
                                t.rejected_logps};
  for (int i = 0; i < 6; ++i)
    if (values[i].defined()) sums_[i] += values[i].sum().item<double>();
  pairs_ += static_cast<double>(t.losses.numel());
  has_logps_ = t.chosen_logps.defined();
}

std::vector<std::pair<std::string, double>> PreferenceMetrics::take() {
  static const char* const names[6] = {"rewards/chosen",   "rewards/rejected", "rewards/accuracies",
                                       "rewards/margins", "logps/chosen",     "logps/rejected"};
  std::vector<std::pair<std::string, double>> out;
  for (int i = 0; i < (has_logps_ ? 6 : 4); ++i) out.emplace_back(names[i], pairs_ > 0 ? sums_[i] / pairs_ : 0.0);
  const bool logps = has_logps_;
  *this = PreferenceMetrics();
  has_logps_ = logps;
  return out;
}

}  // namespace lft::train
