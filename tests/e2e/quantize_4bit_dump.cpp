// quantize_4bit_dump IN.safetensors OUT.safetensors nf4|fp4 DOUBLE(0|1): quantizes IN's tensor "w"
// with lftrain's 4-bit quantization (src/model/quantize_4bit.cpp) and writes what it made, for
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
  if (argc != 5) {
    std::fprintf(stderr, "usage: quantize_4bit_dump IN.safetensors OUT.safetensors nf4|fp4 0|1\n");
    return 2;
  }
  const auto header = lft::model::read_safetensors_header(argv[1]);
  const at::Tensor w = lft::model::read_safetensors_tensor(argv[1], header, "w");
  const bool twice = std::string(argv[4]) == "1";
  const lft::model::Quantized4bit q = lft::model::quantize_4bit(w, lft::model::quant4_type_of(argv[3]), twice);
  std::map<std::string, at::Tensor> out = {
      {"packed", q.packed}, {"absmax", lft::model::block_absmax(q)}, {"dequantized", lft::model::dequantize_4bit(q, w.scalar_type()).to(at::kFloat)}};
  if (twice) {
    out["quantized_absmax"] = q.quantized_absmax;
    out["absmax_scale"] = q.absmax_scale;
    out["offset"] = at::full({1}, q.absmax_offset, at::kFloat);
    out["dynamic_code"] = lft::model::dynamic_8bit_code();
  }
  lft::model::write_safetensors(argv[2], out);
  std::printf("quantize_4bit_dump: %s %s%s: %lld bytes\n", argv[3], c10::str(w.sizes()).c_str(), twice ? " double" : "",
              static_cast<long long>(q.bytes()));
  return 0;
}
