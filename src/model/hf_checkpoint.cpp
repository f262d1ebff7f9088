// Hugging Face checkpoint loading (hf-formats notes, sections 1 and 3).
#include "lft/model/hf_checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include "lft/config/config.h"
#include "lft/model/safetensors.h"

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

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
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
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
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

void load_hf_checkpoint(torch::nn::Module& model, const std::string& folder) {
  at::NoGradGuard no_grad;
  auto params = model.named_parameters(/*recurse=*/true);
  std::map<std::string, std::string> loaded;  // parameter name -> file
  at::Tensor tied_head;
  std::string tied_head_file;
  for (const std::string& file : hf_weight_files(folder)) {
    for (auto& [name, tensor] : read_safetensors(file)) {
      if (ends_with(name, ".rotary_emb.inv_freq")) continue;
      at::Tensor* param = params.find(name);
      if (param == nullptr) {
        if (name == "lm_head.weight" && params.find("model.embed_tokens.weight") != nullptr) {
          tied_head = tensor;  // checked against the embedding below
          tied_head_file = file;
          continue;
        }
        throw ConfigError(file + ": tensor '" + name + "' has no parameter of that name in the "
                          "model (does config.json match the weights?)");
      }
      if (loaded.count(name) != 0) {
        throw ConfigError(file + ": tensor '" + name + "' is also in " + loaded[name]);
      }
      if (param->sizes() != tensor.sizes()) {
        throw ConfigError(file + ": tensor '" + name + "' has shape " + shape_str(tensor.sizes()) +
                          ", the model's parameter " + shape_str(param->sizes()));
      }
      param->copy_(tensor);
      loaded[name] = file;
    }
  }
  for (const auto& item : params) {
    if (loaded.count(item.key()) == 0) {
      throw ConfigError(folder + ": the checkpoint has no tensor '" + item.key() + "'");
    }
  }
  if (tied_head.defined()) {
    const at::Tensor& embed = *params.find("model.embed_tokens.weight");
    if (!tied_head.sizes().equals(embed.sizes()) ||
        !at::equal(tied_head.to(embed.dtype()), embed.cpu())) {
      throw ConfigError(tied_head_file + ": tensor 'lm_head.weight' differs from "
                        "model.embed_tokens.weight, but config.json ties them "
                        "(tie_word_embeddings); set it to false to train both");
    }
  }
}

}  // namespace lft::model
