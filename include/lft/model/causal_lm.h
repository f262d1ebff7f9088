// The seam between engines and models. An engine programs against CausalLM: the ordered units
// (0: token embedding; 1..L: decoder layers; L+1: final norm, head and loss), a forward over a
// range of units (what a pipeline stage runs), and each parameter's placement (its units and its
// tensor-parallel role). A model family supplies its decoder block (DecoderBlock) and the roles
// of the block's parameters; the engine supplies the communication (ParallelOps) that the
// model's own forward calls at the points those roles define.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "lft/model/context_parallel.h"
#include "lft/model/layers.h"
#include "lft/model/model_config.h"

namespace lft::model {

// How tensor parallelism (Megatron-LM) treats a parameter.
enum class TpRole {
  Replicated,          // whole on every rank, used outside the tensor-parallel regions (norms)
  ReplicatedInsideTp,  // whole on every rank, applied to this rank's heads only: its gradient is
                       // the sum over the tensor-parallel ranks (Qwen3's per-head q/k norms)
  ColumnParallel,      // dim 0 (output features) split: q/k/v, gate/up and their biases
  RowParallel,         // dim 1 (input features) split: o_proj, down_proj
  VocabParallel,       // dim 0 (vocabulary rows) split: the embedding and the head
};

struct TpSplit {
  TpRole role = TpRole::Replicated;
  // The split dimension holds `groups` indivisible groups of `group_size` (heads of head_dim;
  // single rows). Ranks take ceil(groups / tp) groups each, the last ones fewer or none.
  std::int64_t groups = 0;
  std::int64_t group_size = 1;
  bool even = false;        // the groups must divide over tp (heads)
  bool replicable = false;  // tp may also be a multiple of groups: tp / groups ranks share one
  std::string what;         // for messages: "attention heads"

  bool split() const { return role != TpRole::Replicated && role != TpRole::ReplicatedInsideTp; }
  int dim() const { return role == TpRole::RowParallel ? 1 : 0; }
};

struct ParameterPlacement {
  // The units whose forward uses the parameter, ascending: one, or two for a tied embedding
  // (the embedding unit and the head).
  std::vector<std::int64_t> units;
  TpSplit tp;
};

struct RoutingRecord;  // moe.h

// A mixture of experts' routing over some training forwards (CausalLM::take_routing_totals).
struct RoutingTotals {
  double aux_loss_sum = 0.0;  // their auxiliary losses (unweighted), summed
  std::int64_t forwards = 0;
  at::Tensor expert_rows;  // [MoE layers, experts] fp64: the (unpadded) tokens routed to each expert
  // With an expert capacity: the (row, expert) pairs dropped, of all routed (padding included).
  double dropped = 0.0, assignments = 0.0;
};

// What a layer's attention takes besides its input: RoPE tables ([T, head_dim], or
// [B, 1, T, head_dim] per segment position with neat packing) and the segment mask (undefined:
// causal).
struct AttentionInputs {
  at::Tensor cos, sin, mask;
  std::uint64_t dropout_seed = 0;  // the LoRA dropout masks' seed of this forward (0: none)
  // Context parallelism (context_parallel.h): the layers see this rank's chunk of the sequences;
  // cos/sin are the chunk's rows; Ulysses: mask (and the causal order) the whole padded
  // sequences'; ring: undefined, the split's positions and segments say. group null: none.
  ContextSplit cp;
  // Mixtures of experts: which of the rows a layer sees are tokens (fp32 [rows], 1 token, 0
  // padding; undefined: all), and the forward's routing record (null: none kept).
  at::Tensor token_mask;
  std::shared_ptr<RoutingRecord> routing;
};

// The communication a model's forward calls at its tensor-parallel points. The defaults are one
// rank's arithmetic: identities, a plain lookup and a plain cross-entropy.
class ParallelOps {
 public:
  virtual ~ParallelOps() = default;
  // Before a region that starts with column-parallel layers: every rank needs the whole input.
  virtual at::Tensor enter(const at::Tensor& x) { return x; }
  // After a region that ends with a row-parallel layer: the ranks' partial outputs are summed.
  virtual at::Tensor exit(const at::Tensor& y) { return y; }
  // Token embedding from a vocab-parallel table (this rank's rows of it).
  virtual at::Tensor embed(const at::Tensor& weight, const at::Tensor& input_ids);
  // Per-token losses [B, T-1] fp32 from logits over this rank's vocabulary rows.
  virtual at::Tensor token_losses(const at::Tensor& logits, const at::Tensor& input_ids);
  // Per-position losses [B, T] fp32 of logits [B, T, this rank's vocabulary rows] predicting
  // targets [B, T] (context parallelism: a chunk's targets come from the next chunk too).
  virtual at::Tensor target_losses(const at::Tensor& logits, const at::Tensor& targets);
  // Per-position values [B, T'] each rank computed for its rows of the sequences (T' = T / tp under
  // sequence parallelism) -> [B, T], whole and alike on every rank; backward keeps each rank's own
  // rows of the gradient (a reward model's scores: every rank then computes the same loss).
  virtual at::Tensor gather_positions(const at::Tensor& values) { return values; }
  // What a sequence's length must be a multiple of inside the tensor-parallel regions (tp with
  // sequence parallelism); context parallelism pads each chunk to it.
  virtual std::int64_t sequence_multiple() const { return 1; }
  // The ranks that run each tensor-parallel region on the same rows (tp): a value they all
  // compute whole (a router's) gets its gradient summed over them.
  virtual std::int64_t region_replicas() const { return 1; }
};

// Called around each decoder layer's forward: sharded engines gather a layer's parameters before
// it runs, free them after, and hook its output's gradient to gather them again for backward.
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual void before_layer(std::int64_t index) = 0;
  virtual void after_layer(std::int64_t index, const at::Tensor& output) = 0;
};

// One decoder layer of a family.
class DecoderBlock : public torch::nn::Module {
 public:
  // x [B, T, hidden] (T / tp tokens under sequence parallelism) -> the same shape.
  virtual at::Tensor forward(const at::Tensor& x, const AttentionInputs& in, ParallelOps& ops) = 0;
  // The role of the block's parameter `name` ("self_attn.q_proj.weight").
  virtual TpSplit tp_split(const std::string& name) const = 0;
  // Elements per token its forward keeps for backward (memory estimates), on a rank of `tp`
  // tensor-parallel ranks (the residual stream split over them too with sequence parallelism).
  virtual double saved_elements_per_token(int tp, bool sequence_parallel) const = 0;
};

// HF's inner model: embed_tokens, layers.{i}, norm (the parameter names "model.<...>").
class DecoderStackImpl : public torch::nn::Module {
 public:
  Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
  std::vector<std::shared_ptr<DecoderBlock>> blocks;  // the same modules as `layers`, typed
};
TORCH_MODULE(DecoderStack);

// A decoder-only causal language model whose named_parameters() are exactly the Hugging Face
// names (model.embed_tokens.weight, model.layers.0.<block's names>, model.norm.weight,
// lm_head.weight), so loading, checkpoints and export are copies, not renames.
class CausalLM : public torch::nn::Module {
 public:
  using BlockFactory = std::function<std::shared_ptr<DecoderBlock>(std::int64_t layer)>;
  // Builds embed_tokens, config.num_hidden_layers blocks from `make_block`, the final norm, and
  // lm_head unless the embeddings are tied. Parameters are created with `options` (device,
  // dtype; default CPU float32), zero-filled (norm weights one) until weights are loaded.
  CausalLM(const ModelConfig& config, const c10::TensorOptions& options, const BlockFactory& make_block);

  const ModelConfig& config() const { return config_; }
  std::int64_t num_layers() const { return static_cast<std::int64_t>(model->blocks.size()); }
  std::int64_t num_units() const { return num_layers() + 2; }
  std::int64_t head_unit() const { return num_layers() + 1; }
  static std::int64_t layer_unit(std::int64_t layer) { return layer + 1; }
  bool is_layer_unit(std::int64_t unit) const { return unit >= 1 && unit <= num_layers(); }

  // Where parameter `name` (of named_parameters()) is used, and its tensor-parallel role. A LoRA
  // adapter follows its linear: beside a column-parallel one A is whole (its gradient summed over
  // the tensor-parallel ranks) and B split as the linear's rows; beside a row-parallel one A is
  // split as the linear's columns and B whole (gradient summed), its partial output summed with
  // the linear's.
  ParameterPlacement placement(const std::string& name) const;
  // Elements per token that backward keeps (memory estimates): the largest decoder layer's, and
  // the head's (its normed input and the log-softmax of this rank's vocabulary rows).
  double layer_saved_elements_per_token(int tp, bool sequence_parallel) const;
  double head_saved_elements_per_token(int tp) const;

  // Units [begin, end): from input_ids (begin == 0) or from `hidden` (the previous unit's
  // output), to hidden states [B, T, hidden], or, when end == num_units(), to the per-token
  // losses [B, T-1] fp32 of predicting input_ids[:, 1:] (targets -100 count 0); a reward model
  // (config().score_head) to the scores [B, T-1] of positions 1..T-1 instead. segment_ids
  // [B, T] (neat packing): positions restart and attention stays within each segment.
  // token_mask [B, T] (bool or 0/1; undefined: every position a token) tells a mixture of
  // experts' routing statistics which positions are padding.
  at::Tensor forward_units(std::int64_t begin, std::int64_t end, const at::Tensor& input_ids,
                           const at::Tensor& segment_ids, const at::Tensor& hidden = {},
                           const at::Tensor& token_mask = {});
  // The whole model to per-token losses.
  at::Tensor token_losses(const at::Tensor& input_ids, const at::Tensor& segment_ids = {},
                          const at::Tensor& token_mask = {}) {
    return forward_units(0, num_units(), input_ids, segment_ids, {}, token_mask);
  }
  // input_ids [B, T] int64 -> logits [B, T, vocab] in the parameters' dtype.
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& segment_ids = {});
  // Final hidden states [B, T, hidden] -> logits (lm_head, or the embedding when tied), soft-capped
  // when config.final_logit_softcapping > 0 (this rank's vocabulary rows under tensor parallelism).
  at::Tensor logits(const at::Tensor& hidden);
  // The attention inputs of input_ids (segment_ids as above), in `options`' dtype and device;
  // with_mask false: the segments' RoPE positions without their mask (ring attention).
  AttentionInputs attention_inputs(const at::Tensor& input_ids, const at::Tensor& segment_ids,
                                   const c10::TensorOptions& options, bool with_mask = true) const;

  // On: each decoder layer keeps only its input in forward and is recomputed in backward
  // (lft::model::checkpoint). Only has an effect while grad mode is on.
  void set_gradient_checkpointing(bool on) { gradient_checkpointing_ = on; }
  bool gradient_checkpointing() const { return gradient_checkpointing_; }
  // Training forwards draw LoRA dropout masks from `seed` (per step and data-parallel rank), the
  // forward's first unit and how many forwards from that unit came before since: each layer of
  // each micro-batch gets its own masks, and a recomputed layer the same. 0: no dropout.
  void set_dropout_seed(std::uint64_t seed);
  void set_layer_hooks(LayerHooks* hooks) { layer_hooks_ = hooks; }  // not owned
  LayerHooks* layer_hooks() const { return layer_hooks_; }
  // Mixtures of experts: the auxiliary load-balancing loss's weight in the backward of each
  // training forward that runs every layer (0: its gradient is not computed; the statistics are
  // kept either way). A forward's loss is config.moe's load_balancing_loss over its tokens.
  void set_router_aux_scale(double scale) { router_aux_scale_ = scale; }
  // The training forwards' routing since the last call (forwards that ran every layer), reset.
  RoutingTotals take_routing_totals();
  void set_parallel_ops(ParallelOps* ops) { ops_ = ops != nullptr ? ops : &one_rank_; }  // not owned
  // Context parallelism over `group` (not owned; null: none): forward_units takes whole
  // micro-batches on every rank of the group and runs this rank's chunk of them; hidden states
  // between units (a pipeline's) are the chunk's.
  void set_context_parallel(SequenceExchange* group) { cp_ = group; }
  SequenceExchange* context_parallel() const { return cp_; }
  // Sharded data parallelism (sharded_data_parallel.h): the embedding's gradient comes as sparse
  // rows (the looked-up tokens'), and a tied head reads `tied_head` (null: the embedding itself),
  // a leaf of its own over the embedding's storage, so that the head's dense gradient arrives at
  // the start of backward, apart from the rows the lookup adds at its end.
  void split_embedding_gradient(at::Tensor tied_head);

  DecoderStack model{nullptr};
  Linear lm_head{nullptr};  // null (and no lm_head.weight parameter) when tie_word_embeddings
  // A reward model's score head (config().score_head): `v_head.summary` or `score`; else null.
  Linear score{nullptr};

 private:
  // Token embeddings of input_ids (ops' lookup), times config.embedding_multiplier.
  at::Tensor embed(const at::Tensor& input_ids);
  at::Tensor run_layers(std::int64_t first, std::int64_t last, at::Tensor h, const AttentionInputs& in);
  at::Tensor head_losses(const at::Tensor& hidden, const at::Tensor& input_ids);
  // A reward model's score of each of this rank's positions [B, T] fp32 (tp-gathered), TRL's
  // value-head dropout drawn from `dropout_seed` (0: none) while training.
  at::Tensor position_scores(const at::Tensor& hidden, std::uint64_t dropout_seed);
  // forward_units under context parallelism.
  at::Tensor forward_chunk_units(std::int64_t begin, std::int64_t end, const at::Tensor& input_ids,
                                 const at::Tensor& segment_ids, const at::Tensor& hidden,
                                 const at::Tensor& token_mask);
  // A routing record for a training forward of a mixture of experts over rows weighed by
  // `token_mask` (flattened), into `in`.
  void start_routing(AttentionInputs& in, const at::Tensor& token_mask) const;
  // After layers [first, last): with every layer run, the forward's auxiliary loss and its
  // gradient (counts summed over the cp group), added to the totals.
  void finish_routing(const AttentionInputs& in, std::int64_t first, std::int64_t last);
  std::uint64_t next_dropout_seed(std::int64_t begin);

  ModelConfig config_;
  RotaryEmbedding rotary_;
  bool gradient_checkpointing_ = false;
  std::uint64_t dropout_seed_ = 0;
  std::vector<std::uint64_t> forwards_from_unit_;
  LayerHooks* layer_hooks_ = nullptr;
  ParallelOps one_rank_;
  ParallelOps* ops_ = &one_rank_;
  SequenceExchange* cp_ = nullptr;
  double router_aux_scale_ = 0.0;
  RoutingTotals routing_totals_;
  bool sparse_embedding_gradient_ = false;
  at::Tensor tied_head_;
};

}  // namespace lft::model
