// One optimizer step: the global batch's micro-batches through the engine, the loss over every
// target of the global batch, fp16 loss scaling, clipping, the update.
#include <ATen/ATen.h>

#include <cmath>

#include "lft/comm/device_read.h"
#include "lft/model/init.h"
#include "lft/runtime/error.h"
#include "lft/runtime/log.h"
#include "trainer_state.h"

namespace lft::train {
namespace {

void scale_gradients(engine::Engine& engine, double factor) {
  c10::NoGradGuard no_grad;
  for (auto& t : engine.parameters())
    if (t.grad().defined()) t.mutable_grad().mul_(factor);
}

void unscale_gradients(engine::Engine& engine, double scale) {
  c10::NoGradGuard no_grad;
  for (auto& t : engine.parameters())
    if (t.grad().defined()) t.mutable_grad().div_(scale);
}

void drop_gradients(engine::Engine& engine) {
  for (auto& t : engine.parameters()) t.mutable_grad().reset();
}

}  // namespace

void Trainer::add_routing(StepResult& r) {
  State& s = *s_;
  const model::RoutingTotals totals = s.model->take_routing_totals();
  // Every forward ran the whole model on each rank of a tp (and cp) group alike: the data-parallel
  // ranks' forwards are the step's. A pipeline's stages keep no totals (no stage runs every layer).
  const std::int64_t experts = s.model->config().moe.num_experts;
  std::int64_t layers = 0;
  for (std::int64_t l = 0; l < s.model->num_layers(); ++l) layers += s.model->config().moe.routes(l) ? 1 : 0;
  at::Tensor sums = at::zeros({4 + layers * experts}, at::kDouble);
  sums[0] = totals.aux_loss_sum;
  sums[1] = static_cast<double>(totals.forwards);
  sums[2] = totals.dropped;
  sums[3] = totals.assignments;
  if (totals.expert_rows.defined()) sums.narrow(0, 4, layers * experts).copy_(totals.expert_rows.reshape({-1}));
  at::Tensor device_sums = sums.to(s.torch_device());
  s.mesh.device_dp().all_reduce(device_sums);
  sums = read_on_host(device_sums, "reading the MoE statistics summed over data-parallel ranks");
  const double forwards = sums[1].item<double>();
  if (forwards == 0) return;
  r.aux_loss = sums[0].item<double>() / forwards;
  r.expert_rows = sums.narrow(0, 4, layers * experts).view({layers, experts}).clone();
  const model::MoeShape& moe = s.model->config().moe;
  if (moe.capacity_factor > 0 && sums[3].item<double>() > 0) r.expert_dropped = sums[2].item<double>() / sums[3].item<double>();
  if (moe.aux_loss()) r.loss += moe.router_aux_loss_coef * r.aux_loss;
}

StepResult Trainer::step() {
  State& s = *s_;
  const auto start = Clock::now();
  const int dp_rank = s.mesh.dp_rank(), dp_size = s.mesh.shape().dp_size();
  const std::int64_t micro = s.plan.micro_batch, accum = s.plan.accumulation, global = s.plan.global_batch;
  // Every rank's micro-batches of samples (sequences, or pairs with stage dpo), rank after rank:
  // cut from the step's global batch, or by tokens from each rank's stream (dynamic_batching).
  std::vector<std::vector<std::int64_t>> samples;
  if (s.dynamic) {
    s.dynamic->skip(s.step - s.dynamic_step);
    samples = s.dynamic->next_step();
    s.dynamic_step = s.step + 1;
  } else {
    const auto indices = s.sampler->global_batch_indices();
    for (int r = 0; r < dp_size; ++r)
      for (std::int64_t m = 0; m < accum; ++m) samples.push_back(data::local_micro_batch(indices, r, dp_size, micro, accum, m));
  }
  // Every rank's sequences in the order of the gathered per-sequence sums: rank, micro-batch.
  std::vector<std::vector<std::int64_t>> sequences;
  std::vector<std::int64_t> indices;
  for (const auto& part : samples) {
    sequences.push_back(s.data->sequences(part));
    indices.insert(indices.end(), part.begin(), part.end());
  }
  // The loss is the weighted sum over every target of the global batch divided by the sum of the
  // weights (the count of trained tokens unless messages carry loss weights): each rank knows it.
  // With stage dpo it is the mean over the global batch's pairs of their losses (or weighted by
  // tokens: pref_loss_weighting, below).
  const std::vector<std::int64_t> batch_sequences = s.data->sequences(indices);
  const double targets = s.data->weight_sum(batch_sequences);

  // pref_loss_weighting = "tokens": each micro-batch's pairs weigh its trained tokens over its pairs,
  // the step's sum over the step's trained tokens (LlamaFactory main's v1 trainer).
  const bool token_weighted = s.preference && s.preference->token_weighted;
  std::vector<double> pair_weights(sequences.size(), 1.0);
  double pair_weight_sum = static_cast<double>(global);
  if (token_weighted) {
    pair_weight_sum = 0;
    for (std::size_t k = 0; k < sequences.size(); ++k) {
      const double trained = s.lengths_of(sequences[k]).sum().item<double>();
      pair_weights[k] = trained / static_cast<double>(sequences[k].size() / 2);
      pair_weight_sum += trained;
    }
  }
  std::vector<engine::MicroBatch> batches;
  for (std::int64_t m = 0; m < accum; ++m) {
    const std::size_t k = static_cast<std::size_t>(dp_rank * accum + m);
    batches.push_back(s.device_batch(s.data->batch(sequences[k]), sequences[k]));
    batches.back().pair_loss_weight = pair_weights[k];
  }
  std::int64_t padded = 0;  // every rank's micro-batches, known here without communication
  for (const auto& seqs : sequences) padded += s.data->padded_tokens(seqs);
  engine::MicroBatchOptions options;
  options.compute = s.plan.compute;
  options.loss_factor = (s.scaler ? s.scaler->scale() : 1.0) / (s.preference ? pair_weight_sum : targets);
  if (s.preference) options.objective = preference_objective(*s.preference);
  const bool lora_dropout = s.plan.finetuning.type == "lora" && s.plan.finetuning.lora_dropout > 0;
  const bool value_head_dropout = s.plan.model.score_head == model::ScoreHead::ValueHead && s.plan.model.summary_dropout_prob > 0;
  if (lora_dropout || value_head_dropout)  // new masks each step and dp rank
    s.model->set_dropout_seed(model::mix_seed(model::mix_seed(s.options.seed + 1,
                                                              static_cast<std::uint64_t>(s.step)),
                                              static_cast<std::uint64_t>(dp_rank)));
  const model::MoeShape& moe = s.model->config().moe;
  if (moe.aux_loss())  // each forward's auxiliary loss weighs 1 / the step's forwards, as its mean
    s.model->set_router_aux_scale(moe.router_aux_loss_coef * (s.scaler ? s.scaler->scale() : 1.0) /
                                  static_cast<double>(accum * dp_size));
  const at::Tensor local = s.engine->run_micro_batches(*s.model, batches, options);
  s.engine->finish_gradients();

  // The host's one wait of the step: every row's loss and the gradient norm, in one read. Each
  // rank's count of rows: a micro-batch's sequences, or one for a joined micro-batch (padding_free);
  // they differ under dynamic_batching.
  std::vector<std::int64_t> counts(static_cast<std::size_t>(dp_size), 0);
  for (std::size_t k = 0; k < sequences.size(); ++k)
    counts[k / static_cast<std::size_t>(accum)] +=
        s.data->joins_micro_batches() ? 1 : static_cast<std::int64_t>(sequences[k].size());
  std::int64_t count = 0;
  for (const std::int64_t c : counts) count += c;
  at::Tensor all = at::empty({count}, local.options());
  // Equal counts (every strategy but dynamic_batching): the plain all-gather.
  s.mesh.device_dp().all_gather(local, all, s.dynamic ? counts : std::vector<std::int64_t>{});
  const at::Tensor host = read_on_host(at::cat({all, s.engine->grad_norm_squared()}),
                                       "reading step " + std::to_string(s.step + 1) + "'s losses and gradient norm");
  const double* p = host.data_ptr<double>();

  StepResult r;
  if (s.preference) {  // the pairs' losses and metrics from their log-probabilities, in double
    std::vector<std::int64_t> order;
    for (const auto& seqs : sequences) order.insert(order.end(), seqs.begin(), seqs.end());
    const PairTerms terms = pair_terms(*s.preference, s.preference->sequence_values(host.narrow(0, 0, count)), s.lengths_of(order),
                                       s.preference->uses_reference() ? s.reference_of(order) : at::Tensor());
    if (token_weighted) {  // each pair's loss times its micro-batch's pair weight, over their sum
      std::vector<double> each;
      for (std::size_t k = 0; k < sequences.size(); ++k) each.insert(each.end(), sequences[k].size() / 2, pair_weights[k]);
      r.loss = (terms.losses * at::tensor(each, at::kDouble)).sum().item<double>() / pair_weight_sum;
    } else {
      r.loss = terms.losses.mean().item<double>();
    }
    s.preference_metrics.add(terms);
  } else {
    // Per-sequence sums in one fixed global order, so every layout adds them the same way.
    double loss_sum = 0.0;
    for (std::int64_t i = 0; i < count; ++i) loss_sum += p[i];
    r.loss = loss_sum / targets;
  }
  if (moe.any()) add_routing(r);
  r.grad_norm = std::sqrt(p[count]);
  r.tokens = s.data->real_tokens(batch_sequences);
  r.attention_pairs = s.data->attention_pairs(batch_sequences);
  r.padded_tokens = padded;
  auto finish = [&] {
    s.sampler->advance();
    r.step = ++s.step;
    s.tokens_seen += r.tokens;
    r.seconds = seconds_since(start);
    s.step_seconds += r.seconds;
    return r;
  };
  if (s.scaler && std::isfinite(r.loss)) {
    const double scale = s.scaler->scale();
    if (!s.scaler->update(std::isfinite(r.grad_norm), s.step + 1)) {  // every rank agrees
      log0(s.scaler->last_event());
      drop_gradients(*s.engine);
      r.grad_norm = 0.0;
      r.skipped = true;
      r.lr = s.schedule->lr(s.step);
      return finish();
    }
    unscale_gradients(*s.engine, scale);
    r.grad_norm /= scale;
  }
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
    const std::string what = "step " + std::to_string(s.step + 1) + ": the loss is " + std::to_string(r.loss) +
                             " and the gradient norm " + std::to_string(r.grad_norm) +
                             "; stopping before the update (nothing was written). ";
    // The cause lftrain can see is named; the learning-rate advice is for the rest.
    if (!s.preference && !(targets > 0)) {
      std::string samples;
      for (std::size_t i = 0; i < indices.size() && i < 8; ++i) samples += (i ? ", " : "") + std::to_string(indices[i]);
      throw RunFailure(what + "Its global batch trains no token (a loss summed over a weight of 0): samples " + samples +
                       (indices.size() > 8 ? ", ..." : "") + " of the training data have every answer's loss weight 0 "
                       "(v1 messages' \"loss_weight\") or cut away at cutoff_len. Give those answers a weight, or "
                       "raise cutoff_len.");
    }
    throw RunFailure(what + "Lower learning_rate, set max_grad_norm, or check the data.");
  }
  const double max_norm = s.options.max_grad_norm;
  if (max_norm > 0) scale_gradients(*s.engine, std::min(1.0, max_norm / (r.grad_norm + 1e-6)));
  r.lr = s.schedule->lr(s.step);
  s.optimizer->step(r.lr);
  s.engine->parameters_updated();
  drop_gradients(*s.engine);
  return finish();
}

}  // namespace lft::train
