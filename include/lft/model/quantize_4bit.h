// 4-bit quantized base weights (QLoRA): bitsandbytes' NF4 and FP4 blockwise formats, bit for bit
// (docs/finetuning.md, "Quantized bases"). A weight of n elements, flattened row-major, is cut
// into blocks of `blocksize` (64); each block keeps its absmax (float32) and each element the
// nearest of 16 code values times that absmax, two elements a byte (the first in the high
// nibble). With double quantization the absmax values, less their mean (`offset`), are quantized
// again: 8 bits each with bitsandbytes' signed dynamic code, in blocks of 256 with a float32
// absmax per block.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

namespace lft::model {

enum class Quant4Type { NF4, FP4 };

// "nf4" / "fp4"; std::invalid_argument for another name.
Quant4Type quant4_type_of(const std::string& name);
const char* quant4_name(Quant4Type type);

struct Quantized4bit {
  Quant4Type type = Quant4Type::NF4;
  std::int64_t blocksize = 64;
  std::vector<std::int64_t> shape;  // of the weight
  at::Tensor packed;                // uint8 [ceil(n / 2)]
  at::Tensor absmax;                // float32 [blocks]; undefined with double quantization
  at::Tensor quantized_absmax;      // uint8 [blocks] (double quantization)
  at::Tensor absmax_scale;          // float32 [ceil(blocks / 256)] (double quantization)
  float absmax_offset = 0;          // (double quantization)

  bool double_quantized() const { return quantized_absmax.defined(); }
  // The bytes held: what the memory estimate counts.
  std::int64_t bytes() const;
};

// bitsandbytes.functional.quantize_4bit(w, blocksize, compress_statistics = double_quant,
// quant_type) for a float32, bfloat16 or float16 CPU tensor (quantized from its float32 values).
Quantized4bit quantize_4bit(const at::Tensor& weight, Quant4Type type, bool double_quant, std::int64_t blocksize = 64);

// bitsandbytes.functional.dequantize_4bit: code * absmax in float32, then `dtype`.
at::Tensor dequantize_4bit(const Quantized4bit& q, c10::ScalarType dtype);

// The per-block absmax in float32 (the double-quantized ones dequantized, plus the offset).
at::Tensor block_absmax(const Quantized4bit& q);

// The 16 code values of a 4-bit type by code index (float32): NF4's, or FP4's divided by 12.
const at::Tensor& quant4_code(Quant4Type type);

// bitsandbytes' signed dynamic 8-bit code (create_dynamic_map), 256 ascending float32 values.
const at::Tensor& dynamic_8bit_code();

}  // namespace lft::model
