// A Hugging Face model folder for multi-rank tests, written once by world rank 0.
#pragma once

#include <mpi.h>
#include <sys/stat.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <string>

#include "lft/model/families.h"
#include "lft/model/init.h"
#include "lft/model/safetensors.h"

namespace lft::test {

// Rank 0 writes `dir` (config.json, model.safetensors; no tokenizer: bytes) with `config`'s model
// initialised from `seed`, each tensor through `adjust` (name, tensor) when given; every rank waits
// for it and gets `dir`.
inline std::string write_model_folder(
    const std::string& dir, const model::ModelConfig& config, std::uint64_t seed,
    const std::function<at::Tensor(const std::string&, const at::Tensor&)>& adjust = {}) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    ::mkdir(dir.c_str(), 0755);
    const auto m = model::create_causal_lm(config);
    model::init_weights(*m, seed, config.initial_norm_weight());
    std::map<std::string, at::Tensor> tensors;
    for (const auto& item : m->named_parameters())
      tensors[item.key()] = adjust ? adjust(item.key(), item.value().detach()) : item.value().detach();
    model::write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
    std::ofstream(dir + "/config.json") << config.to_hf_json();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

}  // namespace lft::test
