// Hugging Face checkpoint loading (hf-formats notes, sections 1 and 3).
#include "lft/model/hf_checkpoint.h"
#include "lft/runtime/text.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <stdexcept>
#include <sstream>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include "lft/config/config.h"
#include "lft/model/safetensors.h"
#include "lft/runtime/json_nesting.h"

namespace lft::model {

namespace {

using lft::config::ConfigError;

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string join(const std::string& folder, const std::string& name) {
  if (folder.empty()) return name;
  return folder.back() == '/' ? folder + name : folder + "/" + name;
}

std::string shape_str(at::IntArrayRef s) {
  std::ostringstream o;
  o << s;
  return o.str();
}

}  // namespace

std::vector<std::string> hf_weight_files(const std::string& folder) {
  const std::string index = join(folder, "model.safetensors.index.json");
  if (is_file(index)) {
    std::ifstream in(index);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (const std::string deep = json_too_deep(text); !deep.empty()) throw ConfigError(index + ": " + deep);
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) throw ConfigError(index + ": not valid JSON");
    auto map = j.find("weight_map");
    if (map == j.end() || !map->is_object()) {
      throw ConfigError(index + ": field 'weight_map': missing or not an object");
    }
    std::set<std::string> files;
    for (auto it = map->begin(); it != map->end(); ++it) {
      if (!it.value().is_string()) {
        throw ConfigError(index + ": field 'weight_map." + it.key() + "': not a file name");
      }
      files.insert(it.value().get<std::string>());
    }
    std::vector<std::string> out;
    for (const auto& f : files) {
      if (f.find('/') != std::string::npos) {
        throw ConfigError(index + ": weight file '" + f + "' is not a plain file name");
      }
      const std::string path = join(folder, f);
      if (!is_file(path)) throw ConfigError(index + ": names '" + f + "', which does not exist");
      out.push_back(path);
    }
    return out;
  }
  const std::string single = join(folder, "model.safetensors");
  if (is_file(single)) return {single};
  throw ConfigError(folder + ": no model.safetensors or model.safetensors.index.json (only "
                             "safetensors checkpoints are supported)");
}

HfWeights::HfWeights(const std::string& folder, torch::nn::Module& model,
                     const std::function<bool(const std::string&)>& not_in_folder,
                     const std::function<bool(const std::string&)>& not_in_model)
    : folder_(folder) {
  const auto params = model.named_parameters(/*recurse=*/true);
  std::map<std::string, Location> tied_head;
  for (const std::string& file : hf_weight_files(folder)) headers_[file] = read_safetensors_header(file);
  bnb_ = std::make_unique<Bnb4bitTensors>(headers_);
  for (const auto& [file, header] : headers_) {
    for (const SafetensorsEntry& e : header.tensors) {
      const std::string& name = e.name;
      if (ends_with(name, ".rotary_emb.inv_freq")) continue;
      if (bnb_->is_part(name)) {  // a 4-bit linear: read whole by quantized_weight()
        const at::Tensor* param = params.find(name);
        if (bnb_->holds_weight(name)) {
          if (param == nullptr)
            throw ConfigError(file + ": 4-bit tensor '" + name + "' has no parameter of that name in the model");
          bnb_shapes_[name] = param->sizes().vec();
        }
        continue;
      }
      if (map_fused_experts(name, file, header, e, params)) continue;
      std::string target = name;  // a Mixtral router under transformers 5's module name
      if (params.find(name) == nullptr && name.find(".mlp.gate.weight") != std::string::npos) {
        std::string renamed = name;
        renamed.replace(renamed.find(".mlp.gate.weight"), std::string(".mlp.gate.weight").size(),
                        ".block_sparse_moe.gate.weight");
        if (params.find(renamed) != nullptr) target = renamed;
      }
      const at::Tensor* param = params.find(target);
      if (param == nullptr) {
        if (not_in_model && not_in_model(name)) continue;
        if (name == "lm_head.weight" && params.find("model.embed_tokens.weight") != nullptr) {
          tied_head[name] = Location{file, &header, name};  // checked against the embedding below
          continue;
        }
        throw ConfigError(file + ": tensor '" + name + "' has no parameter of that name in the "
                          "model (does config.json match the weights?)");
      }
      if (tensors_.count(target) != 0) {
        throw ConfigError(file + ": tensor '" + name + "' is also in " + tensors_.at(target).file);
      }
      if (!param->sizes().equals(e.shape)) {
        throw ConfigError(file + ": tensor '" + name + "' has shape " + shape_str(e.shape) +
                          ", the model's parameter " + shape_str(param->sizes()));
      }
      tensors_[target] = Location{file, &header, name};
    }
  }
  for (const auto& item : params) {
    if (tensors_.count(item.key()) == 0 && bnb_shapes_.count(item.key()) == 0 && !(not_in_folder && not_in_folder(item.key()))) {
      throw ConfigError(folder + ": the checkpoint has no tensor '" + item.key() + "'");
    }
  }
  if (!tied_head.empty()) check_tied_head(tied_head.begin()->second, tensors_.at("model.embed_tokens.weight"));
}

bool HfWeights::map_fused_experts(const std::string& name, const std::string& file, const SafetensorsHeader& header,
                                  const SafetensorsEntry& entry, const torch::OrderedDict<std::string, at::Tensor>& params) {
  const bool gate_up = ends_with(name, ".experts.gate_up_proj"), down = ends_with(name, ".experts.down_proj");
  if (!gate_up && !down) return false;
  const std::string layer = name.substr(0, name.rfind(".experts.", name.size()));  // model.layers.L.mlp
  const std::string layer_prefix = layer.substr(0, layer.rfind('.') + 1);              // model.layers.L.
  // The model's expert names: Qwen's (gate_proj, up_proj, down_proj) or Mixtral's (w1, w3, w2).
  for (const auto& [block, names] :
       std::vector<std::pair<std::string, std::vector<std::string>>>{{layer.substr(layer_prefix.size()), {"gate_proj", "up_proj", "down_proj"}},
                                                                     {"block_sparse_moe", {"w1", "w3", "w2"}}}) {
    const std::string experts = layer_prefix + block + ".experts.";
    const at::Tensor* first = params.find(experts + "0." + names[down ? 2 : 0] + ".weight");
    if (first == nullptr) continue;
    const std::int64_t rows = first->size(0), cols = first->size(1);
    std::int64_t count = 0;
    while (params.find(experts + std::to_string(count) + "." + names[0] + ".weight") != nullptr) ++count;
    const std::vector<std::int64_t> expect{count, gate_up ? 2 * rows : rows, cols};
    if (entry.shape != expect)
      throw ConfigError(file + ": tensor '" + name + "' has shape " + shape_str(entry.shape) + ", the model's " +
                        std::to_string(count) + " experts need " + shape_str(expect));
    for (std::int64_t e = 0; e < count; ++e)
      for (int part = 0; part < (gate_up ? 2 : 1); ++part) {
        const std::string param = experts + std::to_string(e) + "." + names[down ? 2 : part] + ".weight";
        if (tensors_.count(param) != 0)
          throw ConfigError(file + ": tensor '" + name + "' holds '" + param + "', which is also in " + tensors_.at(param).file);
        tensors_[param] = Location{file, &header, name, e, part * rows};
      }
    return true;
  }
  throw ConfigError(file + ": tensor '" + name + "' holds fused experts, but the model has no experts there "
                    "(does config.json match the weights?)");
}

void HfWeights::check_tied_head(const Location& head, const Location& embed) const {
  const SafetensorsEntry& h = *head.header->find("lm_head.weight");
  const SafetensorsEntry& e = *embed.header->find("model.embed_tokens.weight");
  bool equal = h.shape == e.shape;
  constexpr std::int64_t kBlock = 1024;  // rows compared at a time: bounded memory
  const std::int64_t rows = e.shape.empty() ? 1 : e.shape[0];
  for (std::int64_t r = 0; equal && r < rows; r += kBlock) {
    const std::int64_t n = std::min(kBlock, rows - r);
    const at::Tensor a = read_safetensors_rows(embed.file, *embed.header, e.name, r, n);
    const at::Tensor b = read_safetensors_rows(head.file, *head.header, h.name, r, n);
    equal = at::equal(b.to(a.scalar_type()), a);
  }
  if (!equal) {
    throw ConfigError(head.file + ": tensor 'lm_head.weight' differs from "
                      "model.embed_tokens.weight, but config.json ties them "
                      "(tie_word_embeddings); set it to false to train both");
  }
}

std::shared_ptr<const Quantized4bit> HfWeights::quantized_weight(const std::string& name,
                                                                 const std::vector<std::int64_t>& shape) const {
  if (bnb_shapes_.count(name) == 0) return nullptr;
  return bnb_->read(name, shape);
}

void HfWeights::read_rows(const std::string& name, std::int64_t row_begin, std::int64_t rows,
                          at::Tensor out) const {
  if (const auto shape = bnb_shapes_.find(name); shape != bnb_shapes_.end()) {
    at::NoGradGuard no_grad;
    out.copy_(dequantize_4bit(*bnb_->read(name, shape->second), at::kFloat).narrow(0, row_begin, rows).view(out.sizes()));
    return;
  }
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw std::logic_error(folder_ + ": no weights for parameter '" + name + "'");
  at::NoGradGuard no_grad;
  const Location& at = it->second;
  if (at.expert >= 0) {  // one expert's block of a fused tensor, then its rows
    const at::Tensor block = read_safetensors_rows(at.file, *at.header, at.source, at.expert, 1);
    out.copy_(block.select(0, 0).narrow(0, at.row_offset + row_begin, rows).view(out.sizes()));
    return;
  }
  out.copy_(read_safetensors_rows(at.file, *at.header, at.source, row_begin, rows).view(out.sizes()));
}

namespace {

std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

// Folds the bytes of `path` into `h`, eight at a time (the tail zero-padded), then its length.
std::uint64_t hash_file(const std::string& path, std::uint64_t h) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot be read to hash the base model");
  std::vector<char> buffer(std::size_t{1} << 22);
  std::uint64_t length = 0;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = static_cast<std::size_t>(in.gcount());
    std::fill(buffer.begin() + static_cast<std::ptrdiff_t>(got),
              buffer.begin() + static_cast<std::ptrdiff_t>((got + 7) / 8 * 8), 0);
    for (std::size_t i = 0; i < got; i += 8) {
      std::uint64_t word;
      std::memcpy(&word, buffer.data() + i, 8);
      h = mix64(h ^ word) + 0x9e3779b97f4a7c15ULL;
    }
    length += got;
  }
  return mix64(h ^ length);
}

}  // namespace

std::string model_folder_hash(const std::string& folder) {
  std::uint64_t h = 0x6c66747261696e00ULL;
  h = hash_file(folder + "/config.json", h);
  for (const std::string& file : hf_weight_files(folder)) h = hash_file(file, h);
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

void load_hf_checkpoint(torch::nn::Module& model, const std::string& folder) {
  load_weights(model, HfWeights(folder, model));
}

}  // namespace lft::model
