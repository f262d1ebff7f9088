// quantize_4bit_dump IN.safetensors OUT_PREFIX: quantizes IN's tensor "w" with lftrain's 4-bit
// quantization (src/model/quantize_4bit.cpp), NF4 and FP4, without and with double quantization
// (DOUBLE 0, 1), and writes what it made to OUT_PREFIX-{nf4,fp4}-DOUBLE.safetensors, for
// tools/check-bnb.py to compare with bitsandbytes: "packed" (uint8), "absmax" (float32, the
// dequantized ones with DOUBLE), with DOUBLE "quantized_absmax", "absmax_scale" and "offset", and
// "dequantized" (in the weight's dtype, written as float32).
#include <cstdio>
#include <map>
#include <string>

#include <ATen/ATen.h>

#include "lft/model/quantize_4bit.h"
#include "lft/model/safetensors.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: quantize_4bit_dump IN.safetensors OUT_PREFIX\n");
    return 2;
  }
  const auto header = lft::model::read_safetensors_header(argv[1]);
  const at::Tensor w = lft::model::read_safetensors_tensor(argv[1], header, "w");
  for (const char* type : {"nf4", "fp4"})
    for (const bool twice : {false, true}) {
      const lft::model::Quantized4bit q = lft::model::quantize_4bit(w, lft::model::quant4_type_of(type), twice);
      std::map<std::string, at::Tensor> out = {
          {"packed", q.packed},
          {"absmax", lft::model::block_absmax(q)},
          {"dequantized", lft::model::dequantize_4bit(q, w.scalar_type()).to(at::kFloat)}};
      if (twice) {
        out["quantized_absmax"] = q.quantized_absmax;
        out["absmax_scale"] = q.absmax_scale;
        out["offset"] = at::full({1}, q.absmax_offset, at::kFloat);
      }
      lft::model::write_safetensors(std::string(argv[2]) + "-" + type + "-" + (twice ? "1" : "0") + ".safetensors", out);
    }
  return 0;
}
