// QLoRA's frozen 4-bit base (docs/finetuning.md, "Quantized bases"): every linear of the decoder
// layers quantized once from the starting weights, as transformers + bitsandbytes quantize a
// model loaded with a BitsAndBytesConfig (load_in_4bit), and computed as bitsandbytes' Linear4bit.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "lft/model/causal_lm.h"
#include "lft/model/finetuning.h"
#include "lft/model/quantize_4bit.h"
#include "lft/model/weight_source.h"

namespace lft::model {

// x W^T + b with W = the 4-bit weight dequantized into x's dtype; the backward dequantizes it
// again instead of keeping it (bitsandbytes' MatMul4Bit), so a layer holds only its 4-bit bytes
// between forward and backward.
at::Tensor quantized_linear(const at::Tensor& x, const std::shared_ptr<const Quantized4bit>& q, const at::Tensor& bias);

struct QuantizedBase {
  std::int64_t linears = 0;
  std::int64_t elements = 0;  // of their weights
  std::int64_t bytes = 0;     // held, 4-bit data and absmax values
};

// The ranks that quantize together: rank `rank` of `size` quantizes every size-th linear, then
// `broadcast` (every rank calls it for every linear, in order) gives each the others' (its
// tensors, allocated by the receivers, from `owner`).
struct QuantizeTogether {
  int rank = 0, size = 1;
  std::function<void(Quantized4bit& q, int owner)> broadcast;
};

// Quantizes every linear of the decoder layers (spec.quantization_bit = 4): reads its whole
// weight from `source`, rounds it to `dtype` (the run's compute dtype, which transformers loads
// the model in before quantizing), quantizes it on the CPU and keeps it on `device`; the weight
// stops being a parameter (the engines never see it). With `together`, each rank quantizes its
// share and receives the rest (the same bytes: the quantization is deterministic). A weight the
// source holds already in 4 bits (a folder bitsandbytes saved) is read by every rank.
QuantizedBase quantize_base_linears(CausalLM& model, const WeightSource& source, const FinetuningSpec& spec,
                                    c10::ScalarType dtype, const c10::Device& device,
                                    const QuantizeTogether* together = nullptr);

// Every 4-bit linear's tensors, named `<linear>.weight.<part>` (packed, absmax, quantized_absmax,
// absmax_scale; those its quantization has), in module order: the frozen bytes a sharding engine
// keeps a share of (each tensor owns its storage).
struct QuantizedTensor {
  std::string name;
  at::Tensor tensor;
};
std::vector<QuantizedTensor> quantized_base_tensors(const CausalLM& model);

// For the memory estimate on a meta-device model: takes the weights quantize_base_linears would
// quantize out of the parameters and says what their 4-bit form would hold (`largest`: the
// elements of the largest one, dequantized for its GEMMs one at a time).
struct QuantizedBaseShape {
  QuantizedBase totals;
  std::int64_t largest = 0;
  std::vector<std::int64_t> layer_bytes;  // per decoder layer: what a sharding engine cuts and gathers
};
QuantizedBaseShape plan_quantized_base(CausalLM& model, const FinetuningSpec& spec);

}  // namespace lft::model
