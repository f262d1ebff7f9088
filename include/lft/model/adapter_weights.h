// Where a fine-tuning run's adapters start: a PEFT adapter folder (adapter_config.json,
// adapter_model.safetensors), and the WeightSource that reads adapters from one source and the base
// model from another.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lft/model/finetuning.h"
#include "lft/model/safetensors.h"
#include "lft/model/weight_source.h"

namespace lft::model {

class LinearImpl;  // layers.h

// A PEFT LoRA adapter folder. Tensor names in the file are "base_model.model." + the parameter
// name (lora_A/lora_B weights, and the modules_to_save it trained whole). ConfigError (naming the
// file and field) when it is not a LoRA adapter lftrain can load.
class PeftAdapter {
 public:
  explicit PeftAdapter(const std::string& folder);
  const std::string& folder() const { return folder_; }
  std::int64_t rank = 0;
  double lora_alpha = 0;
  double lora_dropout = 0;
  bool use_rslora = false;
  bool use_dora = false;
  std::vector<std::string> target_modules;
  std::vector<std::string> modules_to_save;
  // ConfigError naming both shapes unless every tensor of the file that `model` has a parameter
  // of has that parameter's whole shape (PEFT's "size mismatch"), before any rows are read.
  void check_shapes(const torch::nn::Module& model) const;
  // Whether the file holds parameter `name`, and its rows.
  bool has(const std::string& name) const;
  void read_rows(const std::string& name, std::int64_t row_begin, std::int64_t rows, at::Tensor out) const;
  const SafetensorsHeader& header() const { return header_; }

 private:
  std::string folder_, file_;
  SafetensorsHeader header_;
};

// The LoRA fine-tuning `adapter` describes: its rank, alpha, rsLoRA, DoRA, targets and
// modules_to_save (as additional_target).
FinetuningSpec adapter_spec(const PeftAdapter& adapter);

// The parameter prefix PEFT writes in adapter_model.safetensors.
inline constexpr const char* kPeftPrefix = "base_model.model.";

// Adapter parameters (is_lora_parameter) and whatever `adapter` holds from `adapters`; the rest
// from `base`. A DoRA magnitude that `adapter` does not hold starts as PEFT's: the row norms of
// the base weight (read from `base`, in float32; `model` gives its shape).
class FinetuningWeights final : public WeightSource {
 public:
  FinetuningWeights(const torch::nn::Module& model, std::unique_ptr<WeightSource> base,
                    std::unique_ptr<WeightSource> adapters, std::shared_ptr<const PeftAdapter> adapter = nullptr);
  void read_rows(const std::string& name, std::int64_t row_begin, std::int64_t rows, at::Tensor out) const override;
  std::string describe() const override;
  std::shared_ptr<const Quantized4bit> quantized_weight(const std::string& name,
                                                        const std::vector<std::int64_t>& shape) const override {
    return base_->quantized_weight(name, shape);
  }
  // A DoRA magnitude over a linear of `model` that has a 4-bit base starts at the norms of the
  // dequantized weight's rows (PEFT over bitsandbytes) instead of the starting weight's.
  void take_dora_norms_from(const torch::nn::Module& model);

 private:
  std::unique_ptr<WeightSource> base_, adapters_;
  std::map<std::string, std::shared_ptr<const LinearImpl>> quantized_;  // magnitude name -> its linear
  std::shared_ptr<const PeftAdapter> adapter_;
  std::map<std::string, std::int64_t> dora_in_features_;  // magnitude name -> its weight's columns
};

// A PeftAdapter as a WeightSource.
class PeftAdapterWeights final : public WeightSource {
 public:
  explicit PeftAdapterWeights(std::shared_ptr<const PeftAdapter> adapter) : adapter_(std::move(adapter)) {}
  void read_rows(const std::string& name, std::int64_t row_begin, std::int64_t rows, at::Tensor out) const override {
    adapter_->read_rows(name, row_begin, rows, out);
  }
  std::string describe() const override { return adapter_->folder(); }

 private:
  std::shared_ptr<const PeftAdapter> adapter_;
};

}  // namespace lft::model
