// Internals of lfmerge (merge.h) shared by merge.cpp, merge_source.cpp, merge_output.cpp and
// merge_adapters.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lft/ckpt/manifest.h"
#include "lft/ckpt/merge.h"
#include "lft/ckpt/tensor_store.h"
#include "lft/model/model_config.h"

namespace lft::ckpt::merge_detail {

// ---- the checkpoint (merge_source.cpp) ---------------------------------------------------------

// A root attribute of a store, of one of the kinds StoreWriter::set_attribute writes.
struct Attribute {
  enum class Kind { String, Int, Double, IntVector };
  std::string key;
  Kind kind = Kind::String;
  std::string s;
  std::int64_t i = 0;
  double d = 0;
  std::vector<std::int64_t> v;
};

struct Source {
  std::string folder;     // the checkpoint folder ("" when a store was given directly)
  std::string state;      // the store: folder/state.h5 or folder/state
  std::string main_file;  // the store's file holding the root attributes
  bool complete = false;
  StoreReader reader;
  std::vector<Attribute> attributes;  // the root attributes, "store_*" excluded, by name (copied into an export)
  std::optional<Manifest> manifest;   // read from them; absent only for a bare store given to --inspect
  std::string manifest_error;         // why it is absent

};

// Opens a checkpoint folder. UsageError (naming the path and what to do) when it is missing, not
// a checkpoint, incomplete (unless `allow_incomplete`) or of a newer format. `allow_incomplete`
// also accepts a bare store (an .h5 file or per-rank folder), for --inspect.
Source open_checkpoint(const std::string& path, bool allow_incomplete);

// The model of the run, from the root attribute `config` (the run's TOML text and its
// "# override: key=value" lines).
struct RunModel {
  model::ModelConfig config;
  std::string model_folder;  // model_name_or_path; "" for an inline [model] table
};
RunModel rebuild_model(const Source& source);

// The /model tensors, names without the "model/" prefix, in export order.
std::vector<TensorInfo> model_tensors(const Source& source);
// Export order: embeddings, layers in numeric order, final norm, lm_head.
void sort_export_order(std::vector<TensorInfo>& tensors);

struct Finetuning;
// Checks names (Hugging Face parameter names) and shapes against `config`: a full checkpoint
// holds every parameter; a freeze or LoRA one only those that trained, a LoRA one also adapters
// (adapter_problems). UsageError listing the problems (tensor and both shapes).
void check_model_tensors(const Source& source, const std::vector<TensorInfo>& tensors,
                         const model::ModelConfig& config, const Finetuning& finetuning);

// A parameter a full run of `config` keeps frozen, which its checkpoint does not hold: a reward
// model's lm_head (unused by its loss), exported from the base model.
bool frozen_in_full_run(const model::ModelConfig& config, const std::string& name);

// Orders "model.layers.10" after "model.layers.9": digit runs compare as numbers.
bool natural_less(const std::string& a, const std::string& b);

// ---- formatting --------------------------------------------------------------------------------
std::string shape_text(const std::vector<std::int64_t>& shape);  // "[3, 4]"
std::string human_bytes(std::int64_t bytes);                     // "1.50 MB (1500000 bytes)"
std::int64_t numel(const std::vector<std::int64_t>& shape);
// "bfloat16" etc. (the torch name, as config.json's dtype)
std::string dtype_name(at::ScalarType dtype);

// ---- writing (merge_output.cpp) ----------------------------------------------------------------

// The files of one export. Each is written to <path>.tmp and renamed when complete; whatever was
// created is removed again unless commit() is called (an exception, a disk-full error), and the
// output folder too when this export created it and it is empty.
class OutputFiles {
 public:
  OutputFiles(std::string dir, bool created_dir);
  ~OutputFiles();
  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;

  // A file about to be written (its .tmp is cleaned up too).
  void add(const std::string& path);
  void commit() { committed_ = true; }

 private:
  std::string dir_;
  bool created_dir_;
  bool committed_ = false;
  std::vector<std::string> paths_;
};

// Reads one tensor of an export in full (CPU, any floating dtype: the writer converts it).
using TensorLoader = std::function<at::Tensor(const TensorInfo&)>;

// A safetensors file of `tensors` (converted to `dtype`) streamed one tensor at a time, laid out
// as the reference writer does, with __metadata__ {"format": "pt"}. MergeIoError on failure.
void write_safetensors_streaming(const std::string& path, const std::vector<TensorInfo>& tensors,
                                 at::ScalarType dtype, const TensorLoader& load,
                                 OutputFiles& files);
void write_text_file(const std::string& path, const std::string& text, OutputFiles& files);
void copy_file(const std::string& from, const std::string& to, OutputFiles& files);

// DIR/model.h5 as a SharedFile store on MPI_COMM_SELF (written as model.h5.tmp, then renamed).
void write_hdf5_export(const std::string& path, const std::vector<TensorInfo>& tensors,
                       at::ScalarType dtype, const TensorLoader& load,
                       const std::vector<Attribute>& attributes, OutputFiles& files);

bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);
// Entries of a folder other than "." and "..", sorted (empty when it cannot be read).
std::vector<std::string> list_folder(const std::string& dir);
// Free bytes for an unprivileged user on the file system of `dir`, or -1 if unknown.
std::int64_t free_bytes(const std::string& dir);

// ---- freeze and LoRA checkpoints (merge_adapters.cpp) ------------------------------------------

// How the run trained, from the root attributes (docs/checkpoint.md); "full" when there are none.
// A freeze or LoRA checkpoint holds only the trained tensors, the rest are the base model's.
struct Finetuning {
  std::string type = "full";  // "full", "freeze" or "lora"
  std::string base_model;     // the run's model_name_or_path; "" for an inline [model]
  std::string base_model_hash;
  std::int64_t seed = 0;  // an inline base is init_parameter(name, shape, seed)
  // LoRA. The modules trained whole beside the adapters are the tensors the checkpoint holds whole.
  std::int64_t lora_rank = 0;
  double lora_scaling = 0, lora_dropout = 0;
  bool use_rslora = false;
  bool use_dora = false;  // the adapters have DoRA magnitudes
  std::string quantized_base;  // "4-bit nf4 (double quantization)" for QLoRA; "" otherwise
  std::vector<std::string> lora_target;  // module names
};
// UsageError when an attribute it needs is missing or of another kind.
Finetuning read_finetuning(const Source& source);
// The root attributes above: a whole-model export does not carry them.
bool is_finetuning_attribute(const std::string& key);

// "model.layers.0.mlp.up_proj.lora_A.weight" -> {"model.layers.0.mlp.up_proj.weight", 'A'};
// DoRA's "....up_proj.lora_magnitude_vector" -> {..., 'M'}.
struct AdapterName {
  std::string parameter;
  char matrix = 'A';  // 'A': [r, in_features]; 'B': [out_features, r]; 'M': [out_features]
};
std::optional<AdapterName> adapter_name(const std::string& tensor);

// What is wrong with the LoRA adapters among `tensors` (the other tensors are not looked at): an
// adapter of something that is not a linear of the model, a shape other than [rank, in] /
// [out, rank] / [out], a lora_A without its lora_B or the reverse, with `dora` an adapter without
// its magnitude, without it a magnitude.
std::vector<std::string> adapter_problems(
    const std::vector<TensorInfo>& tensors,
    const std::map<std::string, std::vector<std::int64_t>>& expected, std::int64_t rank, bool dora);

// The tensors an export writes, in export order, and how to read each.
struct ExportTensors {
  std::vector<TensorInfo> tensors;
  TensorLoader load;
  std::string origin;  // where a freeze or LoRA checkpoint's whole model comes from; "" otherwise
};
// `stored`: model_tensors(source), checked. A full checkpoint: those tensors. A freeze or LoRA
// one as hf or hdf5: every parameter of the model, the checkpoint's when it holds it whole, else
// the base model's (its folder is checked against base_model_hash first), plus
// lora_scaling * B @ A where it has adapters. Peft (LoRA only): `stored`, named as PEFT saves them.
// UsageError for a format the checkpoint cannot be exported as, or a base that does not fit.
// The loader refers to `source`.
ExportTensors plan_export_tensors(const Source& source, const RunModel& run,
                                  const Finetuning& finetuning,
                                  const std::vector<TensorInfo>& stored, ExportFormat format);

// What an export writes, from its input: an lftrain checkpoint (merge.cpp) or a PEFT adapter
// folder over its base model (merge_peft_folder.cpp).
struct ExportPlan {
  std::shared_ptr<const Source> source;  // the checkpoint the loaders read (null for a PEFT folder)
  RunModel run;                          // the model: its config, and the folder of config.json and the tokenizer
  ExportTensors exported;                // model.safetensors / model.h5 / adapter_model.safetensors
  std::vector<TensorInfo> value_head;    // a reward model's head, written apart as value_head.safetensors
  TensorLoader value_head_load;
  std::vector<Attribute> attributes;     // model.h5's root attributes
  std::string adapter_config, adapter_summary;  // --format peft: adapter_config.json, its line
  std::string what;                      // "checkpoint DIR (step N)", for the report
};

// A folder PEFT saved (adapter_config.json) that is no lftrain checkpoint (no COMPLETE).
bool is_peft_adapter_folder(const std::string& path);
// The merged model of a PEFT LoRA adapter folder (o.checkpoint) over the base model folder
// o.expected_model (LlamaFactory main's `llamafactory-cli merge` of such a folder: PEFT's
// merge_and_unload), --format hf only. UsageError for a missing base, an adapter that does not
// fit it, or another format.
ExportPlan peft_folder_plan(const MergeOptions& o);

// A double as C++ streams print it ("0.5", "2").
std::string number_text(double value);

// W + scaling * B @ A in float32 (a LoRA merge); with a DoRA `magnitude` [out] each row of it
// rescaled to its magnitude, as PEFT merges.
at::Tensor merge_lora_weight(const at::Tensor& w, const at::Tensor& a, const at::Tensor& b, double scaling,
                             const at::Tensor& magnitude = {});

// adapter_config.json of a --format peft export, as peft 0.21.2 writes it.
std::string peft_adapter_config(const Finetuning& finetuning,
                                const std::vector<TensorInfo>& stored);

}  // namespace lft::ckpt::merge_detail
