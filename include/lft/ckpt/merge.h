// lfmerge's library side (tools/lfmerge is a thin main over it): turns a checkpoint
// (docs/checkpoint.md) into a model folder that Hugging Face transformers loads, or into one HDF5
// file of full tensors, and describes a checkpoint (--inspect). One process: the checkpoint is
// read with MPI_COMM_SELF, whatever world size wrote it. No optimizer state is exported.
//
//   hf    DIR/model.safetensors (or model-0000k-of-0000n.safetensors + model.safetensors.index.json
//         when the tensor data exceeds max_shard_bytes), DIR/config.json, and, for a run that
//         started from model_name_or_path, that folder's tokenizer and generation files
//   hdf5  DIR/model.h5: a SharedFile tensor store with /model/<name> and the checkpoint's root
//         attributes (less the finetuning ones: it holds a whole model)
//   peft  LoRA checkpoints only: DIR/adapter_model.safetensors ("base_model.model." + each tensor
//         of the checkpoint: the lora_A/lora_B adapters and the modules trained whole) and
//         DIR/adapter_config.json, as peft 0.21.2 saves them, for
//         peft.PeftModel.from_pretrained(base model, DIR)
//
// A freeze or LoRA checkpoint (root attribute finetuning_type) holds only the tensors its run
// trained. hf and hdf5 export the whole model: every parameter from the checkpoint when it holds
// it, else from the base (the run's model_name_or_path, whose files must still hash to the
// recorded base_model_hash; or the seed's initialisation for an inline [model]), with
// W + lora_scaling * B @ A (in float32) where the checkpoint has LoRA adapters.
//
// Errors: lft::UsageError for a wrong input (missing or incomplete checkpoint, names or shapes that
// do not match the run's model config, a base model folder that changed, peft for a checkpoint
// that is not LoRA, an existing non-empty output folder without `force`);
// MergeIoError when writing fails (disk full, ...). Either way the files of this export written so
// far are removed. (An HDF5 write failure inside the tensor store aborts the process instead, see
// tensor_store.h; it leaves DIR/model.h5.tmp, never a model.h5.)
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "lft/model/model_config.h"

namespace lft::ckpt {

enum class ExportFormat { HuggingFace, Hdf5, Peft };

struct MergeOptions {
  std::string checkpoint;  // a checkpoint-<step> folder: COMPLETE and state.h5 or state/
  std::string out_dir;
  ExportFormat format = ExportFormat::HuggingFace;
  at::ScalarType dtype = at::kFloat;             // kFloat (the master dtype), kBFloat16, kHalf
  std::int64_t max_shard_bytes = 5'000'000'000;  // "5GB" (hf): larger exports are sharded
  bool dry_run = false;                          // check everything, write nothing
  // Write into an existing non-empty out_dir. The export's own file names found there (model*,
  // config.json, adapter_*, the tokenizer files, ...) are removed first, nothing else.
  bool force = false;
  // The base model folder the export says it merges onto (LlamaFactory's export_lora.yaml
  // `model`): refused unless it is the folder the checkpoint's run trained on. "": not checked.
  std::string expected_model;
  // export_lora.yaml's infer_dtype auto: bf16 where the base folder's config.json says float32,
  // else the base's own dtype (LlamaFactory main's merge).
  bool dtype_from_base = false;
};

struct MergeReport {
  std::vector<std::string> files;  // written (dry run: to be written), full paths, in order
  std::int64_t tensor_count = 0;
  std::int64_t total_bytes = 0;  // tensor data bytes in the export dtype
  std::int64_t parameters = 0;
  std::string model_summary;  // ModelConfig::summary()
  std::string text;           // what lfmerge prints
};

// LlamaFactory v1's export_lora.yaml (`llamafactory-cli merge FILE`) as lfmerge's options:
// `model`, `peft_config: {name: lora, adapter_name_or_path, export_dir, export_size (GB a shard,
// 5), infer_dtype (auto, float32, bfloat16, float16)}`. adapter_name_or_path is an lftrain
// checkpoint, or the output_dir of a run (its `latest` checkpoint). Throws UsageError naming the
// file and key for anything else (a PEFT adapter folder, export_legacy_format, a Hub id).
MergeOptions read_export_yaml(const std::string& path);

// Writing the export failed (the message names the file and the system's reason).
class MergeIoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

MergeReport merge_checkpoint(const MergeOptions& options);

// A human-readable description: format, step, tokens, engine, mesh, world size, global batch,
// version, store mode, every tensor (shape, dtype, bytes) and totals. `path` is a checkpoint folder
// (an incomplete one is described, and said to be incomplete) or a tensor store (.h5 file or
// per-rank folder). UsageError when it cannot be opened.
std::string inspect_checkpoint(const std::string& path);

// The Hugging Face names and shapes of the parameters of a model of `config` (those of
// lft::model::LlamaForCausalLM: lm_head.weight only when the embeddings are untied).
std::map<std::string, std::vector<std::int64_t>> expected_parameter_shapes(
    const model::ModelConfig& config);

// ---- command line ----------------------------------------------------------------------------
// "5GB" = 5e9 bytes, "500MB", "100KB", "2GiB", "512MiB", "64KiB", "123B" or "123"
// (case-insensitive). UsageError for anything else or a size < 1.
std::int64_t parse_byte_size(const std::string& text);
// "fp32"/"float32", "bf16"/"bfloat16", "fp16"/"float16". UsageError otherwise.
at::ScalarType parse_export_dtype(const std::string& text);

struct MergeCommand {
  enum class Action { Merge, Inspect, Help } action = Action::Merge;
  MergeOptions options;      // Merge
  std::string inspect_path;  // Inspect
};
// `args` without the program name. UsageError (with what to do) for a wrong command line.
MergeCommand parse_merge_command_line(const std::vector<std::string>& args);
std::string merge_usage();

}  // namespace lft::ckpt
