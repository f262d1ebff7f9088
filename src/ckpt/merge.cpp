// lfmerge: the export plan and its execution, and --inspect (merge.h; the command line: merge_cli.cpp).
#include "lft/ckpt/merge.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lft/ckpt/checkpoint_files.h"
#include "lft/model/families.h"
#include "lft/model/score_head.h"
#include "lft/runtime/error.h"
#include "lft/runtime/text.h"
#include "merge_internal.h"
#include "store_util.h"

namespace lft::ckpt {

using namespace merge_detail;

namespace {

// Files copied byte for byte from a run's model_name_or_path folder when they exist.
const std::vector<std::string>& copied_model_files() {
  static const std::vector<std::string> names = {"tokenizer.json",
                                                 "tokenizer_config.json",
                                                 "special_tokens_map.json",
                                                 "tokenizer.model",
                                                 "generation_config.json",
                                                 "added_tokens.json",
                                                 "vocab.json",
                                                 "merges.txt",
                                                 "chat_template.jinja"};
  return names;
}

// A name this tool writes (what --force replaces), or its temporary file.
bool is_export_file(std::string name) {
  const std::string tmp = ".tmp";
  if (name.size() > tmp.size() && name.compare(name.size() - tmp.size(), tmp.size(), tmp) == 0)
    name.resize(name.size() - tmp.size());
  if (name == "model.safetensors" || name == "model.safetensors.index.json" || name == "model.h5" ||
      name == "config.json" || name == "adapter_model.safetensors" || name == "adapter_config.json" ||
      name == model::kValueHeadFile)
    return true;
  for (const std::string& n : copied_model_files())
    if (name == n) return true;
  // model-00001-of-00004.safetensors
  const std::string suffix = ".safetensors";
  if (name.size() != 6 + 5 + 4 + 5 + suffix.size() || name.compare(0, 6, "model-") != 0 ||
      name.compare(11, 4, "-of-") != 0 || name.compare(20, suffix.size(), suffix) != 0)
    return false;
  for (std::size_t i : {6, 7, 8, 9, 10, 15, 16, 17, 18, 19})
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return false;
  return true;
}

// Moves the export written aside in `from` over the earlier one in `dir`: each new file replaces
// its old namesake in one rename, then old export files the new export does not have are removed.
void swap_in_export(const std::string& from, const std::string& dir,
                    const std::vector<std::pair<std::string, std::string>>& written,
                    const std::vector<std::string>& old_entries) {
  std::set<std::string> fresh;
  for (const auto& w : written) {
    fresh.insert(w.first);
    if (::rename((from + "/" + w.first).c_str(), (dir + "/" + w.first).c_str()) != 0)
      throw MergeIoError("cannot move the new " + w.first + " into " + dir + ": " + std::strerror(errno));
  }
  for (const std::string& e : old_entries)
    if (is_export_file(e) && fresh.count(e) == 0 && !is_directory(dir + "/" + e)) ::unlink((dir + "/" + e).c_str());
  ::rmdir(from.c_str());
  if (const int rc = detail::fsync_path(dir, /*directory=*/true); rc != 0)
    throw MergeIoError("cannot sync the folder " + dir + ": " + std::strerror(rc));
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read " + path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// config.json: the run's model folder's (a [model] table's ModelConfig otherwise), with the dtype
// of the export (`dtype` for transformers 5, `torch_dtype` for 4.x).
std::string hf_config_json(const RunModel& run, at::ScalarType dtype) {
  nlohmann::ordered_json j;
  if (run.model_folder.empty()) {
    model::ModelConfig c = run.config;
    c.dtype = dtype_name(dtype);
    j = nlohmann::ordered_json::parse(c.to_hf_json());
  } else {
    const std::string path = run.model_folder + "/config.json";
    j = nlohmann::ordered_json::parse(read_text(path), nullptr, false);
    if (j.is_discarded() || !j.is_object())
      throw UsageError(path + " (the run's model_name_or_path) is not a JSON object");
  }
  if (run.config.score_head == model::ScoreHead::TokenClassification) {
    // transformers' ...ForTokenClassification with one label, as LlamaFactory main saves its reward model.
    std::string arch = j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty()
                           ? j["architectures"][0].get<std::string>()
                           : model::find_family(run.config.model_type)->architecture;
    const std::string causal = "ForCausalLM";
    if (arch.size() > causal.size() && ends_with(arch, causal)) arch.resize(arch.size() - causal.size());
    j["architectures"] = {arch + "ForTokenClassification"};
    j["id2label"] = {{"0", "LABEL_0"}};
    j["label2id"] = {{"LABEL_0", 0}};
    j["tie_word_embeddings"] = false;
  }
  j["dtype"] = dtype_name(dtype);
  j["torch_dtype"] = dtype_name(dtype);
  return j.dump(2) + "\n";
}

struct Shard {
  std::string file;
  std::vector<TensorInfo> tensors;
  std::int64_t bytes = 0;
};

// Greedy, in export order, as transformers shards: a new shard when the next tensor would push
// the current one past the limit (a tensor larger than the limit gets a shard of its own).
std::vector<Shard> plan_shards(const std::vector<TensorInfo>& tensors, std::int64_t element,
                               std::int64_t max_bytes) {
  std::vector<Shard> shards(1);
  for (const TensorInfo& t : tensors) {
    const std::int64_t bytes = numel(t.shape) * element;
    if (!shards.back().tensors.empty() && shards.back().bytes + bytes > max_bytes)
      shards.emplace_back();
    shards.back().tensors.push_back(t);
    shards.back().bytes += bytes;
  }
  if (shards.size() == 1) {
    shards[0].file = "model.safetensors";
  } else {
    char name[64];
    for (std::size_t k = 0; k < shards.size(); ++k) {
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
      shards[k].file = name;
    }
  }
  return shards;
}

std::string dtype_flag(at::ScalarType dtype) {
  return dtype == at::kBFloat16 ? "bf16" : dtype == at::kHalf ? "fp16" : "fp32";
}

std::string format_flag(ExportFormat format) {
  return format == ExportFormat::HuggingFace ? "hf"
         : format == ExportFormat::Hdf5      ? "hdf5"
                                             : "peft";
}

// The root attributes model.h5 carries: those of a whole model (a freeze or LoRA checkpoint's
// export is one).
std::vector<Attribute> whole_model_attributes(const Source& src) {
  std::vector<Attribute> out;
  for (const Attribute& a : src.attributes)
    if (!is_finetuning_attribute(a.key)) out.push_back(a);
  return out;
}

}  // namespace

namespace {

bool same_folder(const std::string& a, const std::string& b) {
  char ra[PATH_MAX], rb[PATH_MAX];
  if (::realpath(a.c_str(), ra) == nullptr || ::realpath(b.c_str(), rb) == nullptr) return a == b;
  return std::string(ra) == rb;
}

// LlamaFactory main's merge with infer_dtype auto: the model loads in its config's dtype and is
// cast to bf16 when that is float32.
at::ScalarType base_export_dtype(const RunModel& run) {
  if (run.model_folder.empty()) return at::kBFloat16;
  std::ifstream in(run.model_folder + "/config.json");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::string dtype;
  for (const char* key : {"dtype", "torch_dtype"})
    if (j.is_object() && j.contains(key) && j[key].is_string()) dtype = j[key].get<std::string>();
  return dtype == "float16" ? at::kHalf : at::kBFloat16;
}

}  // namespace

namespace {

// An lftrain checkpoint's export: its model (a freeze or LoRA run's over its base), checked.
ExportPlan checkpoint_plan(const MergeOptions& o) {
  ExportPlan p;
  auto src = std::make_shared<const Source>(open_checkpoint(o.checkpoint, /*allow_incomplete=*/false));
  p.source = src;
  p.run = rebuild_model(*src);
  if (!o.expected_model.empty() && !same_folder(o.expected_model, p.run.model_folder))
    throw UsageError("the export names model " + o.expected_model + ", but " + o.checkpoint + " was trained on " +
                     (p.run.model_folder.empty() ? std::string("an inline [model]") : p.run.model_folder) +
                     "\n  hint: give the base model folder the run trained on");
  const Finetuning finetuning = read_finetuning(*src);
  const std::vector<TensorInfo> stored = model_tensors(*src);
  check_model_tensors(*src, stored, p.run.config, finetuning);
  const ExportTensors exported = plan_export_tensors(*src, p.run, finetuning, stored, o.format);
  // A reward model's value head goes to value_head.safetensors beside the model or the adapter,
  // as LlamaFactory saves it (model.h5 keeps it with the rest).
  p.exported.load = exported.load;
  p.exported.origin = exported.origin;
  for (const TensorInfo& t : exported.tensors)
    if (o.format == ExportFormat::Hdf5 || !model::is_value_head_parameter(t.name)) p.exported.tensors.push_back(t);
  if (o.format != ExportFormat::Hdf5)
    for (const TensorInfo& t : stored)
      if (model::is_value_head_parameter(t.name)) p.value_head.push_back(t);
  p.value_head_load = [src](const TensorInfo& t) { return src->reader.read_full("model/" + t.name); };
  p.attributes = whole_model_attributes(*src);
  if (o.format == ExportFormat::Peft) {
    p.adapter_config = peft_adapter_config(finetuning, stored);
    p.adapter_summary = "LoRA r=" + std::to_string(finetuning.lora_rank) + ", PEFT's format";
  }
  p.what = "checkpoint " + o.checkpoint + " (step " + (src->manifest ? std::to_string(src->manifest->progress.step) : "?") + ")";
  return p;
}

// Steps 2-4 of an export: the plan of files, the output folder, the writing.
MergeReport write_export(const MergeOptions& o, const ExportPlan& plan) {
  const RunModel& run = plan.run;
  const std::vector<TensorInfo>& tensors = plan.exported.tensors;
  const std::int64_t element = static_cast<std::int64_t>(c10::elementSize(o.dtype));
  MergeReport report;
  report.model_summary = run.config.summary();
  report.tensor_count = static_cast<std::int64_t>(tensors.size());
  for (const TensorInfo& t : tensors) {
    report.parameters += numel(t.shape);
    report.total_bytes += numel(t.shape) * element;
  }
  const std::string dir = o.out_dir;
  std::vector<std::pair<std::string, std::string>> lines;  // file, description
  std::vector<Shard> shards;
  std::vector<std::string> copies;  // names copied from the model folder
  std::string config_json;
  if (o.format == ExportFormat::HuggingFace) {
    config_json = hf_config_json(run, o.dtype);
    shards = plan_shards(tensors, element, o.max_shard_bytes);
    for (const Shard& s : shards)
      lines.emplace_back(s.file,
                         std::to_string(s.tensors.size()) + " tensors, " + human_bytes(s.bytes));
    if (shards.size() > 1)
      lines.emplace_back("model.safetensors.index.json",
                         "weight_map of " + std::to_string(tensors.size()) + " tensors");
    lines.emplace_back("config.json", run.model_folder.empty()
                                          ? "from the run's [model] table"
                                          : "from " + run.model_folder + "/config.json");
    for (const std::string& name : copied_model_files()) {
      if (run.model_folder.empty() || !is_regular_file(run.model_folder + "/" + name)) continue;
      copies.push_back(name);
      lines.emplace_back(name, "copied from " + run.model_folder);
    }
  } else if (o.format == ExportFormat::Hdf5) {
    lines.emplace_back("model.h5", std::to_string(tensors.size()) + " tensors, " +
                                       human_bytes(report.total_bytes) + ", " +
                                       std::to_string(plan.attributes.size()) + " root attributes");
  } else {
    lines.emplace_back("adapter_model.safetensors", std::to_string(tensors.size()) + " tensors, " +
                                                        human_bytes(report.total_bytes));
    lines.emplace_back("adapter_config.json", plan.adapter_summary);
  }
  if (!plan.value_head.empty())
    lines.emplace_back(model::kValueHeadFile, std::to_string(plan.value_head.size()) + " tensors, the reward model's value head (TRL's)");
  for (const auto& l : lines) report.files.push_back(dir + "/" + l.first);

  // 3. The output folder.
  const bool existed = path_exists(dir);
  if (existed && !is_directory(dir))
    throw UsageError("--out " + dir + " exists and is not a folder: choose another --out");
  const std::vector<std::string> entries = existed ? list_folder(dir) : std::vector<std::string>{};
  if (!entries.empty() && !o.force)
    throw UsageError("output folder " + dir + " is not empty (" + std::to_string(entries.size()) +
                     " entries, e.g. '" + entries.front() +
                     "'): choose another --out, or pass --force to replace the export files in it");

  std::ostringstream text;
  text << (o.dry_run ? "lfmerge: dry run, nothing written. Would export " : "lfmerge: exported ")
       << plan.what << " to " << dir << " (" << format_flag(o.format) << ", " << dtype_flag(o.dtype)
       << "):\n";
  std::size_t width = 0;
  for (const auto& l : lines) width = std::max(width, l.first.size());
  for (const auto& l : lines)
    text << "  " << std::left << std::setw(static_cast<int>(width)) << l.first << "  " << l.second
         << "\n";
  text << report.tensor_count << " tensors, " << report.parameters << " parameters, "
       << human_bytes(report.total_bytes) << " (" << report.total_bytes << " bytes) as "
       << dtype_name(o.dtype) << "; model: " << report.model_summary << "\n";
  if (!plan.exported.origin.empty()) text << plan.exported.origin << "\n";
  report.text = text.str();
  if (o.dry_run) return report;

  // 4. Writing. From here on, a failure removes what was written. Over an earlier export
  // (--force) the new files are written aside, in DIR/.lfmerge-partial, and renamed over the old
  // ones only when all are written: a failure (no space) leaves the earlier export as it was.
  const bool aside = !entries.empty();
  const std::string out = aside ? dir + "/.lfmerge-partial" : dir;
  if (!existed) make_directories(dir);
  if (aside) {
    remove_tree(out);  // a previous --force cut short
    make_directories(out);
  }
  OutputFiles files(out, !existed || aside);
  const std::int64_t available = free_bytes(dir);
  // Tensor data, plus safetensors headers (~150 bytes a tensor) and small files.
  const std::int64_t needed = report.total_bytes + 256 * report.tensor_count +
                              16384 * static_cast<std::int64_t>(lines.size());
  if (available >= 0 && available < needed)
    throw MergeIoError("not enough space in " + dir + ": the export needs about " +
                       human_bytes(needed) + ", " + human_bytes(available) +
                       " are free: free space or choose another --out");

  const TensorLoader& load = plan.exported.load;
  if (o.format == ExportFormat::HuggingFace) {
    for (const Shard& s : shards)
      write_safetensors_streaming(out + "/" + s.file, s.tensors, o.dtype, load, files);
    if (shards.size() > 1) {
      nlohmann::json index;  // sorted keys, as transformers writes it
      index["metadata"]["total_size"] = report.total_bytes;
      index["metadata"]["total_parameters"] = report.parameters;
      index["weight_map"] = nlohmann::json::object();
      for (const Shard& s : shards)
        for (const TensorInfo& t : s.tensors) index["weight_map"][t.name] = s.file;
      write_text_file(out + "/model.safetensors.index.json", index.dump(2) + "\n", files);
    }
    write_text_file(out + "/config.json", config_json, files);
    for (const std::string& name : copies)
      copy_file(run.model_folder + "/" + name, out + "/" + name, files);
  } else if (o.format == ExportFormat::Hdf5) {
    write_hdf5_export(out + "/model.h5", tensors, o.dtype, load, plan.attributes, files);
  } else {
    write_safetensors_streaming(out + "/adapter_model.safetensors", tensors, o.dtype, load, files);
    write_text_file(out + "/adapter_config.json", plan.adapter_config, files);
  }
  if (!plan.value_head.empty())
    write_safetensors_streaming(out + "/" + model::kValueHeadFile, plan.value_head, o.dtype, plan.value_head_load, files);
  if (const int rc = detail::fsync_path(out, /*directory=*/true); rc != 0)
    throw MergeIoError("cannot sync the folder " + out + ": " + std::strerror(rc));
  if (aside) swap_in_export(out, dir, lines, entries);
  files.commit();
  return report;
}

}  // namespace

MergeReport merge_checkpoint(const MergeOptions& options) {
  MergeOptions o = options;
  if (o.checkpoint.empty()) throw UsageError("no checkpoint given: " + merge_usage());
  if (o.out_dir.empty()) throw UsageError("no output folder: pass --out DIR");
  if (o.dtype != at::kFloat && o.dtype != at::kBFloat16 && o.dtype != at::kHalf)
    throw UsageError("export dtype " + dtype_name(o.dtype) + " is not one of fp32, bf16, fp16");
  if (o.max_shard_bytes < 1) throw UsageError("--max-shard-size must be at least 1 byte");
  // 1. Everything about the input, before touching the output: an lftrain checkpoint, or a PEFT
  // adapter folder (merged onto the base model it names).
  const ExportPlan plan = is_peft_adapter_folder(o.checkpoint) ? peft_folder_plan(o) : checkpoint_plan(o);
  if (o.dtype_from_base) o.dtype = base_export_dtype(plan.run);
  return write_export(o, plan);
}

std::string inspect_checkpoint(const std::string& path) {
  const Source src = open_checkpoint(path, /*allow_incomplete=*/true);
  std::ostringstream os;
  auto row = [&](const char* label, const std::string& value) {
    os << std::left << std::setw(16) << label << value << "\n";
  };
  auto number = [](double v) {
    std::ostringstream text;
    text << v;
    return text.str();
  };
  std::string status;
  if (!src.folder.empty())
    status = src.complete ? " (complete)"
                          : " (INCOMPLETE: no COMPLETE file; its save was cut short, so it is "
                            "neither resumed from nor merged)";
  row("checkpoint", path + status);
  if (src.manifest) {
    const Manifest& m = *src.manifest;
    const RunInfo& run = m.run;
    row("format", std::string(kFormatName) + ", version " + std::to_string(m.format_version));
    row("lftrain version", m.lftrain_version);
    row("step", std::to_string(m.progress.step));
    row("tokens seen", std::to_string(m.progress.tokens_seen));
    row("engine", run.engine);
    const std::vector<std::int64_t>& mesh = run.mesh;
    // 4 sizes before context parallelism (pp, dp_replicate, dp_shard, tp), 5 since (cp before tp).
    if (mesh.size() == 4 || mesh.size() == 5)
      row("mesh", "pp=" + std::to_string(mesh[0]) + " dp_replicate=" + std::to_string(mesh[1]) +
                      " dp_shard=" + std::to_string(mesh[2]) +
                      (mesh.size() == 5 ? " cp=" + std::to_string(mesh[3]) : std::string()) +
                      " tp=" + std::to_string(mesh.back()));
    else
      row("mesh", shape_text(mesh));
    row("world size", std::to_string(run.world_size));
    row("global batch", std::to_string(run.global_batch));
    row("seed", std::to_string(run.seed));
    if (run.finetuning_type == "full" && !run.base_model_hash.empty())  // a DPO run's reference
      row("started from", (run.base_model.empty() ? std::string("the inline [model]") : run.base_model) + " (" +
                              (run.base_model_hash.rfind("seed ", 0) == 0 ? run.base_model_hash : "hash " + run.base_model_hash) + ")");
    if (run.finetuning_type != "full") {
      row("finetuning", run.finetuning_type);
      row("base model", run.base_model.empty() ? "the inline [model], initialised with the seed"
                                               : run.base_model + " (hash " + run.base_model_hash + ")");
    }
    if (run.finetuning_type == "lora") {
      row("lora", "rank " + std::to_string(run.lora_rank) + ", alpha " + number(run.lora_alpha) + ", scaling " +
                      number(run.lora_scaling) + ", dropout " + number(run.lora_dropout) + ", rslora " +
                      std::to_string(static_cast<int>(run.use_rslora)) + ", dora " +
                      std::to_string(static_cast<int>(run.use_dora)));
      if (run.quantization_bit != 0)
        row("base quantized", std::to_string(run.quantization_bit) + "-bit " + run.quantization_type +
                                  (run.double_quantization ? ", double quantization" : ""));
      row("lora target", run.lora_target);
      row("additional", run.additional_target.empty() ? "-" : run.additional_target);
    }
  } else {
    row("manifest", "(not readable: " + src.manifest_error + ")");
  }
  const bool shared = src.reader.mode() == StoreMode::SharedFile;
  row("store", std::string(shared ? "shared file " : "per-rank files in ") + src.state +
                   ", written by " + std::to_string(src.reader.store_world_size()) + " rank" +
                   (src.reader.store_world_size() == 1 ? "" : "s"));
  if (src.manifest) {
    std::ostringstream opt;
    opt << "step " << src.manifest->optimizer_steps;
    for (const auto& [key, value] : src.manifest->optimizer_hyperparameters) opt << ", " << key << " " << value;
    row("optimizer", opt.str());
  }
  if (!src.folder.empty() && src.manifest) {
    try {
      row("model", rebuild_model(src).config.summary());
    } catch (const std::exception& e) {
      const std::string m = e.what();
      row("model", "(not rebuilt: " + m.substr(0, m.find('\n')) + ")");
    }
  }

  std::vector<TensorInfo> all = src.reader.tensors();
  std::stable_sort(all.begin(), all.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return natural_less(a.name, b.name);
  });
  std::size_t name_w = 6, shape_w = 5;
  for (const TensorInfo& t : all) {
    name_w = std::max(name_w, t.name.size());
    shape_w = std::max(shape_w, shape_text(t.shape).size());
  }
  os << "\n"
     << std::left << std::setw(static_cast<int>(name_w)) << "tensor"
     << "  " << std::setw(static_cast<int>(shape_w)) << "shape"
     << "  " << std::setw(9) << "dtype" << std::right << std::setw(14) << "bytes"
     << "\n";
  struct Total {
    std::int64_t count = 0, numel = 0, bytes = 0;
  } model_total, optim_total, other_total;
  for (const TensorInfo& t : all) {
    const std::int64_t n = numel(t.shape);
    const std::int64_t bytes = n * static_cast<std::int64_t>(c10::elementSize(t.dtype));
    os << std::left << std::setw(static_cast<int>(name_w)) << t.name << "  "
       << std::setw(static_cast<int>(shape_w)) << shape_text(t.shape) << "  " << std::setw(9)
       << dtype_name(t.dtype) << std::right << std::setw(14) << bytes << "\n";
    Total& total = t.name.rfind("model/", 0) == 0   ? model_total
                   : t.name.rfind("optim/", 0) == 0 ? optim_total
                                                    : other_total;
    ++total.count;
    total.numel += n;
    total.bytes += bytes;
  }
  os << "\n";
  row("model", std::to_string(model_total.count) + " tensors, " +
                   std::to_string(model_total.numel) + " parameters, " +
                   human_bytes(model_total.bytes) + " (" + std::to_string(model_total.bytes) +
                   " bytes)");
  row("optimizer", std::to_string(optim_total.count) + " tensors, " +
                       human_bytes(optim_total.bytes) + " (" + std::to_string(optim_total.bytes) +
                       " bytes)");
  if (other_total.count > 0)
    row("other", std::to_string(other_total.count) + " tensors, " + human_bytes(other_total.bytes));
  const std::int64_t sum = model_total.bytes + optim_total.bytes + other_total.bytes;
  row("total", human_bytes(sum) + " (" + std::to_string(sum) + " bytes)");
  return os.str();
}

}  // namespace lft::ckpt
