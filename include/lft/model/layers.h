// The layers every Llama-style family is built from: Linear, Embedding, RMSNorm and rotary
// position embeddings, with transformers' numerics (hf-formats notes, section 3).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "lft/model/model_config.h"

namespace lft::model {

struct Float8Sharding;  // float8.h
struct Quantized4bit;   // quantize_4bit.h

// Every constructor below creates its parameters with `options` (device, dtype; default CPU
// float32): weights are zero-filled (norm weights one) until init_weights() or a checkpoint load
// gives them values; inside an UnallocatedParameters scope they get no memory.

// y = x W^T (+ b). Parameters: "weight" [out, in], and "bias" [out] when `bias`. A small holder
// rather than torch::nn::Linear, so construction does no random init. With a LoRA adapter
// (add_lora) it adds scaling * B(A(dropout(x))), as PEFT's lora.Linear: submodules "lora_A"
// (weight [r, in]) and "lora_B" (weight [out, r]), so the names are PEFT's saved ones. With DoRA
// (`dora`) also the parameter "lora_magnitude_vector" [out] (PEFT's saved name) m, and the output
// is PEFT's DoRA: with n = ||W + scaling BA|| per output row, detached (the paper's section 4.3),
//   y = Wx + b + (m/n - 1) W x' + (m/n) scaling B(A(x')),  x' = dropout(x) (x: no second GEMM).
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(std::int64_t in_features, std::int64_t out_features, bool bias,
             const c10::TensorOptions& options = {});
  at::Tensor forward(const at::Tensor& x);
  // `dropout_id` tells this adapter's dropout mask apart from the others' (a hash of its name).
  void add_lora(std::int64_t rank, double scaling, double dropout, std::uint64_t dropout_id,
                const c10::TensorOptions& options = {}, bool dora = false);
  bool has_lora() const { return lora_A != nullptr; }

  std::int64_t in_features;
  std::int64_t out_features;
  at::Tensor weight;
  at::Tensor bias;  // undefined without bias
  std::shared_ptr<LinearImpl> lora_A, lora_B;
  at::Tensor lora_magnitude_vector;  // DoRA's m; undefined without DoRA
  double lora_scaling = 0.0, lora_dropout = 0.0;
  bool float8 = false;  // x W^T in float8 (float8.h); the adapters stay in the compute dtype
  // Set by an engine that gathers the weight in float8: its e4m3 data and inverse scale, used
  // instead of casting `weight` (which then holds no memory).
  at::Tensor float8_weight, float8_weight_inv_scale;
  // Set by an engine that splits the weight over a tensor-parallel group (float8.h).
  std::shared_ptr<Float8Sharding> float8_sharding;
  // A frozen 4-bit base (QLoRA): `weight` is then no parameter (and undefined); the forward
  // dequantizes it into the input's dtype, as bitsandbytes' Linear4bit, and its backward again
  // (quantized_base.h). Set by use_quantized_weight().
  std::shared_ptr<const Quantized4bit> quantized;
  void use_quantized_weight(std::shared_ptr<const Quantized4bit> q);
  // The base weight in `dtype`: `weight`, or the 4-bit one dequantized.
  at::Tensor base_weight(c10::ScalarType dtype) const;

 private:
  at::Tensor dora_delta(const at::Tensor& x, const at::Tensor& base_output) const;
  std::uint64_t dropout_id_ = 0;
};
TORCH_MODULE(Linear);

// Token embedding. Parameter "weight" [num_embeddings, dim].
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(std::int64_t num_embeddings, std::int64_t dim,
                const c10::TensorOptions& options = {});
  at::Tensor forward(const at::Tensor& ids);

  at::Tensor weight;
};
TORCH_MODULE(Embedding);

// HF LlamaRMSNorm: x32 = x.float(); y = x32 * rsqrt(mean(x32^2, -1) + eps); weight * y.to(x's
// dtype). With unit_offset (HF Gemma2RMSNorm): (y * (1 + weight.float())).to(x's dtype), the
// weight created as zeros. Parameter "weight" [dim].
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(std::int64_t dim, double eps, const c10::TensorOptions& options = {}, bool unit_offset = false);
  // A norm of the model's kind: config.rms_norm_eps and config.unit_offset_norms.
  RMSNormImpl(std::int64_t dim, const ModelConfig& config, const c10::TensorOptions& options = {})
      : RMSNormImpl(dim, config.rms_norm_eps, options, config.unit_offset_norms) {}
  at::Tensor forward(const at::Tensor& x);

  double eps;
  bool unit_offset;
  at::Tensor weight;
};
TORCH_MODULE(RMSNorm);

// A dropout keep mask (fp32 1 = kept, with probability `keep`) of `sizes` on `device`, drawn from
// `seed`: the same seed gives the same mask.
at::Tensor dropout_keep_mask(at::IntArrayRef sizes, double keep, std::uint64_t seed, const at::Device& device);

// The seed of LoRA dropout masks for the forward running on this thread: a decoder layer's
// forward (and its recomputation) runs inside a scope holding the seed its micro-batch drew, so a
// recomputed forward draws the same masks. Outside any scope (or seed 0) LoRA has no dropout.
class DropoutSeedScope {
 public:
  explicit DropoutSeedScope(std::uint64_t seed);
  ~DropoutSeedScope();
  DropoutSeedScope(const DropoutSeedScope&) = delete;
  DropoutSeedScope& operator=(const DropoutSeedScope&) = delete;
  static std::uint64_t current();

 private:
  std::uint64_t previous_;
};

// While one is alive on this thread, LoRA linears compute their base layer only (PEFT's
// disable_adapter): the reference model of preference training with LoRA.
class AdaptersOffScope {
 public:
  AdaptersOffScope();
  ~AdaptersOffScope();
  AdaptersOffScope(const AdaptersOffScope&) = delete;
  AdaptersOffScope& operator=(const AdaptersOffScope&) = delete;
  static bool active();

 private:
  bool previous_;
};

// Rotary position embedding in HF's rotate-half convention (dimension i pairs with i + d/2).
class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(const ModelConfig& config);
  // inv_freq[i] = 1 / theta^(2i/d), i < d/2, fp32 on the CPU, with the config's rope scaling
  // (linear, llama3) applied.
  const at::Tensor& inv_freq() const { return inv_freq_; }
  // cos, sin of shape [seq_len, head_dim] for positions 0..seq_len-1, computed in fp32 and cast
  // to `options`' dtype on `options`' device. The last table is cached (per device and dtype) and
  // narrowed for shorter sequences: each row depends only on its position, so this is exact.
  // Not thread-safe (one model per thread).
  std::pair<at::Tensor, at::Tensor> cos_sin(std::int64_t seq_len,
                                            const c10::TensorOptions& options) const;

 private:
  at::Tensor inv_freq_;
  mutable at::Tensor cos_cache_, sin_cache_;
};

// rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2]).
at::Tensor rotate_half(const at::Tensor& x);
// x * cos + rotate_half(x) * sin; x [B, heads, T, d], cos/sin [T, d].
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// x [b, t, heads, d] (a projection's output viewed per head) rotated, as [b, heads, t, d]: the
// fused kernel where it applies (model/fused.h), else apply_rotary on the transposed view.
at::Tensor rotary_bthd(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace lft::model
