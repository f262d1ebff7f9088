// Preference training (stage = "dpo"): the losses of LlamaFactory's pref_loss over pairs of
// sequences, as LlamaFactory 0.9.5's CustomDPOTrainer and TRL define them (docs/finetuning.md);
// and a reward model (stage = "rm"), LlamaFactory's PairwiseTrainer: each sequence's score is its
// last token's value, the loss -log sigmoid(chosen score - rejected score).
//
// A micro-batch of P pairs holds 2P sequences, each pair's chosen answer then its rejected one.
// A sequence's log-probability is the sum over its trained (answer) tokens of log p(token); ipo,
// orpo and simpo use the per-token mean instead (LlamaFactory divides by the answer's length).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "lft/config/config.h"
#include "lft/engine/engine.h"

namespace lft::train {

struct PreferenceOptions {
  std::string loss = "sigmoid";  // sigmoid | hinge | ipo | orpo | simpo
  double beta = 0.1;
  double ftx = 0.0;              // weight of the chosen answer's per-token mean NLL
  double simpo_gamma = 0.5;
  double label_smoothing = 0.0;  // sigmoid only
  // LD-DPO (ld_alpha): the policy's tokens of an answer beyond the shorter answer's length of its
  // pair weigh ld_alpha in its log-probability (the reference's all weigh 1); < 0: off.
  double ld_alpha = -1.0;
  // stage rm: the sequences' values are scores (the head's, at each sequence's last token); the
  // loss ranks them (the fields above do not apply).
  bool reward_model = false;
  // pref_loss_weighting = "tokens": each micro-batch's mean pair loss weighs its trained tokens
  // over the step's (LlamaFactory main's v1 BaseTrainer); else every pair of the step alike.
  bool token_weighted = false;

  static PreferenceOptions from(const config::Config& cfg);  // the decoder (train_config.cpp)
  // sigmoid, hinge and ipo compare with a reference model; orpo and simpo do not.
  bool uses_reference() const { return !reward_model && loss != "orpo" && loss != "simpo"; }
  // ipo, orpo and simpo work on per-token mean log-probabilities.
  bool averages() const { return !reward_model && (loss == "ipo" || loss == "orpo" || loss == "simpo"); }
  // Each sequence's value from the per-sequence sums of the engine's weighted outputs: minus the
  // summed token losses (a log-probability), or a reward model's score as it is.
  at::Tensor sequence_values(const at::Tensor& sums) const { return reward_model ? sums : -sums; }
};

// Per pair: the loss (pref_ftx's term included), the rewards, and the log-probabilities logged as
// logps/chosen and logps/rejected (per-token means where the loss averages; a reward model's
// rewards are its scores, and it has no log-probabilities: undefined).
struct PairTerms {
  at::Tensor losses, chosen_rewards, rejected_rewards, chosen_logps, rejected_logps;
};

// `logps` [2P]: each sequence's summed log-probability (a reward model: its score), pairs interleaved (chosen, rejected);
// `lengths` [2P]: its trained tokens; `reference` [2P]: the reference model's summed
// log-probabilities (undefined when !uses_reference()). Differentiable in `logps`; any dtype.
PairTerms pair_terms(const PreferenceOptions& o, const at::Tensor& logps, const at::Tensor& lengths,
                     const at::Tensor& reference);

// ld_alpha's token weights of a batch of pairs (rows 2i, 2i + 1: chosen, rejected): each row's
// trained tokens (weight > 0) after the first min(trained tokens of the two rows) multiplied by
// ld_alpha, as LlamaFactory's get_batch_logps (its answers' trained tokens are contiguous).
at::Tensor length_desensitized_weights(const at::Tensor& weights, double ld_alpha);

// A reward model's weights [B, T-1] from a batch's token mask [B, T] (true on tokens, padding on
// the right): 1 at the column of each row's last token (the head's output column t is position
// t + 1's score), 0 elsewhere, so the weighted sum of a row is its score. Every row needs two tokens.
at::Tensor last_token_weights(const at::Tensor& token_mask);

// The engine's objective for a micro-batch: the sum of its pairs' losses, from the weighted token
// losses (-log p of each trained token) and the batch's reference_logps.
engine::SequenceObjective preference_objective(const PreferenceOptions& o);

// What a logged step reports of its pairs (means over every pair of the steps logged), with
// LlamaFactory's names: rewards/chosen, rewards/rejected, rewards/accuracies, rewards/margins,
// logps/chosen, logps/rejected (a reward model's: the first four, of its scores).
class PreferenceMetrics {
 public:
  void add(const PairTerms& host_terms);  // double tensors on the CPU
  std::vector<std::pair<std::string, double>> take();  // the means so far, then starts over

 private:
  double sums_[6] = {0, 0, 0, 0, 0, 0};
  double pairs_ = 0;
  bool has_logps_ = true;  // false for a reward model's terms
};

}  // namespace lft::train
