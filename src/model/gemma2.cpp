// Gemma2: the block with four norms, the model, and the family spec.
#include "lft/model/gemma2.h"

#include <memory>
#include <string>
#include <vector>

#include "lft/model/gemma.h"

namespace lft::model {

Gemma2DecoderLayerImpl::Gemma2DecoderLayerImpl(const ModelConfig& config, std::int64_t layer_index,
                                               const c10::TensorOptions& options)
    : LlamaDecoderLayerImpl(config, layer_index, options) {
  pre_feedforward_layernorm = register_module("pre_feedforward_layernorm", RMSNorm(config.hidden_size, config, options));
  post_feedforward_layernorm =
      register_module("post_feedforward_layernorm", RMSNorm(config.hidden_size, config, options));
}

at::Tensor Gemma2DecoderLayerImpl::forward(const at::Tensor& x, const AttentionInputs& in, ParallelOps& ops) {
  const at::Tensor h =
      x + post_attention_layernorm(ops.exit(self_attn(ops.enter(input_layernorm(x)), in.cos, in.sin, in.mask, in.cp)));
  return h + post_feedforward_layernorm(ops.exit(mlp(ops.enter(pre_feedforward_layernorm(h)))));
}

double Gemma2DecoderLayerImpl::saved_elements_per_token(int tp, bool sequence_parallel) const {
  const double hidden = static_cast<double>(input_layernorm->weight.size(0));
  return LlamaDecoderLayerImpl::saved_elements_per_token(tp, sequence_parallel) +
         4 * (sequence_parallel ? hidden / tp : hidden);
}

Gemma2ForCausalLMImpl::Gemma2ForCausalLMImpl(const ModelConfig& config, const c10::TensorOptions& options)
    : CausalLM(config, options, [&config, &options](std::int64_t layer) -> std::shared_ptr<DecoderBlock> {
        return std::make_shared<Gemma2DecoderLayerImpl>(config, layer, options);
      }) {}

namespace {

constexpr const char* kSliding = "sliding_attention";
constexpr const char* kFull = "full_attention";

// A field whose transformers default is a number and whose null means "none" (0 here).
double real_or_none(const HfConfigReader& r, const std::string& key, double fallback) {
  return r.is_null(key) ? 0.0 : r.real(key, fallback);
}

void read_gemma2(const HfConfigReader& r, ModelConfig& c) {
  read_gemma_common(r, c, "hidden_activation");
  c.query_pre_attn_scalar = r.real("query_pre_attn_scalar", 256);
  c.attn_logit_softcapping = real_or_none(r, "attn_logit_softcapping", 50.0);
  c.final_logit_softcapping = real_or_none(r, "final_logit_softcapping", 30.0);
  c.sliding_window = r.is_null("sliding_window") ? 0 : r.integer("sliding_window", 4096);
  c.sliding_layers.clear();
  if (const nlohmann::json* types = r.find("layer_types")) {
    if (!types->is_array()) config_field_error(r.file, "layer_types", "expected a list, got " + json_type_name(*types));
    for (const nlohmann::json& t : *types) {
      if (!t.is_string() || (t != kSliding && t != kFull))
        config_field_error(r.file, "layer_types", "entries are \"sliding_attention\" or \"full_attention\", got " + t.dump());
      c.sliding_layers.push_back(t == kSliding);
    }
  } else {
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) c.sliding_layers.push_back(i % 2 == 0);
  }
  c.norms_per_layer = 4;
}

void write_gemma2(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["hidden_activation"] = c.hidden_activation;
  j["attention_bias"] = c.attention_bias;
  j["query_pre_attn_scalar"] = c.query_pre_attn_scalar;
  auto cap = [](double v) { return v > 0 ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr); };
  j["attn_logit_softcapping"] = cap(c.attn_logit_softcapping);
  j["final_logit_softcapping"] = cap(c.final_logit_softcapping);
  // No window (0): one as long as the model's positions, which changes nothing.
  j["sliding_window"] = c.sliding_window > 0 ? c.sliding_window : c.max_position_embeddings;
  std::vector<std::string> types;
  for (const bool sliding : c.sliding_layers) types.emplace_back(sliding ? kSliding : kFull);
  j["layer_types"] = types;
}

}  // namespace

FamilySpec gemma2_family() {
  // LlamaFactory's gemma2 template is not in this build (chat_template.cpp): no template here.
  return {"gemma2", "Gemma2ForCausalLM", 8192, read_gemma2, write_gemma2, create_model<Gemma2ForCausalLMImpl>, ""};
}

}  // namespace lft::model
