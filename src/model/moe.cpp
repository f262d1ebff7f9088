// Mixtures of experts: router, grouped experts, shared expert, the MoE decoder layer.
#include "lft/model/moe.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "lft/model/fused.h"
#include "lft/model/grouped_experts.h"
#include "lft/model/qwen3.h"
#include "lft/runtime/host_transfer.h"

namespace lft::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// `name` without "<prefix>." when it starts with it, else "".
std::string inside(const std::string& name, const std::string& prefix) {
  return name.rfind(prefix + ".", 0) == 0 ? name.substr(prefix.size() + 1) : "";
}

struct RecordHolder : torch::CustomClassHolder {
  explicit RecordHolder(std::shared_ptr<RoutingRecord> r) : record(std::move(r)) {}
  std::shared_ptr<RoutingRecord> record;
};

// Identity on the layer's output; in backward, the auxiliary loss's gradient (the record's, set
// after the forward ended) flows into the layer's router probability sums.
struct AuxGradient : public torch::autograd::Function<AuxGradient> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& out, const at::Tensor& /*prob_sum: its gradient is the point*/,
                            c10::intrusive_ptr<RecordHolder> holder, double factor) {
    ctx->saved_data["record"] = c10::IValue::make_capsule(std::move(holder));
    ctx->saved_data["factor"] = factor;
    return out.view_as(out);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto holder = c10::static_intrusive_pointer_cast<RecordHolder>(ctx->saved_data["record"].toCapsule());
    const at::Tensor& g = holder->record->gradient;
    at::Tensor prob_grad;  // none where the forward had no token (finish_routing sets no gradient)
    if (g.defined()) prob_grad = g * ctx->saved_data["factor"].toDouble();
    return {grads[0], prob_grad, at::Tensor(), at::Tensor()};
  }
};

TpSplit rows_split(TpRole role, std::int64_t rows) {
  TpSplit s;
  s.role = role;
  s.groups = rows;
  s.group_size = 1;
  s.what = "expert MLP rows";
  return s;
}

}  // namespace

// ---- experts ----

ExpertWeightImpl::ExpertWeightImpl(std::int64_t in_features, std::int64_t out_features, const c10::TensorOptions& options) {
  weight = register_parameter("weight", at::zeros({out_features, in_features}, options));
}

ExpertImpl::ExpertImpl(const ModelConfig& config, const c10::TensorOptions& options) {
  const std::int64_t h = config.hidden_size, f = config.moe.expert_intermediate_size;
  const bool mixtral = config.moe.mixtral_names;
  gate_proj = register_module(mixtral ? "w1" : "gate_proj", ExpertWeight(h, f, options));
  up_proj = register_module(mixtral ? "w3" : "up_proj", ExpertWeight(h, f, options));
  down_proj = register_module(mixtral ? "w2" : "down_proj", ExpertWeight(f, h, options));
}

SparseMoeBlockImpl::SparseMoeBlockImpl(const ModelConfig& config, const c10::TensorOptions& options)
    : moe_(config.moe), hidden_(config.hidden_size) {
  gate = register_module("gate", ExpertWeight(config.hidden_size, moe_.num_experts, options));
  experts = register_module("experts", torch::nn::ModuleList());
  for (std::int64_t e = 0; e < moe_.num_experts; ++e) {
    expert_list.push_back(std::make_shared<ExpertImpl>(config, options));
    experts->push_back(expert_list.back());
  }
  if (moe_.shared_expert_intermediate_size > 0) {
    shared_expert = register_module("shared_expert", LlamaMLP(config, options, moe_.shared_expert_intermediate_size));
    shared_expert_gate = register_module("shared_expert_gate", Linear(config.hidden_size, 1, false, options));
  }
}

at::Tensor SparseMoeBlockImpl::forward(const at::Tensor& x, const at::Tensor& token_mask,
                                       const std::shared_ptr<RoutingRecord>& record, std::int64_t layer,
                                       std::int64_t replicas) {
  const std::int64_t k = moe_.experts_per_token, n_experts = moe_.num_experts;
  const at::Tensor flat = x.reshape({-1, hidden_});
  const at::Tensor router_logits = at::linear(flat, gate->weight);  // [N, E]
  const at::Tensor probs = at::softmax(router_logits, -1, at::kFloat);
  auto [top_weights, top_experts] = at::topk(probs, k, -1);
  if (moe_.normalize_top_k) top_weights = top_weights / top_weights.sum(-1, /*keepdim=*/true);
  if (moe_.weights_in_router_dtype) top_weights = top_weights.to(router_logits.scalar_type());

  const at::Tensor chosen = top_experts.reshape({-1});  // row t's k experts at t*k .. t*k+k-1
  std::int64_t dropped = 0;
  at::Tensor shared;
  at::Tensor routed = route_experts(flat, chosen, top_weights, dropped, [&] { shared = shared_output(flat); });
  if (record) {
    at::Tensor mask = token_mask.defined() ? token_mask.to(at::kFloat) : at::ones({flat.size(0)}, probs.options());
    at::Tensor counts = at::zeros({n_experts}, probs.options()).scatter_add_(0, chosen, mask.repeat_interleave(k));
    const at::Tensor prob_sum = (probs * mask.unsqueeze(1)).sum(0);
    const std::size_t slot = static_cast<std::size_t>(layer);
    record->counts[slot] = std::move(counts);
    record->prob_sums[slot] = prob_sum.detach();
    record->tokens[slot] = mask.sum();
    record->dropped[slot] = static_cast<double>(dropped);
    record->assignments[slot] = static_cast<double>(chosen.numel());
    if (prob_sum.requires_grad() && record->scale != 0)
      routed = AuxGradient::apply(routed, prob_sum, c10::make_intrusive<RecordHolder>(record),
                                  1.0 / static_cast<double>(replicas));
  }
  return (shared.defined() ? routed + shared : routed).view(x.sizes());
}

at::Tensor SparseMoeBlockImpl::expert_order(std::int64_t rows, const at::Tensor& chosen, const at::Tensor& top_weights,
                                            std::vector<std::int64_t>& sizes, std::int64_t& dropped) const {
  // Rows per expert, read on the host (the sizes of the experts' GEMMs). Counted without bincount,
  // which on a GPU reads its input's minimum and maximum on the host first: one wait, not three.
  const at::TensorOptions counts = chosen.options().dtype(at::kLong);
  const at::Tensor per_expert = host_read(
      at::zeros({moe_.num_experts}, counts).scatter_add_(0, chosen.reshape({-1}), at::ones({chosen.numel()}, counts)),
      "reading the rows routed to each expert");
  const std::int64_t* count = per_expert.data_ptr<std::int64_t>();
  sizes.assign(count, count + moe_.num_experts);
  dropped = 0;
  auto stable_order = [](const at::Tensor& keys, bool descending) {
    return std::get<1>(at::sort(keys, /*stable=*/true, /*dim=*/0, descending));
  };
  // Without a capacity (and with Megatron's "position" policy) by expert, then pair; with "probs",
  // an expert's pairs by weight, highest first (equal weights: the earlier pair), so that the
  // pairs it keeps are its first ones.
  at::Tensor order;
  if (moe_.capacity_factor > 0 && !moe_.drop_by_position) {
    const at::Tensor by_weight = stable_order(top_weights.reshape({-1}), true);
    order = by_weight.index_select(0, stable_order(chosen.index_select(0, by_weight), false));
  } else {
    order = stable_order(chosen, false);
  }
  if (moe_.capacity_factor <= 0) return order;
  const std::int64_t capacity = moe_.expert_capacity(rows);
  std::vector<std::int64_t> kept;
  std::int64_t first = 0;
  for (std::int64_t& n : sizes) {
    const std::int64_t take = std::min(n, capacity);
    for (std::int64_t i = 0; i < take; ++i) kept.push_back(first + i);
    first += n;
    dropped += n - take;
    n = take;
  }
  // What is kept in the dropless order (by expert, then pair): the same arithmetic as without a
  // capacity for the pairs kept.
  if (dropped == 0) return moe_.drop_by_position ? order : stable_order(chosen, false);
  const at::Tensor pairs = std::get<0>(
      at::sort(order.index_select(
          0, to_device(at::tensor(kept, at::TensorOptions().dtype(at::kLong)), order.device()))));
  return pairs.index_select(0, stable_order(chosen.index_select(0, pairs), false));
}

at::Tensor SparseMoeBlockImpl::route_experts(const at::Tensor& flat, const at::Tensor& chosen,
                                             const at::Tensor& top_weights, std::int64_t& dropped,
                                             const std::function<void()>& meanwhile) {
  // Tokens grouped by expert (a stable sort keeps each expert's rows in token order), each
  // expert's GEMMs over its contiguous rows in one autograd node (grouped_experts.h), then each
  // row scaled by its weight and added to its token, the k experts of a token in ascending order
  // as transformers adds them.
  const std::int64_t k = moe_.experts_per_token;
  std::vector<std::int64_t> sizes;
  const at::Tensor order = expert_order(flat.size(0), chosen, top_weights, sizes, dropped);
  const at::Tensor token_of = at::floor_divide(order, k);
  std::vector<at::Tensor> gate, up, down;
  for (const auto& ex : expert_list) {
    gate.push_back(ex->gate_proj->weight);
    up.push_back(ex->up_proj->weight);
    down.push_back(ex->down_proj->weight);
  }
  const at::Tensor rows = flat.index_select(0, token_of);
  at::Tensor out;
  if (exchange_) {
    out = experts_across_ranks(
        exchange_, rows, sizes,
        [&](const at::Tensor& local_rows, const std::vector<std::int64_t>& local_sizes) {
          return grouped_experts(local_rows, local_sizes, gate, up, down);
        },
        meanwhile);
  } else {
    out = grouped_experts(rows, sizes, gate, up, down);
    meanwhile();
  }
  const at::Tensor weights = top_weights.reshape({-1}).index_select(0, order);
  if (at::Tensor y = fused_combine_rows(out, weights, token_of, flat.size(0), flat.scalar_type()); y.defined()) return y;
  at::Tensor ys = out * weights.unsqueeze(1);
  return at::zeros_like(flat).index_add(0, token_of, ys.to(flat.scalar_type()));
}

std::vector<std::pair<std::string, at::Tensor>> SparseMoeBlockImpl::place_experts(
    std::shared_ptr<const ExpertExchange> exchange) {
  const std::int64_t ranks = exchange->size(), local = moe_.num_experts / ranks, first = exchange->rank() * local;
  if (local * ranks != moe_.num_experts || exchange_)
    throw std::logic_error("place_experts: " + std::to_string(moe_.num_experts) + " experts over " +
                           std::to_string(ranks) + " ranks (or placed twice)");
  std::vector<std::shared_ptr<ExpertImpl>> kept(expert_list.begin() + first, expert_list.begin() + first + local);
  std::vector<std::pair<std::string, at::Tensor>> params;
  for (std::int64_t i = 0; i < local; ++i)
    for (const auto& item : kept[static_cast<std::size_t>(i)]->named_parameters())
      params.emplace_back("experts." + std::to_string(first + i) + "." + item.key(), item.value());
  unregister_module("experts");
  experts = torch::nn::ModuleList(nullptr);
  expert_list = std::move(kept);
  exchange_ = std::move(exchange);
  return params;
}

at::Tensor SparseMoeBlockImpl::shared_output(const at::Tensor& flat) {
  return shared_expert ? at::sigmoid(shared_expert_gate(flat)) * shared_expert(flat) : at::Tensor();
}

TpSplit SparseMoeBlockImpl::tp_split(const std::string& name) const {
  if (const std::string rest = inside(name, "shared_expert"); !rest.empty()) return shared_expert->tp_split(rest);
  if (name == "gate.weight" || name.rfind("shared_expert_gate.", 0) == 0) {
    TpSplit s;
    s.role = TpRole::ReplicatedInsideTp;
    return s;
  }
  const std::int64_t f = moe_.expert_intermediate_size;
  const std::string leaf = name.substr(name.rfind('.', name.size() - std::string(".weight").size() - 1) + 1);
  if (leaf == "gate_proj.weight" || leaf == "up_proj.weight" || leaf == "w1.weight" || leaf == "w3.weight")
    return rows_split(TpRole::ColumnParallel, f);
  if (leaf == "down_proj.weight" || leaf == "w2.weight") return rows_split(TpRole::RowParallel, f);
  return {};
}

double SparseMoeBlockImpl::saved_elements_per_token(int tp) const {
  const double e = static_cast<double>(moe_.num_experts), k = static_cast<double>(moe_.experts_per_token),
               h = static_cast<double>(hidden_), f = static_cast<double>((moe_.expert_intermediate_size + tp - 1) / tp);
  // Router logits and probabilities; per routed row its gathered input, gate, up, their product
  // (and activation), the expert's output and its weighted copy; the shared expert's.
  double saved = 2 * e + k * (3 * h + 4 * f);
  if (shared_expert) saved += shared_expert->saved_elements_per_token(tp) + 2 * h;
  return saved;
}

// ---- decoder layer ----

MoeDecoderLayerImpl::MoeDecoderLayerImpl(const ModelConfig& config, std::int64_t layer_index,
                                         const c10::TensorOptions& options,
                                         std::shared_ptr<LlamaAttentionImpl> attention)
    : moe_name_(config.moe.mixtral_names ? "block_sparse_moe" : "mlp"), layer_(layer_index) {
  input_layernorm = register_module("input_layernorm", RMSNorm(config.hidden_size, config, options));
  self_attn = register_module("self_attn", LlamaAttention(std::move(attention)));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(config.hidden_size, config, options));
  if (config.moe.routes(layer_index))
    moe = register_module(moe_name_, SparseMoeBlock(config, options));
  else
    mlp = register_module("mlp", LlamaMLP(config, options));
}

at::Tensor MoeDecoderLayerImpl::forward(const at::Tensor& x, const AttentionInputs& in, ParallelOps& ops) {
  const at::Tensor h = x + ops.exit(self_attn(ops.enter(input_layernorm(x)), in.cos, in.sin, in.mask, in.cp));
  const at::Tensor normed = ops.enter(post_attention_layernorm(h));
  if (!moe) return h + ops.exit(mlp(normed));
  return h + ops.exit(moe->forward(normed, in.token_mask, in.routing, layer_, ops.region_replicas()));
}

TpSplit MoeDecoderLayerImpl::tp_split(const std::string& name) const {
  if (const std::string rest = inside(name, "self_attn"); !rest.empty()) return self_attn->tp_split(rest);
  if (moe) {
    if (const std::string rest = inside(name, moe_name_); !rest.empty()) return moe->tp_split(rest);
  } else if (const std::string rest = inside(name, "mlp"); !rest.empty()) {
    return mlp->tp_split(rest);
  }
  return {};  // the norms
}

double MoeDecoderLayerImpl::saved_elements_per_token(int tp, bool sequence_parallel) const {
  const double hidden = static_cast<double>(input_layernorm->weight.size(0));
  const double stream = sequence_parallel ? hidden / tp : hidden;
  return 6 * stream + (sequence_parallel ? 2 * hidden : 0.0) + self_attn->saved_elements_per_token(tp) +
         (moe ? moe->saved_elements_per_token(tp) : mlp->saved_elements_per_token(tp));
}

MoeForCausalLMImpl::MoeForCausalLMImpl(const ModelConfig& config, const c10::TensorOptions& options)
    : CausalLM(config, options, [&config, &options](std::int64_t layer) -> std::shared_ptr<DecoderBlock> {
        std::shared_ptr<LlamaAttentionImpl> attention =
            config.qk_norm ? std::make_shared<Qwen3AttentionImpl>(config, layer, options)
                           : std::make_shared<LlamaAttentionImpl>(config, layer, options);
        return std::make_shared<MoeDecoderLayerImpl>(config, layer, options, attention);
      }) {}

std::vector<std::pair<std::string, at::Tensor>> place_model_experts(torch::nn::Module& model,
                                                                    const std::shared_ptr<const ExpertExchange>& exchange) {
  std::vector<std::pair<std::string, at::Tensor>> placed;
  for (const auto& item : model.named_modules()) {
    auto* block = dynamic_cast<SparseMoeBlockImpl*>(item.value().get());
    if (block == nullptr) continue;
    for (auto& [name, tensor] : block->place_experts(exchange)) placed.emplace_back(item.key() + "." + name, tensor);
  }
  return placed;
}

namespace {

void add_distinct(const torch::nn::Module& module, const std::string& prefix,
                  std::vector<std::pair<std::string, at::Tensor>>& out) {
  for (const auto& p : module.named_parameters(/*recurse=*/false)) out.emplace_back(prefix + p.key(), p.value());
  const bool experts = dynamic_cast<const SparseMoeBlockImpl*>(&module) != nullptr;
  for (const auto& child : module.named_children()) {
    if (experts && child.key() == "experts") {
      const auto list = child.value()->children();
      if (!list.empty()) add_distinct(*list.front(), prefix + "experts.0.", out);
      continue;
    }
    add_distinct(*child.value(), prefix + child.key() + ".", out);
  }
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> distinct_parameters(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  add_distinct(model, "", out);
  return out;
}

LayerParameters moe_layer_parameters(const ModelConfig& c, std::int64_t layer) {
  LayerParameters p = llama_layer_parameters(c, layer);  // attention, norms and a dense MLP
  if (!c.moe.routes(layer)) return p;
  // The dense MLP's weights (and biases) out; the router, the experts (no biases) and the shared
  // expert (a dense MLP of its own width, biases as mlp_bias says, and its [1, hidden] gate) in.
  const std::int64_t h = c.hidden_size, dense_mlp = 3 * h * c.intermediate_size;
  const std::int64_t dense_bias = c.mlp_bias ? 2 * c.intermediate_size + h : 0;
  const std::int64_t expert = 3 * h * c.moe.expert_intermediate_size, router = c.moe.num_experts * h;
  const std::int64_t width = c.moe.shared_expert_intermediate_size;
  const std::int64_t shared = width > 0 ? 3 * h * width + h : 0, shared_bias = width > 0 && c.mlp_bias ? 2 * width + h : 0;
  p.all += router + c.moe.num_experts * expert + shared + shared_bias - dense_mlp - dense_bias;
  p.token_matmul += router + c.moe.experts_per_token * expert + shared - dense_mlp;
  return p;
}

}  // namespace lft::model
