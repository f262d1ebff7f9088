// The megatron engine's per-parameter record and message tags (shared by its source files).
#pragma once

#include <string>

#include "lft/engine/megatron.h"

namespace lft::engine {

struct MegatronEngine::Param {
  std::string name;
  at::Tensor tensor;  // the module's parameter, holding this rank's box
  TensorBox box;      // with dp replicas (without the distributed optimizer)
  int holders = 1;    // ranks of one data-parallel replica holding this box (tp replicas, tied pair)
  int holder = 0;
  bool counted = true;           // adds to the gradient norm (holder 0 of its box)
  bool tp_partial_grad = false;  // replicated over tp; with sequence parallel each rank has a part
  bool kv_replica = false;       // a kv head held by tp / kv ranks
  bool tied_copy = false;        // used on two stages (an embedding tied to the head): gradients summed
  int other_stage = -1;          // with tied_copy: the other stage that holds it
};

// Point-to-point tags on the pipeline communicator: activations to global virtual stage g for
// micro-batch mb, gradients back to g, and the tied embedding's gradient.
inline int activation_tag(int g, std::int64_t mb, std::int64_t m) { return static_cast<int>((g * m + mb) * 2); }
inline int gradient_tag(int g, std::int64_t mb, std::int64_t m) { return static_cast<int>((g * m + mb) * 2 + 1); }
constexpr int kTiedEmbeddingTag = 32000;  // 32767: the MPI backend's reduce-scatter (mpi_communicator.cpp)
constexpr std::int64_t kMaxPipelineTag = 31999;  // MPI guarantees tags up to 32767

}  // namespace lft::engine
