// Checkpoints: what is saved, where, and how a run finds and resumes one (docs/checkpoint.md).
// The bytes go through the tensor store (tensor_store.h): every rank writes its slices of global
// tensors, so a checkpoint loads on any world size and layout.
//
//   output_dir/checkpoint-<step>/state.h5   (checkpoint_format = "shared"; a folder of
//                                           rank-*.h5 files for "per_rank")
//   output_dir/checkpoint-<step>/COMPLETE   written by rank 0 after every rank has finished
//   output_dir/latest                       the newest complete checkpoint's folder name
#pragma once

#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lft/data/sampler.h"
#include "lft/mesh/tensor_box.h"
#include "lft/runtime/error.h"

namespace lft::optim {
class Optimizer;
}

namespace lft::ckpt {

inline constexpr const char* kFormatName = "lftrain-checkpoint";
// 2 adds use_dora; a checkpoint is written as the lowest version that holds it (2 only for DoRA
// runs, which a version-1 reader would merge as plain LoRA), so older lftrains read the others.
inline constexpr std::int64_t kFormatVersion = 2;

// A tensor this rank updates: the box [offset, offset + local.sizes()) of a global tensor, held
// by box.replicas ranks (the save splits the writing among them).
struct HeldTensor {
  std::string name;  // Hugging Face parameter name
  at::Tensor local;
  TensorBox box;
};

// What describes the run (root attributes).
struct RunInfo {
  std::string engine;
  std::vector<std::int64_t> mesh;  // pp, dp_replicate, dp_shard, tp
  int world_size = 1;
  std::string config_text;  // the config file, then one "# override: key=value" line per override
  std::string config_file;  // its name (a .yaml or .yml one is YAML, else TOML)
  std::int64_t global_batch = 0;
  std::int64_t seed = 0;
  // Which parameters trained (finetuning_type). With "freeze" or "lora" the checkpoint holds only
  // the trained tensors; the rest are the base model's: model_name_or_path ("" for an inline
  // [model], then the seed's initialisation, and base_model_hash "seed N") whose files hash to
  // base_model_hash. Written as root attributes; a resume from another base is refused.
  std::string finetuning_type = "full";
  std::string base_model, base_model_hash;
  // LoRA: the adapters' rank, alpha, scaling (alpha / r, or alpha / sqrt(r) with rslora), dropout,
  // the module names they sit beside, and the modules trained whole (comma-separated).
  std::int64_t lora_rank = 0;
  double lora_alpha = 0, lora_scaling = 0, lora_dropout = 0;
  bool use_rslora = false;
  bool use_dora = false;
  // QLoRA: the base the adapters trained over (0: full precision); informational, not compared.
  std::int64_t quantization_bit = 0;
  std::string quantization_type;
  bool double_quantization = false;
  std::string lora_target, additional_target;
};

// Where training stands.
struct Progress {
  std::int64_t step = 0;
  std::int64_t tokens_seen = 0;
  double loss_scale = 0.0;  // fp16 runs: the dynamic loss scale (attribute `loss_scale`); 0: none
  data::SamplerState sampler;
};

// An every-rank error that `resume_from_checkpoint = "auto"` must not skip over (a newer format,
// another model's shapes, another global batch): it is a mistake, not a damaged file.
class CheckpointMismatch : public UsageError {
 public:
  using UsageError::UsageError;
};

struct SaveOptions {
  std::string output_dir;
  bool per_rank = false;       // checkpoint_format = "per_rank"
  std::int64_t total_limit = 0;  // save_total_limit
};

// Saves checkpoint-<progress.step> collectively over `world`. `optimizer` holds the state of
// `params`, index for index. A checkpoint of the same step from an earlier run is replaced.
// Returns the checkpoint folder.
// Collective: a UsageError on every rank when an entry output_dir/checkpoint-<step> for which
// `will_save(step)` is something lftrain did not write (checked before training, so the run stops
// before its steps are spent; save_checkpoint checks its own step again).
void check_save_targets(MPI_Comm world, const std::string& output_dir,
                        const std::function<bool(std::int64_t)>& will_save);

std::string save_checkpoint(MPI_Comm world, const SaveOptions& options,
                            const RunInfo& run, const Progress& progress,
                            const std::vector<HeldTensor>& params, const optim::Optimizer& optimizer);

// Collective. Reads every tensor of `folder` once (spread over the ranks) and checks it against the
// checksum written with it: "" if all match, else what is damaged (the same text on every rank).
std::string verify_checkpoint(MPI_Comm world, const std::string& folder);

// The checkpoint folder to resume from: `spec` "auto" -> the newest complete one in output_dir
// whose tensors match their checksums (broken and damaged ones are skipped with a warning on rank
// 0), nullopt when there is none; any other `spec` is a folder that must be a complete, intact
// checkpoint (UsageError otherwise).
std::optional<std::string> find_checkpoint(MPI_Comm world, const std::string& output_dir,
                                           const std::string& spec);

// Loads `folder` into `params` (each rank reads its boxes) and `optimizer`; checks the format,
// the model's names and shapes and the global batch. Returns the progress to continue from.
Progress load_checkpoint(MPI_Comm world, const std::string& folder, const RunInfo& run,
                         const std::vector<HeldTensor>& params, optim::Optimizer& optimizer);

}  // namespace lft::ckpt
