// Mixtures of experts (Qwen3-MoE, Qwen2-MoE, Mixtral): the router, the routed experts computed
// grouped by expert, the optional shared expert, the decoder layer that holds them, and the
// routing statistics of a forward that the auxiliary load-balancing loss is made of.
//
// Numerics follow transformers 5 (Qwen3MoeSparseMoeBlock, MixtralSparseMoeBlock,
// Qwen2MoeSparseMoeBlock): router logits x W_r^T, softmax in fp32, top-k, renormalised when the
// config asks, each token sent to its k experts (dropless), each expert's output scaled by the
// token's weight and the k outputs added in expert order.
//
// The auxiliary loss (transformers' load_balancing_loss_func) is E * sum_e F_e P_e over the
// forward's (MoE layer, unpadded token) rows: F_e the fraction of rows that chose e (k choices a
// row), P_e the mean router probability of e. It is not a sum of per-layer terms, so a layer
// cannot finish it: each layer records its counts and probability sums (RoutingRecord); when the
// forward has run every layer, CausalLM adds them up and sets the loss's gradient with respect to
// each layer's probability sums (E * C_e / R^2, C_e the routed rows of e, R the rows), which
// the layer's backward reads (moe.cpp's AuxGradient node). The same holds under activation
// checkpointing: the recomputed layer reads the gradient its first forward's record received.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "lft/model/causal_lm.h"
#include "lft/model/expert_parallel.h"
#include "lft/model/families.h"
#include "lft/model/layers.h"
#include "lft/model/llama.h"
#include "lft/model/model_config.h"

namespace lft::model {

// One forward's routing over the MoE layers it runs (slot = layer index; undefined: not run or
// dense). Counts and sums are fp32 over the unpadded tokens of the rows the layer routed.
struct RoutingRecord {
  explicit RoutingRecord(std::int64_t layers, double gradient_scale)
      : counts(static_cast<std::size_t>(layers)),
        prob_sums(counts),
        tokens(counts),
        dropped(counts.size()),
        assignments(counts.size()),
        scale(gradient_scale) {}
  std::vector<at::Tensor> counts;     // [E]: rows whose top-k holds expert e
  std::vector<at::Tensor> prob_sums;  // [E]: router probabilities summed over the rows (no history)
  std::vector<at::Tensor> tokens;     // []: the rows
  // With an expert capacity (moe_expert_capacity_factor): the (row, expert) pairs the layer
  // dropped, and all it routed (rows * k, padding included).
  std::vector<double> dropped, assignments;
  // The auxiliary loss's gradient with respect to a layer's probability sums, times `scale`; set
  // when the forward ends (undefined: the loss's gradient is not asked for).
  at::Tensor gradient;
  double scale = 0.0;  // the loss's weight in this forward's backward (0: none)
};

// A weight no LoRA adapter wraps (routers and routed experts: transformers 5 holds them as
// parameters, not nn.Linear, so PEFT's and LlamaFactory's `all` leave them out). Parameter
// "weight" [out, in].
class ExpertWeightImpl : public torch::nn::Module {
 public:
  ExpertWeightImpl(std::int64_t in_features, std::int64_t out_features, const c10::TensorOptions& options = {});
  at::Tensor weight;
};
TORCH_MODULE(ExpertWeight);

// One routed expert: down(act(gate x) * up x), the three weights under the family's names.
class ExpertImpl : public torch::nn::Module {
 public:
  ExpertImpl(const ModelConfig& config, const c10::TensorOptions& options = {});
  ExpertWeight gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(Expert);

// The sparse MLP of a MoE layer: parameters gate.weight [E, hidden] (the router),
// experts.<e>.<gate, up, down>.weight, and with a shared expert shared_expert.{gate,up,down}_proj
// and shared_expert_gate.weight [1, hidden].
class SparseMoeBlockImpl : public torch::nn::Module {
 public:
  SparseMoeBlockImpl(const ModelConfig& config, const c10::TensorOptions& options = {});
  // x [B, T, hidden] -> the same. token_mask [B * T] fp32 (1 real, 0 padding; undefined: all
  // real) weighs the routing statistics recorded into `record`'s slot `layer` (null: none).
  // `replicas`: the ranks that compute this same routing (tensor parallelism), over which the
  // auxiliary loss's gradient is summed, so each adds 1 / replicas of it.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& token_mask, const std::shared_ptr<RoutingRecord>& record,
                     std::int64_t layer, std::int64_t replicas);
  // Routed experts split over tensor parallelism as the dense MLP (their rows); the router and the
  // shared expert's gate whole, their gradients summed over tp (they scale partial outputs).
  TpSplit tp_split(const std::string& name) const;
  double saved_elements_per_token(int tp) const;
  // Expert parallelism: keeps only this rank's experts [rank E / size, (rank + 1) E / size) of
  // `exchange`, out of the module tree (the engine's expert component holds and reduces them, the
  // data-parallel engine the rest), and sends each routed row to its expert's rank. Returns the
  // kept experts' parameters under their global names ("experts.<e>.gate_proj.weight").
  std::vector<std::pair<std::string, at::Tensor>> place_experts(std::shared_ptr<const ExpertExchange> exchange);

  ExpertWeight gate{nullptr};
  torch::nn::ModuleList experts{nullptr};
  std::vector<std::shared_ptr<ExpertImpl>> expert_list;
  LlamaMLP shared_expert{nullptr};
  Linear shared_expert_gate{nullptr};

 private:
  // The k experts' weighted outputs of each row of flat [N, hidden]; chosen [N * k] the experts.
  // With a capacity, the (row, expert) pairs beyond it are left out; `dropped` counts them.
  // `meanwhile` runs once, after the experts, or while their outputs travel (expert parallelism).
  at::Tensor route_experts(const at::Tensor& flat, const at::Tensor& chosen, const at::Tensor& top_weights,
                           std::int64_t& dropped, const std::function<void()>& meanwhile);
  // The order of the N * k (row, expert) pairs that route_experts computes: by expert, then pair.
  // With a capacity, an expert's pairs beyond it (by weight, or by position) are left out;
  // sizes[e] counts what is kept.
  at::Tensor expert_order(std::int64_t rows, const at::Tensor& chosen, const at::Tensor& top_weights,
                          std::vector<std::int64_t>& sizes, std::int64_t& dropped) const;
  // The shared expert's gated output of flat (undefined when there is none).
  at::Tensor shared_output(const at::Tensor& flat);

  MoeShape moe_;
  std::int64_t hidden_;
  std::shared_ptr<const ExpertExchange> exchange_;  // expert parallelism; null: every expert here
};
TORCH_MODULE(SparseMoeBlock);

// The pre-norm block of the MoE families: Llama's (or Qwen3's) attention, then a sparse MLP
// (routing layers: "mlp", or "block_sparse_moe" with Mixtral's names) or a dense one ("mlp").
class MoeDecoderLayerImpl : public DecoderBlock {
 public:
  MoeDecoderLayerImpl(const ModelConfig& config, std::int64_t layer_index, const c10::TensorOptions& options,
                      std::shared_ptr<LlamaAttentionImpl> attention);
  at::Tensor forward(const at::Tensor& x, const AttentionInputs& in, ParallelOps& ops) override;
  TpSplit tp_split(const std::string& name) const override;
  double saved_elements_per_token(int tp, bool sequence_parallel) const override;

  RMSNorm input_layernorm{nullptr};
  LlamaAttention self_attn{nullptr};
  RMSNorm post_attention_layernorm{nullptr};
  LlamaMLP mlp{nullptr};        // dense layers
  SparseMoeBlock moe{nullptr};  // routing layers

 private:
  std::string moe_name_;
  std::int64_t layer_;
};

// A CausalLM of MoeDecoderLayers; qk_norm gives Qwen3's attention.
class MoeForCausalLMImpl : public CausalLM {
 public:
  explicit MoeForCausalLMImpl(const ModelConfig& config, const c10::TensorOptions& options = {});
};

// SparseMoeBlockImpl::place_experts on every MoE layer of `model`: this rank's experts, named as
// in the whole model ("model.layers.3.mlp.experts.5.gate_proj.weight"). The engine's expert
// component and the memory estimate (on a meta model) both place them through this.
std::vector<std::pair<std::string, at::Tensor>> place_model_experts(torch::nn::Module& model,
                                                                    const std::shared_ptr<const ExpertExchange>& exchange);

// Every parameter of `model` with its name, but of each MoE layer's experts (alike but for their
// index: shapes and tensor-parallel roles) the first expert's only: for checks that walk a model of
// thousands of experts many times (the planner's tensor-parallel check of each layout).
std::vector<std::pair<std::string, at::Tensor>> distinct_parameters(const torch::nn::Module& model);

// The parameters of one layer of a MoE family (families.h): every expert, and for a token the
// router and its k experts (and the shared expert).
LayerParameters moe_layer_parameters(const ModelConfig& c, std::int64_t layer);

}  // namespace lft::model
