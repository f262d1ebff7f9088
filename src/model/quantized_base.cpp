// QLoRA's 4-bit base: quantizing the decoder layers' linears from the starting weights, and their
// forward and backward (bitsandbytes' Linear4bit / MatMul4Bit on a CPU: dequantize, then GEMM).
#include "lft/model/quantized_base.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/autograd.h>

#include "lft/model/autocast.h"
#include "lft/model/layers.h"

namespace lft::model {
namespace {

// The autograd node keeps the 4-bit weight's tensors (the module's, not copies), never a
// dequantized weight.
struct QuantizedLinearFunction : torch::autograd::Function<QuantizedLinearFunction> {
  // `bias` (none, or frozen) is no autograd input: only x is.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const Quantized4bit& q,
                            const at::Tensor* bias) {
    auto& saved = ctx->saved_data;
    saved["type"] = static_cast<std::int64_t>(q.type);
    saved["blocksize"] = q.blocksize;
    saved["shape"] = q.shape;
    saved["packed"] = q.packed;
    if (q.double_quantized()) {
      saved["quantized_absmax"] = q.quantized_absmax;
      saved["absmax_scale"] = q.absmax_scale;
    } else {
      saved["absmax"] = q.absmax;
    }
    saved["absmax_offset"] = static_cast<double>(q.absmax_offset);
    // Dequantized straight to the compute dtype: under autocast the fp32 weight it would cast to
    // bf16 is never made (the same bf16 values).
    return at::linear(x, dequantize_4bit(q, compute_dtype(x)), bias != nullptr ? *bias : at::Tensor());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto& saved = ctx->saved_data;
    Quantized4bit q;
    q.type = static_cast<Quant4Type>(saved["type"].toInt());
    q.blocksize = saved["blocksize"].toInt();
    q.shape = saved["shape"].toIntVector();
    q.packed = saved["packed"].toTensor();
    if (saved.count("absmax") != 0) {
      q.absmax = saved["absmax"].toTensor();
    } else {
      q.quantized_absmax = saved["quantized_absmax"].toTensor();
      q.absmax_scale = saved["absmax_scale"].toTensor();
    }
    q.absmax_offset = static_cast<float>(saved["absmax_offset"].toDouble());
    const at::Tensor& g = grads[0];
    at::Tensor grad_x = at::matmul(g, dequantize_4bit(q, g.scalar_type()));
    return {grad_x, at::Tensor(), at::Tensor()};
  }
};

bool is_base_linear(const std::string& name) {
  return name.rfind("model.layers.", 0) == 0 && name.find(".lora_") == std::string::npos;
}

// The tensors a Quantized4bit of `shape` holds, allocated (for a broadcast to fill).
Quantized4bit allocated_4bit(Quant4Type type, bool double_quant, const std::vector<std::int64_t>& shape) {
  Quantized4bit q;
  q.type = type;
  q.shape = shape;
  const std::int64_t n = shape[0] * shape[1], blocks = (n + q.blocksize - 1) / q.blocksize;
  q.packed = at::empty({(n + 1) / 2}, at::kByte);
  if (double_quant) {
    q.quantized_absmax = at::empty({blocks}, at::kByte);
    q.absmax_scale = at::empty({(blocks + 255) / 256}, at::kFloat);
  } else {
    q.absmax = at::empty({blocks}, at::kFloat);
  }
  return q;
}

// `t` on `device` over a storage of its own: a sharding engine frees and refills each tensor's
// storage (quantized_base_tensors), which must hold nothing else (a folder's tensors may be
// views of what was read).
at::Tensor owned_on(const at::Tensor& t, const c10::Device& device) {
  at::Tensor out = t.to(device);
  const bool owns = out.is_contiguous() && out.storage_offset() == 0 &&
                    out.storage().nbytes() == static_cast<std::size_t>(out.numel()) * out.element_size();
  return owns ? out : out.clone(at::MemoryFormat::Contiguous);
}

}  // namespace

at::Tensor quantized_linear(const at::Tensor& x, const std::shared_ptr<const Quantized4bit>& q, const at::Tensor& bias) {
  if (!at::GradMode::is_enabled() || !(x.requires_grad() || (bias.defined() && bias.requires_grad())))
    return at::linear(x, dequantize_4bit(*q, compute_dtype(x)), bias);
  // A trained bias (an additional_target linear) is added outside, where autograd sees it.
  if (bias.defined() && bias.requires_grad()) return QuantizedLinearFunction::apply(x, *q, nullptr) + bias;
  return QuantizedLinearFunction::apply(x, *q, bias.defined() ? &bias : nullptr);
}

QuantizedBase quantize_base_linears(CausalLM& model, const WeightSource& source, const FinetuningSpec& spec,
                                    c10::ScalarType dtype, const c10::Device& device,
                                    const QuantizeTogether* together) {
  QuantizedBase out;
  if (spec.quantization_bit == 0) return out;
  const Quant4Type type = quant4_type_of(spec.quantization_type);
  const int rank = together ? together->rank : 0, size = together ? together->size : 1;
  struct Made {
    std::shared_ptr<LinearImpl> linear;
    std::shared_ptr<Quantized4bit> q;  // null: another rank's share, received below
    bool from_folder = false;          // read as saved (the same on every rank)
  };
  std::vector<Made> made;
  // This rank's share first (every rank at once), then the exchange in one pass.
  for (const auto& item : model.named_modules()) {
    auto linear = std::dynamic_pointer_cast<LinearImpl>(item.value());
    if (!linear || !is_base_linear(item.key())) continue;
    const std::vector<std::int64_t> shape{linear->out_features, linear->in_features};
    const int owner = static_cast<int>(made.size() % static_cast<std::size_t>(size));
    Made m{linear, nullptr, false};
    if (auto saved = source.quantized_weight(item.key() + ".weight", shape)) {
      m.q = std::make_shared<Quantized4bit>(*saved);  // a folder bitsandbytes saved: as it is
      m.from_folder = true;
    } else if (owner == rank) {
      at::Tensor weight = at::empty(shape, at::kFloat);
      source.read_rows(item.key() + ".weight", 0, linear->out_features, weight);
      m.q = std::make_shared<Quantized4bit>(quantize_4bit(weight.to(dtype), type, spec.double_quantization));
    }
    made.push_back(std::move(m));
  }
  for (std::size_t i = 0; i < made.size(); ++i) {
    Made& m = made[i];
    if (!m.from_folder && size > 1) {
      if (!m.q) m.q = std::make_shared<Quantized4bit>(allocated_4bit(type, spec.double_quantization,
                                                                     {m.linear->out_features, m.linear->in_features}));
      together->broadcast(*m.q, static_cast<int>(i % static_cast<std::size_t>(size)));
    }
    for (at::Tensor* t : {&m.q->packed, &m.q->absmax, &m.q->quantized_absmax, &m.q->absmax_scale})
      if (t->defined()) *t = owned_on(*t, device);
    out.linears += 1;
    out.elements += m.linear->out_features * m.linear->in_features;
    out.bytes += m.q->bytes();
    m.linear->use_quantized_weight(std::move(m.q));
  }
  return out;
}

std::vector<QuantizedTensor> quantized_base_tensors(const CausalLM& model) {
  std::vector<QuantizedTensor> out;
  for (const auto& item : model.named_modules()) {
    const auto linear = std::dynamic_pointer_cast<const LinearImpl>(item.value());
    if (!linear || !linear->quantized) continue;
    const Quantized4bit& q = *linear->quantized;
    const std::string weight = item.key() + ".weight.";
    for (const auto& [part, tensor] : {std::pair<const char*, const at::Tensor*>{"packed", &q.packed},
                                       {"absmax", &q.absmax},
                                       {"quantized_absmax", &q.quantized_absmax},
                                       {"absmax_scale", &q.absmax_scale}})
      if (tensor->defined()) out.push_back({weight + part, *tensor});
  }
  return out;
}

QuantizedBaseShape plan_quantized_base(CausalLM& model, const FinetuningSpec& spec) {
  QuantizedBaseShape out;
  if (spec.quantization_bit == 0) return out;
  for (const auto& item : model.named_modules()) {
    auto linear = std::dynamic_pointer_cast<LinearImpl>(item.value());
    if (!linear || !is_base_linear(item.key())) continue;
    const std::int64_t n = linear->out_features * linear->in_features, blocks = (n + 63) / 64;
    out.totals.linears += 1;
    out.totals.elements += n;
    const std::int64_t bytes = (n + 1) / 2 + (spec.double_quantization ? blocks + 4 * ((blocks + 255) / 256) : 4 * blocks);
    out.totals.bytes += bytes;
    out.largest = std::max(out.largest, n);
    const auto layer = static_cast<std::size_t>(model.placement(item.key() + ".weight").units.front() -
                                                CausalLM::layer_unit(0));
    if (out.layer_bytes.size() <= layer) out.layer_bytes.resize(layer + 1, 0);
    out.layer_bytes[layer] += bytes;
    linear->use_quantized_weight(std::make_shared<Quantized4bit>());
  }
  return out;
}

}  // namespace lft::model
