// Folders saved by transformers + bitsandbytes with load_in_4bit: reading the packed weights.
#include "lft/model/prequantized.h"

#include <fstream>
#include <sstream>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "lft/config/config.h"
#include "lft/runtime/json_nesting.h"

namespace lft::model {
namespace {

using config::ConfigError;

constexpr const char* kQuantState = ".quant_state.bitsandbytes__";

}  // namespace

std::optional<Prequantization> read_prequantization(const std::string& folder) {
  const std::string file = folder + "/config.json";
  std::ifstream in(file);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  if (!json_too_deep(text.str()).empty()) return std::nullopt;  // ModelConfig reports it
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("quantization_config")) return std::nullopt;
  const nlohmann::json& q = j["quantization_config"];
  const std::string method = q.is_object() ? q.value("quant_method", std::string()) : std::string();
  const std::string where = file + ": quantization_config";
  if (method != "bitsandbytes")
    throw ConfigError(where + ".quant_method = \"" + method + "\": lftrain reads folders that bitsandbytes quantized "
                      "to 4 bits; train from the full-precision model (with quantization_bit = 4 for QLoRA)");
  if (q.value("load_in_8bit", false) || !q.value("load_in_4bit", false))
    throw ConfigError(where + ": an 8-bit (LLM.int8) folder, whose training is not built in lftrain; train from the "
                      "full-precision model with quantization_bit = 4");
  Prequantization p;
  p.type = q.value("bnb_4bit_quant_type", std::string("fp4"));
  p.double_quant = q.value("bnb_4bit_use_double_quant", false);
  if (p.type != "nf4" && p.type != "fp4") throw ConfigError(where + ".bnb_4bit_quant_type = \"" + p.type + "\" is not nf4 or fp4");
  return p;
}

Bnb4bitTensors::Bnb4bitTensors(const std::map<std::string, SafetensorsHeader>& headers) {
  for (const auto& [file, header] : headers)
    for (const SafetensorsEntry& e : header.tensors) {
      const std::size_t at = e.name.find(kQuantState);
      if (at != std::string::npos) weights_[e.name.substr(0, at)] = e.name;
    }
  // A part is the weight itself or "<weight>.<suffix>", the weight's name ending in ".weight".
  for (const auto& [file, header] : headers)
    for (const SafetensorsEntry& e : header.tensors) {
      const std::size_t at = e.name.find(".weight");
      if (at != std::string::npos && weights_.count(e.name.substr(0, at + 7)) != 0) parts_[e.name] = Place{file, &header};
    }
}

Bnb4bitTensors::Place Bnb4bitTensors::place_of(const std::string& tensor, const std::string& weight) const {
  const auto it = parts_.find(tensor);
  if (it == parts_.end()) throw ConfigError("the 4-bit weight '" + weight + "' has no tensor '" + tensor + "' in its folder");
  return it->second;
}

std::shared_ptr<const Quantized4bit> Bnb4bitTensors::read(const std::string& weight,
                                                          const std::vector<std::int64_t>& shape) const {
  auto tensor = [&](const std::string& name) {
    const Place p = place_of(name, weight);
    return read_safetensors_tensor(p.file, *p.header, name);
  };
  const std::string state_name = weights_.at(weight);
  const Place state_place = place_of(state_name, weight);
  const at::Tensor bytes = tensor(state_name).to(at::kByte).contiguous();
  const std::string text(reinterpret_cast<const char*>(bytes.data_ptr<std::uint8_t>()), static_cast<std::size_t>(bytes.numel()));
  const nlohmann::json s = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::string where = state_place.file + ": '" + weight + "'";
  if (s.is_discarded() || !s.is_object()) throw ConfigError(where + ": its quant_state is not JSON");
  auto q = std::make_shared<Quantized4bit>();
  q->type = quant4_type_of(s.value("quant_type", std::string()));
  q->blocksize = s.value("blocksize", std::int64_t{0});
  q->shape = s.value("shape", std::vector<std::int64_t>{});
  if (q->shape != shape)
    throw ConfigError(where + ": its quant_state's shape differs from the model's weight (does config.json match?)");
  if (q->blocksize < 1) throw ConfigError(where + ": its quant_state has no blocksize");
  if (!at::equal(tensor(weight + ".quant_map").to(at::kFloat), quant4_code(q->type)))
    throw ConfigError(where + ": its quant_map is not bitsandbytes' " + quant4_name(q->type) + " code");
  q->packed = tensor(weight).to(at::kByte).reshape({-1});
  if (s.contains("nested_offset")) {
    if (s.value("nested_blocksize", std::int64_t{0}) != 256)
      throw ConfigError(where + ": double quantization in blocks of " + std::to_string(s.value("nested_blocksize", 0)) +
                        " (bitsandbytes' is 256)");
    if (!at::equal(tensor(weight + ".nested_quant_map").to(at::kFloat), dynamic_8bit_code()))
      throw ConfigError(where + ": its nested_quant_map is not bitsandbytes' dynamic 8-bit code");
    q->quantized_absmax = tensor(weight + ".absmax").to(at::kByte);
    q->absmax_scale = tensor(weight + ".nested_absmax").to(at::kFloat);
    q->absmax_offset = s.value("nested_offset", 0.0f);
  } else {
    q->absmax = tensor(weight + ".absmax").to(at::kFloat);
  }
  const std::int64_t n = shape.empty() ? 0 : shape[0] * (shape.size() > 1 ? shape[1] : 1);
  const std::int64_t blocks = (n + q->blocksize - 1) / q->blocksize;
  const at::Tensor& per_block = q->double_quantized() ? q->quantized_absmax : q->absmax;
  if (q->packed.numel() != (n + 1) / 2 || per_block.numel() != blocks)
    throw ConfigError(where + ": its packed data or absmax values do not fit its shape");
  return q;
}

}  // namespace lft::model
