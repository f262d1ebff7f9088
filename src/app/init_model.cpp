#include "lft/app/init_model.h"

#include <fstream>
#include <map>

#include "lft/ckpt/checkpoint_files.h"
#include "lft/model/init.h"
#include "lft/model/families.h"
#include "lft/model/safetensors.h"
#include "lft/runtime/error.h"

namespace lft::app {
namespace {

void copy_file(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) throw UsageError("init-model: cannot read " + from + " (--tokenizer must be a folder with tokenizer.json and tokenizer_config.json)");
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  out << in.rdbuf();
  if (!out) throw UsageError("init-model: cannot write " + to);
}

}  // namespace

void write_initial_model(const config::Config& cfg, const model::ModelConfig& model_config,
                         const std::string& dir, const std::string& tokenizer_dir) {
  const auto model = model::create_causal_lm(model_config);
  model::init_weights(*model, static_cast<std::uint64_t>(cfg.integer("seed")), model_config.initial_norm_weight());
  std::map<std::string, at::Tensor> tensors;
  for (const auto& item : model->named_parameters()) tensors[item.key()] = item.value().detach();
  ckpt::make_directories(dir);
  model::write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  std::ofstream json(dir + "/config.json", std::ios::trunc);
  json << model_config.to_hf_json() << "\n";
  if (!json) throw UsageError("init-model: cannot write " + dir + "/config.json");
  if (tokenizer_dir.empty()) return;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
    copy_file(tokenizer_dir + "/" + name, dir + "/" + name);
}

}  // namespace lft::app
