// Linear, Embedding, RMSNorm and rotary position embeddings.
#include "lft/model/layers.h"

#include <algorithm>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include "lft/build_config.h"
#if LFT_HAS_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

#include "lft/model/float8.h"
#include "lft/model/fused.h"
#include "lft/model/init.h"
#include "lft/model/parameter_storage.h"
#include "lft/model/quantize_4bit.h"
#include "lft/model/quantized_base.h"

namespace lft::model {

namespace {

constexpr double kPi = 3.141592653589793;  // Python's math.pi

c10::TensorOptions param_options(const c10::TensorOptions& options) {
  return options.dtype(options.dtype_opt().value_or(caffe2::TypeMeta::Make<float>()))
      .requires_grad(false);
}

// Filled with `value`, or without memory inside an UnallocatedParameters scope.
at::Tensor new_parameter(const std::vector<std::int64_t>& shape, const c10::TensorOptions& options,
                         double value) {
  if (UnallocatedParameters::active()) return unallocated_tensor(shape, param_options(options));
  return at::full(shape, value, param_options(options));
}

}  // namespace

// On the CPU from a CPU generator; on a GPU from a CUDA generator of the same seed, on the device
// (no mask drawn on the host and copied over, which would block the host every layer).
at::Tensor dropout_keep_mask(at::IntArrayRef sizes, double keep, std::uint64_t seed, const at::Device& device) {
#if LFT_HAS_CUDA
  if (device.is_cuda()) {
    at::Generator gen = at::cuda::detail::createCUDAGenerator(device.index());
    gen.set_current_seed(seed);
    return at::empty(sizes, at::TensorOptions().dtype(at::kFloat).device(device)).bernoulli_(keep, gen);
  }
#endif
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::bernoulli(at::full(sizes, keep, at::kFloat), gen).to(device);
}

// ---- Linear, Embedding, RMSNorm ----

LinearImpl::LinearImpl(std::int64_t in, std::int64_t out, bool with_bias,
                       const c10::TensorOptions& options)
    : in_features(in), out_features(out) {
  weight = register_parameter("weight", new_parameter({out, in}, options, 0.0));
  if (with_bias) bias = register_parameter("bias", new_parameter({out}, options, 0.0));
}

at::Tensor LinearImpl::forward(const at::Tensor& x) {
  at::Tensor y = quantized ? quantized_linear(x, quantized, bias)
                 : !float8 ? at::linear(x, weight, bias)
                           : float8_linear(x, weight, bias, Float8Tensor{float8_weight, float8_weight_inv_scale},
                                           float8_sharding.get());
  if (!lora_A || AdaptersOffScope::active()) return y;
  at::Tensor in = x;
  const std::uint64_t seed = DropoutSeedScope::current();
  const bool dropped = lora_dropout > 0 && seed != 0 && at::GradMode::is_enabled();
  if (dropped) {
    // Drawn from a generator of (the scope's seed, this adapter): the same mask when the layer is
    // recomputed, and on every tensor-parallel rank of the same input.
    const at::Tensor keep = dropout_keep_mask(x.sizes(), 1.0 - lora_dropout, mix_seed(seed, dropout_id_), x.device());
    in = x * (keep / (1.0 - lora_dropout)).to(x.options());
  }
  if (lora_magnitude_vector.defined()) return y + dora_delta(in, dropped ? at::Tensor() : y);
  return y + at::linear(at::linear(in, lora_A->weight), lora_B->weight) * lora_scaling;
}

// PEFT's DoraLinearLayer.forward, in its order of operations, for the adapter's input x:
// `base_output` is Wx + b when that is the layer's input, else (undefined: dropout drew x) W x is
// computed here.
at::Tensor LinearImpl::dora_delta(const at::Tensor& x, const at::Tensor& base_output) const {
  const at::Tensor w = base_weight(x.scalar_type());
  // B A as PEFT forms it (B(A(I)))^T, then the row norms of W + scaling BA without a gradient.
  const at::Tensor eye = at::eye(lora_A->weight.size(1), lora_A->weight.options());
  const at::Tensor ba = at::linear(at::linear(eye, lora_A->weight), lora_B->weight).t().to(x.scalar_type());
  const at::Tensor norm = at::linalg_vector_norm(w + lora_scaling * ba.detach(), 2, {1}).to(w.scalar_type()).detach();
  const at::Tensor scale = (lora_magnitude_vector / norm).view({1, -1});
  const at::Tensor adapter = at::linear(at::linear(x, lora_A->weight), lora_B->weight);
  const at::Tensor base = base_output.defined() ? (bias.defined() ? base_output - bias : base_output) : at::linear(x, w);
  return (scale - 1) * base + scale * adapter * lora_scaling;
}

void LinearImpl::use_quantized_weight(std::shared_ptr<const Quantized4bit> q) {
  quantized = std::move(q);
  parameters_.erase("weight");
  weight = at::Tensor();
}

at::Tensor LinearImpl::base_weight(c10::ScalarType dtype) const {
  return quantized ? dequantize_4bit(*quantized, dtype) : weight.to(dtype);
}

void LinearImpl::add_lora(std::int64_t rank, double scaling, double dropout, std::uint64_t dropout_id,
                          const c10::TensorOptions& options, bool dora) {
  lora_A = register_module("lora_A", std::make_shared<LinearImpl>(in_features, rank, false, options));
  lora_B = register_module("lora_B", std::make_shared<LinearImpl>(rank, out_features, false, options));
  if (dora) lora_magnitude_vector = register_parameter("lora_magnitude_vector", new_parameter({out_features}, options, 1.0));
  lora_scaling = scaling;
  lora_dropout = dropout;
  dropout_id_ = dropout_id;
}

namespace {
thread_local std::uint64_t dropout_seed = 0;
}  // namespace

DropoutSeedScope::DropoutSeedScope(std::uint64_t seed) : previous_(dropout_seed) { dropout_seed = seed; }
DropoutSeedScope::~DropoutSeedScope() { dropout_seed = previous_; }
std::uint64_t DropoutSeedScope::current() { return dropout_seed; }

namespace {
thread_local bool adapters_off = false;
}  // namespace

AdaptersOffScope::AdaptersOffScope() : previous_(adapters_off) { adapters_off = true; }
AdaptersOffScope::~AdaptersOffScope() { adapters_off = previous_; }
bool AdaptersOffScope::active() { return adapters_off; }

EmbeddingImpl::EmbeddingImpl(std::int64_t num_embeddings, std::int64_t dim,
                             const c10::TensorOptions& options) {
  weight = register_parameter("weight", new_parameter({num_embeddings, dim}, options, 0.0));
}

at::Tensor EmbeddingImpl::forward(const at::Tensor& ids) { return at::embedding(weight, ids); }

RMSNormImpl::RMSNormImpl(std::int64_t dim, double epsilon, const c10::TensorOptions& options, bool offset)
    : eps(epsilon), unit_offset(offset) {
  weight = register_parameter("weight", new_parameter({dim}, options, offset ? 0.0 : 1.0));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  if (!unit_offset)
    if (at::Tensor y = fused_rms_norm(x, weight, eps); y.defined()) return y;
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor variance = x32.pow(2).mean(-1, /*keepdim=*/true);
  const at::Tensor y = x32 * at::rsqrt(variance + eps);
  if (unit_offset) return (y * (weight.to(at::kFloat) + 1.0)).to(x.scalar_type());
  return weight * y.to(x.scalar_type());
}

// ---- RoPE ----

RotaryEmbedding::RotaryEmbedding(const ModelConfig& config) {
  // Written with the same tensor operations, in the same order, as transformers'
  // _compute_default_rope_parameters / _compute_llama3_parameters, so the fp32 values agree bit
  // for bit (Python's `1.0 / t` is reciprocal(t) * 1.0).
  const std::int64_t dim = config.head_dim();
  const at::Tensor exponent =
      at::arange(0, dim, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat) /
      static_cast<double>(dim);
  at::Tensor inv = at::reciprocal(at::pow(config.rope_theta, exponent)) * 1.0;
  if (config.rope_type == "linear") {
    inv = inv / config.rope_factor;
  } else if (config.rope_type == "llama3") {
    const double factor = config.rope_factor, low = config.rope_low_freq_factor,
                 high = config.rope_high_freq_factor;
    const double old_len = static_cast<double>(config.rope_original_max_position_embeddings > 0
                                                   ? config.rope_original_max_position_embeddings
                                                   : config.max_position_embeddings);
    const double low_freq_wavelen = old_len / low, high_freq_wavelen = old_len / high;
    const at::Tensor wavelen = at::reciprocal(inv) * (2.0 * kPi);
    at::Tensor inv_llama = at::where(wavelen > low_freq_wavelen, inv / factor, inv);
    const at::Tensor smooth = (at::reciprocal(wavelen) * old_len - low) / (high - low);
    const at::Tensor smoothed = (1.0 - smooth) * inv_llama / factor + smooth * inv_llama;
    const at::Tensor medium = (wavelen < high_freq_wavelen).logical_not() *
                              (wavelen > low_freq_wavelen).logical_not();
    inv_llama = at::where(medium, smoothed, inv_llama);
    inv = inv_llama;
  }
  inv_freq_ = inv.contiguous();
}

std::pair<at::Tensor, at::Tensor> RotaryEmbedding::cos_sin(
    std::int64_t seq_len, const c10::TensorOptions& options) const {
  const auto dtype = options.dtype_opt().value_or(caffe2::TypeMeta::Make<float>());
  const c10::Device device = options.device();
  if (!cos_cache_.defined() || cos_cache_.size(0) < seq_len || cos_cache_.device() != device ||
      cos_cache_.dtype() != dtype) {
    const std::int64_t len =
        std::max(seq_len, cos_cache_.defined() && cos_cache_.device() == device &&
                                  cos_cache_.dtype() == dtype
                              ? cos_cache_.size(0)
                              : std::int64_t{0});
    const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
    const at::Tensor positions = at::arange(len, f32.dtype(at::kLong)).to(at::kFloat);
    const at::Tensor freqs = at::outer(positions, inv_freq_.to(device));  // [T, d/2]
    const at::Tensor emb = at::cat({freqs, freqs}, -1);                   // [T, d]
    cos_cache_ = emb.cos().to(dtype);
    sin_cache_ = emb.sin().to(dtype);
  }
  return {cos_cache_.narrow(0, 0, seq_len), sin_cache_.narrow(0, 0, seq_len)};
}

at::Tensor rotate_half(const at::Tensor& x) {
  const std::int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return x * cos + rotate_half(x) * sin;
}

at::Tensor rotary_bthd(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  if (at::Tensor y = fused_rotary(x, cos, sin); y.defined()) return y;
  return apply_rotary(x.transpose(1, 2), cos, sin);
}

}  // namespace lft::model
