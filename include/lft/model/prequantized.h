// A model folder that transformers + bitsandbytes saved already quantized to 4 bits
// (config.json's quantization_config: quant_method "bitsandbytes", load_in_4bit): its linears are
// bitsandbytes' packed tensors, which are lftrain's Quantized4bit as they are (quantize_4bit.h).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "lft/model/quantize_4bit.h"
#include "lft/model/safetensors.h"

namespace lft::model {

struct Prequantization {
  std::string type;  // "nf4" or "fp4"
  bool double_quant = false;
};

// config.json's quantization_config: nullopt without one; ConfigError naming the field for one
// lftrain does not read (another method, 8 bits).
std::optional<Prequantization> read_prequantization(const std::string& folder);

// The 4-bit weights of a folder's safetensors files: each "<linear>.weight" with its parts
// ".absmax", ".quant_map", (".nested_absmax", ".nested_quant_map",) ".quant_state.bitsandbytes__<type>".
class Bnb4bitTensors {
 public:
  // Scans the files' headers (file -> header, which must outlive this).
  explicit Bnb4bitTensors(const std::map<std::string, SafetensorsHeader>& headers);
  // A 4-bit weight, or one of its parts (neither is a parameter of the model).
  bool holds_weight(const std::string& name) const { return weights_.count(name) != 0; }
  bool is_part(const std::string& name) const { return parts_.count(name) != 0; }
  // Reads a 4-bit weight whole; ConfigError naming the file when it is not what bitsandbytes 0.50
  // writes (another code, nested block size or shape than `shape`).
  std::shared_ptr<const Quantized4bit> read(const std::string& weight, const std::vector<std::int64_t>& shape) const;

 private:
  struct Place {
    std::string file;
    const SafetensorsHeader* header;
  };
  Place place_of(const std::string& tensor, const std::string& weight) const;
  std::map<std::string, std::string> weights_;  // weight name -> its quant_state tensor
  std::map<std::string, Place> parts_;          // every tensor of a 4-bit weight, the weight too
};

}  // namespace lft::model
