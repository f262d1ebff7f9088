// CausalLM: the units (embedding, decoder layers, head + loss), their forward over a range, and
// where each parameter is used.
#include "lft/model/causal_lm.h"
#include "lft/runtime/text.h"

#include <algorithm>
#include <tuple>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "lft/model/checkpoint.h"
#include "lft/model/init.h"
#include "lft/model/loss.h"
#include "lft/model/moe.h"
#include "lft/model/score_head.h"
#include "lft/model/segments.h"
#include "lft/runtime/host_transfer.h"

namespace lft::model {

at::Tensor ParallelOps::embed(const at::Tensor& weight, const at::Tensor& input_ids) {
  return at::embedding(weight, input_ids);
}

at::Tensor ParallelOps::token_losses(const at::Tensor& logits, const at::Tensor& input_ids) {
  return model::token_losses(logits, input_ids, /*ignore_id=*/-100);
}

at::Tensor ParallelOps::target_losses(const at::Tensor& logits, const at::Tensor& targets) {
  return model::target_losses(logits, targets, /*ignore_id=*/-100);
}

CausalLM::CausalLM(const ModelConfig& config, const c10::TensorOptions& options, const BlockFactory& make_block)
    : config_(config), rotary_((config.validate("model config"), config)) {
  model = register_module("model", DecoderStack());
  model->embed_tokens =
      model->register_module("embed_tokens", Embedding(config_.vocab_size, config_.hidden_size, options));
  model->layers = model->register_module("layers", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    std::shared_ptr<DecoderBlock> block = make_block(i);
    model->layers->push_back(block);
    model->blocks.push_back(std::move(block));
  }
  model->norm = model->register_module("norm", RMSNorm(config_.hidden_size, config_, options));
  // transformers' token classification has no LM head; TRL's value head sits beside it.
  if (!config_.tie_word_embeddings && config_.score_head != ScoreHead::TokenClassification)
    lm_head = register_module("lm_head", Linear(config_.hidden_size, config_.vocab_size, false, options));
  if (config_.score_head == ScoreHead::ValueHead) {  // TRL's names: v_head.summary.{weight,bias}
    auto v_head = register_module("v_head", std::make_shared<torch::nn::Module>("ValueHead"));
    score = v_head->register_module("summary", Linear(config_.hidden_size, 1, true, options));
  } else if (config_.score_head == ScoreHead::TokenClassification) {  // score.{weight,bias}
    score = register_module("score", Linear(config_.hidden_size, 1, true, options));
  }
}

namespace {

// The role of LoRA's A (`is_a`) or B beside a linear of role `base`.
TpSplit lora_split(const TpSplit& base, bool is_a) {
  TpSplit whole;
  whole.role = TpRole::ReplicatedInsideTp;
  if (base.role == TpRole::ColumnParallel) return is_a ? whole : base;
  if (base.role == TpRole::RowParallel) return is_a ? base : whole;
  return {};
}

}  // namespace

ParameterPlacement CausalLM::placement(const std::string& name) const {
  // DoRA's magnitude [out] is split as B's rows are.
  for (const char* factor : {".lora_A.weight", ".lora_B.weight", ".lora_magnitude_vector"})
    if (ends_with(name, factor)) {
      const std::string linear = name.substr(0, name.size() - std::string(factor).size());
      ParameterPlacement p = placement(linear + ".weight");
      p.tp = lora_split(p.tp, factor[6] == 'A');
      return p;
    }
  ParameterPlacement p;
  TpSplit vocab;
  vocab.role = TpRole::VocabParallel;
  vocab.groups = config_.vocab_size;
  vocab.what = "vocabulary rows";
  if (name == "model.embed_tokens.weight") {
    p.units = {0};
    if (config_.tie_word_embeddings) p.units.push_back(head_unit());
    p.tp = vocab;
    return p;
  }
  if (name == "lm_head.weight") {
    p.units = {head_unit()};
    p.tp = vocab;
    return p;
  }
  // The final norm and a reward model's score head: whole on every tensor-parallel rank.
  if (name == "model.norm.weight" || (score && is_score_head_parameter(name))) {
    p.units = {head_unit()};
    return p;
  }
  const std::string prefix = "model.layers.";
  TORCH_CHECK(name.rfind(prefix, 0) == 0, "CausalLM: '", name, "' is not a parameter of this model");
  const std::size_t dot = name.find('.', prefix.size());
  const std::int64_t layer = std::stoll(name.substr(prefix.size(), dot - prefix.size()));
  TORCH_CHECK(layer >= 0 && layer < num_layers() && dot != std::string::npos, "CausalLM: '", name,
              "' is not a parameter of this model");
  p.units = {layer_unit(layer)};
  p.tp = model->blocks[static_cast<std::size_t>(layer)]->tp_split(name.substr(dot + 1));
  return p;
}

double CausalLM::layer_saved_elements_per_token(int tp, bool sequence_parallel) const {
  double most = 0;
  for (const auto& block : model->blocks) most = std::max(most, block->saved_elements_per_token(tp, sequence_parallel));
  return most;
}

double CausalLM::head_saved_elements_per_token(int tp) const {
  return 2.0 * static_cast<double>(config_.hidden_size) + static_cast<double>((config_.vocab_size + tp - 1) / tp);
}

AttentionInputs CausalLM::attention_inputs(const at::Tensor& input_ids, const at::Tensor& segment_ids,
                                           const c10::TensorOptions& options, bool with_mask) const {
  AttentionInputs in;
  std::tie(in.cos, in.sin) = rotary_.cos_sin(input_ids.size(1), options);
  if (segment_ids.defined()) {
    TORCH_CHECK(segment_ids.sizes() == input_ids.sizes(), "CausalLM: segment_ids ", segment_ids.sizes(),
                " do not match input_ids ", input_ids.sizes());
    const at::Tensor positions = segment_positions(segment_ids);
    const std::vector<std::int64_t> shape{positions.size(0), 1, positions.size(1), -1};
    in.cos = in.cos.index_select(0, positions.reshape({-1})).view(shape);
    in.sin = in.sin.index_select(0, positions.reshape({-1})).view(shape);
    if (with_mask) in.mask = segment_causal_mask(segment_ids);
  }
  return in;
}

void CausalLM::set_dropout_seed(std::uint64_t seed) {
  dropout_seed_ = seed;
  forwards_from_unit_.assign(static_cast<std::size_t>(num_units()), 0);
}

at::Tensor CausalLM::run_layers(std::int64_t first, std::int64_t last, at::Tensor h, const AttentionInputs& in) {
  const bool recompute = gradient_checkpointing_ && at::GradMode::is_enabled();
  for (std::int64_t i = first; i < last; ++i) {
    const std::shared_ptr<DecoderBlock>& block = model->blocks[static_cast<std::size_t>(i)];
    if (layer_hooks_) layer_hooks_->before_layer(i);
    const std::uint64_t layer_seed = in.dropout_seed == 0 ? 0 : mix_seed(in.dropout_seed, static_cast<std::uint64_t>(i));
    if (recompute) {
      ParallelOps* ops = ops_;  // the lambda owns references to the block and the inputs
      h = checkpoint(
          [block, in, ops, layer_seed](const at::Tensor& x) {
            DropoutSeedScope seed(layer_seed);
            return block->forward(x, in, *ops);
          },
          h);
    } else {
      DropoutSeedScope seed(layer_seed);
      h = block->forward(h, in, *ops_);
    }
    if (layer_hooks_) layer_hooks_->after_layer(i, h);
  }
  return h;
}

at::Tensor CausalLM::head_losses(const at::Tensor& hidden, const at::Tensor& input_ids) {
  return ops_->token_losses(logits(ops_->enter(model->norm(hidden))), input_ids);
}

at::Tensor CausalLM::position_scores(const at::Tensor& hidden, std::uint64_t dropout_seed) {
  // TRL's ValueHead: dropout on the final normed hidden state, then the linear (main's token
  // classification: its dropout is 0). Every tensor-parallel rank computes the scores of its rows
  // whole (no enter(): the head is replicated).
  at::Tensor x = model->norm(hidden);
  const double p = config_.score_head == ScoreHead::ValueHead ? config_.summary_dropout_prob : 0.0;
  if (p > 0 && dropout_seed != 0 && at::GradMode::is_enabled())
    x = x * (dropout_keep_mask(x.sizes(), 1.0 - p, mix_seed(dropout_seed, static_cast<std::uint64_t>(num_units())),
                               x.device()) / (1.0 - p)).to(x.options());
  return ops_->gather_positions(score->forward(x).squeeze(-1).to(at::kFloat));
}

std::uint64_t CausalLM::next_dropout_seed(std::int64_t begin) {
  if (dropout_seed_ == 0 || !at::GradMode::is_enabled()) return 0;
  return mix_seed(mix_seed(dropout_seed_, static_cast<std::uint64_t>(begin)),
                  forwards_from_unit_[static_cast<std::size_t>(begin)]++);
}

at::Tensor CausalLM::forward_units(std::int64_t begin, std::int64_t end, const at::Tensor& input_ids,
                                   const at::Tensor& segment_ids, const at::Tensor& hidden,
                                   const at::Tensor& token_mask) {
  TORCH_CHECK(input_ids.dim() == 2, "CausalLM: input_ids must be [batch, seq], got ", input_ids.sizes());
  TORCH_CHECK(0 <= begin && begin < end && end <= num_units(), "CausalLM: no units [", begin, ", ", end, ")");
  TORCH_CHECK(!token_mask.defined() || token_mask.sizes() == input_ids.sizes(), "CausalLM: token_mask ",
              token_mask.sizes(), " does not match input_ids ", input_ids.sizes());
  if (cp_ != nullptr) return forward_chunk_units(begin, end, input_ids, segment_ids, hidden, token_mask);
  at::Tensor h = begin == 0 ? embed(input_ids) : hidden;
  const std::int64_t first = std::max<std::int64_t>(begin, 1) - 1;
  const std::int64_t last = std::min(end, head_unit()) - 1;
  const std::uint64_t seed = next_dropout_seed(begin);
  if (first < last) {
    AttentionInputs in = attention_inputs(input_ids, segment_ids, h.options());
    in.dropout_seed = seed;
    start_routing(in, token_mask);
    h = run_layers(first, last, h, in);
    finish_routing(in, first, last);
  }
  if (end != num_units()) return h;
  if (!score) return head_losses(h, input_ids);
  const at::Tensor scores = position_scores(h, seed);
  return scores.narrow(1, 1, std::max<std::int64_t>(scores.size(1) - 1, 0));
}

at::Tensor CausalLM::forward_chunk_units(std::int64_t begin, std::int64_t end, const at::Tensor& input_ids,
                                         const at::Tensor& segment_ids, const at::Tensor& hidden,
                                         const at::Tensor& token_mask) {
  const SequenceChunk c = sequence_chunk(*cp_, input_ids, segment_ids, ops_->sequence_multiple());
  at::Tensor h = begin == 0 ? embed(c.local_ids()) : hidden;
  const std::int64_t first = std::max<std::int64_t>(begin, 1) - 1;
  const std::int64_t last = std::min(end, head_unit()) - 1;
  // Each chunk draws its own dropout masks.
  std::uint64_t seed = next_dropout_seed(begin);
  if (seed != 0) seed = mix_seed(seed, static_cast<std::uint64_t>(cp_->rank()) + 1);
  if (first < last) {
    // RoPE tables of the whole padded sequences, this chunk's rows of them; Ulysses attends over
    // the whole sequences (their mask), ring attention block by block from positions and segments.
    const bool ring = cp_->ring();
    AttentionInputs in = attention_inputs(c.input_ids.narrow(1, 0, c.padded), c.segment_ids, h.options(), !ring);
    const int position_dim = in.cos.dim() == 2 ? 0 : 2;
    in.cos = in.cos.index_select(position_dim, c.local_positions()).contiguous();
    in.sin = in.sin.index_select(position_dim, c.local_positions()).contiguous();
    in.cp.group = cp_;
    if (ring) {
      in.cp.positions = c.positions;
      in.cp.host_positions = c.host_positions;
      in.cp.segment_ids = c.segment_ids;
    }
    in.dropout_seed = seed;
    if (config_.moe.any()) {  // the chunk's rows; the padding the split adds is no token
      const at::Tensor mask = token_mask.defined() ? token_mask.to(at::kFloat)
                                                   : at::ones(input_ids.sizes(), h.options().dtype(at::kFloat));
      const at::Tensor padded = at::constant_pad_nd(mask, {0, c.padded - c.length});
      start_routing(in, padded.index_select(1, c.local_positions()));
    }
    h = run_layers(first, last, h, in);
    finish_routing(in, first, last);
  }
  if (end != num_units()) return h;
  if (score) {  // the chunk's scores, then every chunk's: positions 1..T-1, as one rank has them
    const at::Tensor scores = gather_sequence(*cp_, position_scores(h, seed), c);
    return scores.narrow(1, 1, std::max<std::int64_t>(c.length - 1, 0));
  }
  // The chunk's per-position losses, then every chunk's: [B, padded] -> the [B, T-1] one rank has.
  const at::Tensor local = ops_->target_losses(logits(ops_->enter(model->norm(h))), c.local_targets());
  return gather_sequence(*cp_, local, c).narrow(1, 0, std::max<std::int64_t>(c.length - 1, 0));
}

void CausalLM::start_routing(AttentionInputs& in, const at::Tensor& token_mask) const {
  if (!config_.moe.any() || !at::GradMode::is_enabled()) return;
  in.routing = std::make_shared<RoutingRecord>(num_layers(), router_aux_scale_);
  if (token_mask.defined()) in.token_mask = token_mask.reshape({-1}).to(at::kFloat);
}

void CausalLM::finish_routing(const AttentionInputs& in, std::int64_t first, std::int64_t last) {
  RoutingRecord* record = in.routing.get();
  if (record == nullptr || first != 0 || last != num_layers()) return;  // a pipeline stage's share: no loss
  std::vector<at::Tensor> counts;
  at::Tensor prob_sum, rows;
  double dropped = 0.0, assignments = 0.0;
  for (std::size_t l = 0; l < record->counts.size(); ++l) {
    if (!record->counts[l].defined()) continue;
    dropped += record->dropped[l];
    assignments += record->assignments[l];
    counts.push_back(record->counts[l]);
    prob_sum = prob_sum.defined() ? prob_sum + record->prob_sums[l] : record->prob_sums[l];
    rows = rows.defined() ? rows + record->tokens[l] : record->tokens[l];
  }
  if (counts.empty()) return;
  // One vector [layers * E counts, E probability sums, rows, pairs dropped, pairs routed]; a cp
  // group's chunks summed; read on the host once (the forward's one wait for its routing).
  at::Tensor stats = at::cat({at::stack(counts).reshape({-1}).to(at::kDouble), prob_sum.to(at::kDouble),
                              rows.reshape({1}).to(at::kDouble),
                              to_device(at::tensor({dropped, assignments}, at::kDouble), prob_sum.device())});
  if (cp_ != nullptr) stats = cp_->all_gather(stats).view({cp_->size(), -1}).sum(0);
  stats = host_read(stats, "reading the MoE routing's statistics");
  const std::int64_t experts = config_.moe.num_experts, layers = static_cast<std::int64_t>(counts.size());
  const at::Tensor by_layer = stats.narrow(0, 0, layers * experts).view({layers, experts});
  const at::Tensor c = by_layer.sum(0), s = stats.narrow(0, layers * experts, experts);
  const double r = stats.data_ptr<double>()[layers * experts + experts];
  routing_totals_.dropped += stats.data_ptr<double>()[layers * experts + experts + 1];
  routing_totals_.assignments += stats.data_ptr<double>()[layers * experts + experts + 2];
  const double e = static_cast<double>(experts);
  const double aux = r > 0 ? e * (c * s).sum().item<double>() / (r * r) : 0.0;
  if (record->scale != 0 && r > 0) record->gradient = (c * (record->scale * e / (r * r))).to(prob_sum.options());
  routing_totals_.aux_loss_sum += aux;
  routing_totals_.forwards += 1;
  routing_totals_.expert_rows = routing_totals_.expert_rows.defined() ? routing_totals_.expert_rows + by_layer : by_layer.clone();
}

RoutingTotals CausalLM::take_routing_totals() {
  RoutingTotals out = std::move(routing_totals_);
  routing_totals_ = RoutingTotals{};
  return out;
}

void CausalLM::split_embedding_gradient(at::Tensor tied_head) {
  TORCH_CHECK(ops_ == &one_rank_, "CausalLM: a sparse embedding gradient needs the whole vocabulary on each rank");
  TORCH_CHECK(!tied_head.defined() || config_.tie_word_embeddings, "CausalLM: a tied head for an untied model");
  sparse_embedding_gradient_ = true;
  tied_head_ = std::move(tied_head);
}

at::Tensor CausalLM::embed(const at::Tensor& input_ids) {
  const at::Tensor& weight = model->embed_tokens->weight;
  const at::Tensor h = sparse_embedding_gradient_
                           ? at::embedding(weight, input_ids, /*padding_idx=*/-1, /*scale_grad_by_freq=*/false, /*sparse=*/true)
                           : ops_->embed(weight, input_ids);
  if (config_.embedding_multiplier == 1.0) return h;
  // transformers: a float32 scalar tensor cast to the weights' dtype, then multiplied.
  return h * at::scalar_tensor(config_.embedding_multiplier, h.options().dtype(at::kFloat)).to(h.scalar_type());
}

at::Tensor CausalLM::logits(const at::Tensor& hidden) {
  const at::Tensor l = lm_head                ? lm_head->forward(hidden)
                       : tied_head_.defined() ? at::linear(hidden, tied_head_)
                                              : at::linear(hidden, model->embed_tokens->weight);
  const double cap = config_.final_logit_softcapping;
  return cap > 0 ? at::tanh(l / cap) * cap : l;
}

at::Tensor CausalLM::forward(const at::Tensor& input_ids, const at::Tensor& segment_ids) {
  const at::Tensor h = forward_units(0, head_unit(), input_ids, segment_ids);
  return logits(model->norm(h));
}

}  // namespace lft::model
