// The shape of a decoder model (Llama, Qwen2, Qwen3, Mistral, Gemma, Gemma2), with the Hugging
// Face config.json field names; the fields of a family's own are set by its FamilySpec
// (families.h). Built from the run configuration: an inline [model] table (training from
// scratch) or <model_name_or_path>/config.json (fine-tuning). Pure: every rank reads the same
// file and reaches the same verdict, so a bad field is a lft::config::ConfigError (an every-rank
// error).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lft::config {
class Config;
}

namespace lft::model {

// A mixture of experts' shape (Qwen3-MoE, Qwen2-MoE, Mixtral): which layers route, how many
// experts a token reaches, the auxiliary load-balancing loss. num_experts 0: a dense model.
struct MoeShape {
  std::int64_t num_experts = 0;               // routed experts per MoE layer
  std::int64_t experts_per_token = 0;         // top-k (num_experts_per_tok)
  std::int64_t expert_intermediate_size = 0;  // each routed expert's MLP width
  bool normalize_top_k = false;               // renormalise the k weights to sum to 1
  // Layer l routes iff l is not in dense_layers and (l + 1) % sparse_step == 0 (transformers).
  std::int64_t sparse_step = 1;
  std::vector<std::int64_t> dense_layers;  // mlp_only_layers
  // A shared expert of this width beside the routed ones, its output scaled by
  // sigmoid(shared_expert_gate(x)) (Qwen2-MoE); 0: none.
  std::int64_t shared_expert_intermediate_size = 0;
  // The router's top-k weights cast back to the router's dtype (Qwen) or kept fp32 (Mixtral).
  bool weights_in_router_dtype = true;
  // The auxiliary load-balancing loss (transformers' load_balancing_loss_func), added times
  // router_aux_loss_coef when output_router_logits.
  double router_aux_loss_coef = 0.001;
  bool output_router_logits = false;
  // Megatron's moe_expert_capacity_factor: an expert takes at most ceil(rows * k / E * factor) of
  // the rows a layer routes in one forward, the others dropped (moe_token_drop_policy: its
  // highest weights, or with drop_by_position its first rows); 0: dropless.
  double capacity_factor = 0.0;
  bool drop_by_position = false;
  // Parameter names: "mlp" with experts.E.{gate,up,down}_proj (Qwen), or "block_sparse_moe" with
  // experts.E.{w1,w3,w2} (Mixtral's Hub names).
  bool mixtral_names = false;

  bool any() const { return num_experts > 0; }
  bool routes(std::int64_t layer) const;
  bool aux_loss() const { return any() && output_router_logits && router_aux_loss_coef != 0; }
  // The most rows an expert takes of `rows` routed in a forward (rows * k without a capacity).
  std::int64_t expert_capacity(std::int64_t rows) const;
};

// The head of a reward model: TRL's AutoModelForCausalLMWithValueHead's `v_head.summary` (with a
// bias, beside the causal LM's lm_head; LlamaFactory's classic stage rm), or transformers'
// ...ForTokenClassification's `score` (one label, with a bias, no lm_head; LlamaFactory main's v1
// `model_class: cls`). None: a causal language model.
enum class ScoreHead { None, ValueHead, TokenClassification };

struct ModelConfig {
  std::string model_type = "llama";  // a family of families.h
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t max_position_embeddings = 2048;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;

  // Biases (HF: Llama's `attention_bias` gives q/k/v AND o_proj biases; Qwen2 always has q/k/v
  // biases and no o_proj bias; Mistral none; Llama's `mlp_bias` gives gate/up/down biases).
  bool attention_bias = false;      // q_proj, k_proj, v_proj
  bool attention_out_bias = false;  // o_proj
  bool mlp_bias = false;            // gate_proj, up_proj, down_proj
  // Qwen3: RMSNorm over each head's q and k (q_norm, k_norm [head_dim]) before RoPE.
  bool qk_norm = false;

  // config.json `head_dim` when it is given and differs from hidden_size / num_attention_heads
  // (e.g. Mistral-Nemo); 0: hidden_size / num_attention_heads. Use head_dim().
  std::int64_t explicit_head_dim = 0;

  // RoPE frequency scaling (`rope_parameters` / legacy `rope_scaling`): "default", "linear" or
  // "llama3" (Llama 3.1/3.2). The other HF kinds (dynamic, yarn, longrope) are rejected.
  std::string rope_type = "default";
  double rope_factor = 1.0;                                // linear, llama3
  double rope_low_freq_factor = 1.0;                       // llama3
  double rope_high_freq_factor = 4.0;                      // llama3
  std::int64_t rope_original_max_position_embeddings = 0;  // llama3; 0: max_position_embeddings

  // Sliding-window attention: a query sees itself and the sliding_window - 1 keys before it, in
  // layers with index >= sliding_window_first_layer. 0: full causal attention everywhere.
  // Mistral: `sliding_window` (null: off) for every layer. Qwen2: only with `use_sliding_window`,
  // from layer `max_window_layers` on.
  std::int64_t sliding_window = 0;
  std::int64_t sliding_window_first_layer = 0;
  // Gemma2's `layer_types`: true where a layer is "sliding_attention". Non-empty: it decides which
  // layers use the window (sliding_window_first_layer unused).
  std::vector<bool> sliding_layers;

  // The MLP's activation on gate_proj: "silu" (Llama) or "gelu_pytorch_tanh" (Gemma).
  std::string hidden_activation = "silu";
  // Attention scores are scaled by 1/sqrt(query_pre_attn_scalar) (Gemma2); 0: 1/sqrt(head_dim).
  double query_pre_attn_scalar = 0;
  // Soft-capping cap * tanh(x / cap) of the attention scores and of the final logits (Gemma2);
  // 0: none.
  double attn_logit_softcapping = 0;
  double final_logit_softcapping = 0;
  // The token embedding's output is multiplied by this (Gemma: sqrt(hidden_size), rounded to the
  // compute dtype as transformers does).
  double embedding_multiplier = 1.0;
  // RMSNorms scale by (1 + weight) in fp32 and their weights start at 0 (Gemma).
  bool unit_offset_norms = false;
  // RMSNorms per decoder layer: 2 (Llama), 4 (Gemma2's pre/post feed-forward norms beside them).
  std::int64_t norms_per_layer = 2;

  // Mixture of experts (num_experts 0: every layer's MLP dense).
  MoeShape moe;

  // A reward model (stage = "rm"): the head unit scores each position from the final normed hidden
  // state instead of predicting the next token (score_head.h). Set by the run plan, not config.json.
  ScoreHead score_head = ScoreHead::None;
  // TRL's ValueHead dropout on its input while training (config.json `summary_dropout_prob`, TRL's
  // 0.1 when absent; 0: none).
  double summary_dropout_prob = 0.1;

  // config.json `dtype` (or legacy `torch_dtype`), e.g. "bfloat16"; empty when not given. Kept
  // for export; the trainer chooses its own compute dtype.
  std::string dtype;

  std::int64_t head_dim() const {
    return explicit_head_dim > 0 ? explicit_head_dim : hidden_size / num_attention_heads;
  }
  bool uses_sliding_window(std::int64_t layer) const {
    if (!sliding_layers.empty())
      return sliding_window > 0 && layer < static_cast<std::int64_t>(sliding_layers.size()) &&
             sliding_layers[static_cast<std::size_t>(layer)];
    return sliding_window > 0 && layer >= sliding_window_first_layer;
  }
  // A norm weight's initial value (the identity scale).
  double initial_norm_weight() const { return unit_offset_norms ? 0.0 : 1.0; }

  // From the run configuration: the [model] table when cfg.has_table("model") (a Llama without
  // biases; model.num_key_value_heads unset means num_attention_heads), otherwise
  // <model_name_or_path>/config.json. Throws lft::config::ConfigError.
  static ModelConfig from_run_config(const lft::config::Config& cfg);
  // From the text of a Hugging Face config.json; file_name is used in error messages. Accepts
  // the model_types of families(). Throws lft::config::ConfigError naming the file and the
  // field for a missing or wrong field or an unsupported model type / RoPE scaling.
  static ModelConfig from_hf_json(const std::string& json_text, const std::string& file_name);
  // Reads <folder>/config.json (POSIX path; no std::filesystem).
  static ModelConfig from_hf_folder(const std::string& folder);

  // Checks the invariants (positive sizes, heads divide, ...). Throws ConfigError prefixed with
  // `where` (a file name or "[model]").
  void validate(const std::string& where) const;

  // A config.json a Hugging Face `AutoModelForCausalLM.from_pretrained` reads back (export).
  std::string to_hf_json() const;

  // Every parameter (embed_tokens and lm_head counted once each; lm_head only when untied).
  std::int64_t num_parameters() const;
  // Without model.embed_tokens and lm_head.
  std::int64_t num_non_embedding_parameters() const;
  // The decoder layers' matmul weights one token goes through (the family's count; the head's
  // vocab x hidden apart; a mixture of experts' router and the k experts a token reaches, not the
  // others): the model FLOPs of a token are 6 x these in training.
  std::int64_t token_matmul_parameters() const;
  // The parameters one token goes through (a dense model: all of them).
  std::int64_t num_active_parameters() const;
  // "llama 4 layers, hidden 128, 4 heads (2 kv), ffn 352, vocab 259: 0.95 M parameters"
  std::string summary() const;
};

}  // namespace lft::model
