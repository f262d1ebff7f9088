// lfmerge: reading a checkpoint, rebuilding its model config, checking names and shapes.
#include <ATen/ATen.h>
#include <H5Apublic.h>
#include <H5FDsec2.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <set>
#include <functional>
#include <sstream>
#include <toml.hpp>
#include <yaml-cpp/yaml.h>

#include "lft/ckpt/checkpoint.h"
#include "lft/runtime/text.h"
#include "lft/ckpt/checkpoint_files.h"
#include "lft/ckpt/merge.h"
#include "lft/config/config.h"
#include "lft/model/score_head.h"
#include "lft/config/schema.h"
#include "lft/model/families.h"
#include "lft/runtime/check.h"
#include "lft/runtime/error.h"
#include "merge_internal.h"
#include "store_util.h"

namespace lft::ckpt {
namespace merge_detail {
namespace {

constexpr const char* kOverridePrefix = "# override: ";

herr_t collect_attribute_name(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

// The root attributes of the store's main file (state.h5, or state/rank-00000.h5), read with the
// serial driver, without locking (as StoreReader opens it).
std::vector<Attribute> read_root_attributes(const std::string& file) {
  using namespace detail;
  QuietH5Errors quiet;
  H5PropList fapl(LFT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  LFT_H5_CHECK(H5Pset_fapl_sec2(fapl.get()));
  LFT_H5_CHECK(H5Pset_file_locking(fapl.get(), 0, 1));
  H5File f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, fapl.get()));
  const std::string cannot = "cannot read the attributes of " + file + ": ";
  if (!f.valid()) throw UsageError(cannot + h5_error_text());
  H5Object root(H5Oopen(f.get(), "/", H5P_DEFAULT));
  if (!root.valid()) throw UsageError(cannot + h5_error_text());
  std::vector<std::string> names;
  hsize_t index = 0;
  if (H5Aiterate2(root.get(), H5_INDEX_NAME, H5_ITER_INC, &index, collect_attribute_name, &names) <
      0)
    throw UsageError(cannot + h5_error_text());
  std::vector<Attribute> out;
  for (const std::string& key : names) {
    if (key.rfind("store_", 0) == 0) continue;  // the store's own, rewritten by any writer
    H5Attribute a(H5Aopen(root.get(), key.c_str(), H5P_DEFAULT));
    if (!a.valid()) throw UsageError(cannot + h5_error_text());
    H5Datatype type(H5Aget_type(a.get()));
    H5Dataspace space(H5Aget_space(a.get()));
    if (!type.valid() || !space.valid()) throw UsageError(cannot + h5_error_text());
    const H5T_class_t cls = H5Tget_class(type.get());
    const H5S_class_t shape = H5Sget_simple_extent_type(space.get());
    const int ndims = shape == H5S_SIMPLE ? H5Sget_simple_extent_ndims(space.get()) : 0;
    Attribute attr;
    attr.key = key;
    std::string err;
    bool ok = true;
    if (cls == H5T_STRING) {
      attr.kind = Attribute::Kind::String;
      auto v = read_string_attr(root.get(), key, &err);
      if ((ok = v.has_value())) attr.s = *v;
    } else if (cls == H5T_INTEGER && shape == H5S_SCALAR) {
      attr.kind = Attribute::Kind::Int;
      auto v = read_int_attr(root.get(), key, &err);
      if ((ok = v.has_value())) attr.i = *v;
    } else if (cls == H5T_INTEGER && (shape == H5S_NULL || ndims == 1)) {
      attr.kind = Attribute::Kind::IntVector;
      auto v = read_int_vector_attr(root.get(), key, &err);
      if ((ok = v.has_value())) attr.v = *v;
    } else if (cls == H5T_FLOAT && shape == H5S_SCALAR) {
      attr.kind = Attribute::Kind::Double;
      auto v = read_double_attr(root.get(), key, &err);
      if ((ok = v.has_value())) attr.d = *v;
    } else {
      continue;  // not a kind lftrain writes: not ours to interpret
    }
    if (!ok) throw UsageError(cannot + err);
    out.push_back(std::move(attr));
  }
  return out;
}

}  // namespace

bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) &&
        std::isdigit(static_cast<unsigned char>(b[j]))) {
      std::size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      const std::string na = a.substr(i, ie - i), nb = b.substr(j, je - j);
      const std::size_t za = na.find_first_not_of('0'), zb = nb.find_first_not_of('0');
      const std::string ta = za == std::string::npos ? "" : na.substr(za);
      const std::string tb = zb == std::string::npos ? "" : nb.substr(zb);
      if (ta.size() != tb.size()) return ta.size() < tb.size();
      if (ta != tb) return ta < tb;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

namespace {

bool overridden(const std::vector<std::string>& overrides, const std::string& path) {
  for (const std::string& o : overrides) {
    std::string key = o.substr(0, o.find('='));
    key.erase(std::remove_if(key.begin(), key.end(), ::isspace), key.end());
    if (key == path) return true;
  }
  return false;
}

// Whether the YAML `root` or the overrides set the dotted key `path`.
bool is_set_in(const YAML::Node& root, const std::vector<std::string>& overrides, const std::string& path) {
  if (overridden(overrides, path)) return true;
  YAML::Node v = root;
  std::size_t begin = 0;
  while (true) {
    const std::size_t dot = path.find('.', begin);
    const std::string part = path.substr(begin, dot == std::string::npos ? dot : dot - begin);
    if (!v.IsMap() || !v[part]) return false;
    v = v[part];
    if (dot == std::string::npos) return true;
    begin = dot + 1;
  }
}

// Whether the TOML `text` or the overrides set the dotted key `path`.
bool is_set_in(const toml::value& root, const std::vector<std::string>& overrides,
               const std::string& path) {
  if (overridden(overrides, path)) return true;
  const toml::value* v = &root;
  std::size_t begin = 0;
  while (true) {
    const std::size_t dot = path.find('.', begin);
    const std::string part = path.substr(begin, dot == std::string::npos ? dot : dot - begin);
    if (!v->is_table() || v->as_table().count(part) == 0) return false;
    v = &v->as_table().at(part);
    if (dot == std::string::npos) return true;
    begin = dot + 1;
  }
}

}  // namespace

Source open_checkpoint(const std::string& path, bool allow_incomplete) {
  const std::string what =
      "pass a checkpoint folder (output_dir/checkpoint-<step>, holding COMPLETE and state.h5 or "
      "state/)";
  if (!path_exists(path)) throw UsageError("checkpoint " + path + " does not exist: " + what);
  std::string folder = path, state;
  const bool folder_is_store = is_directory(path) && path_exists(path + "/rank-00000.h5");
  if (!is_directory(path) || folder_is_store) {
    if (!allow_incomplete) throw UsageError(path + " is not a checkpoint folder: " + what);
    folder.clear();
    state = path;
  } else {
    state = state_path(path);
    if (!path_exists(state))
      throw UsageError(
          path + " is not an lftrain checkpoint (it has neither state.h5 nor state/): " + what);
  }
  const bool complete = !folder.empty() && is_complete(folder);
  if (!folder.empty() && !complete && !allow_incomplete)
    throw UsageError("checkpoint " + path +
                     " is incomplete (no COMPLETE file: its save was cut short): merge a complete "
                     "checkpoint instead; output_dir/latest names the newest one");
  Source source{folder, state, "", complete, StoreReader(MPI_COMM_SELF, state), {}, std::nullopt, ""};
  source.main_file =
      source.reader.mode() == StoreMode::PerRank ? state + "/" + detail::rank_file_name(0) : state;
  source.attributes = read_root_attributes(source.main_file);
  try {
    source.manifest = read_manifest(source.reader, state);
  } catch (const UsageError& e) {
    if (!folder.empty() && !allow_incomplete) throw;
    source.manifest_error = e.what();
  }
  return source;
}

RunModel rebuild_model(const Source& source) {
  if (!source.manifest)
    throw UsageError(source.state + " has no readable manifest (" + source.manifest_error +
                     "): lfmerge cannot tell which model it holds; was it written by lftrain?");
  const std::string& text = source.manifest->run.config_text;
  std::vector<std::string> overrides;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind(kOverridePrefix, 0) == 0)
      overrides.push_back(line.substr(std::strlen(kOverridePrefix)));
  }
  // A run configured by a LlamaFactory YAML file saved YAML (root attribute config_file).
  const std::string& file = source.manifest->run.config_file;
  const bool yaml = ends_with(file, ".yaml") || ends_with(file, ".yml");
  // The data (and DeepSpeed) files of the run do not matter for an export, and relative paths
  // would only resolve in the directory the run started in: point them at files that exist.
  try {
    std::function<bool(const std::string&)> is_set;
    toml::value root;
    YAML::Node yaml_root;
    if (yaml) {
      yaml_root = YAML::Load(text);
      is_set = [&](const std::string& path) { return is_set_in(yaml_root, overrides, path); };
    } else {
      std::istringstream is(text);
      root = toml::parse(is, "<checkpoint config>");
      is_set = [&](const std::string& path) { return is_set_in(root, overrides, path); };
    }
    const std::string& any_file = source.main_file;
    const std::string any_dir = detail::parent_dir(source.main_file);
    std::vector<std::string> substitutes;
    for (const config::KeySpec& spec : config::schema()) {
      if (spec.path_check != config::PathCheck::File &&
          spec.path_check != config::PathCheck::Directory)
        continue;
      if (!is_set(spec.path)) continue;
      substitutes.push_back(spec.path + "=" +
                            (spec.path_check == config::PathCheck::File ? any_file : any_dir));
    }
    overrides.insert(overrides.end(), substitutes.begin(), substitutes.end());
  } catch (const std::exception&) {
    // Not valid TOML: parse_config below says where.
  }
  const std::string where =
      "the run configuration saved in " + source.state + " (attribute 'config')";
  const std::string hint =
      "\nlfmerge reads a run's model_name_or_path (config.json, tokenizer files) as the run did: "
      "start it in the directory the training run was started in, or restore that folder";
  RunModel run;
  try {
    const config::Config cfg = config::parse_config(text, yaml ? "<checkpoint config>.yaml" : "<checkpoint config>", overrides);
    run.config = model::ModelConfig::from_run_config(cfg);
    model::set_score_head(run.config, cfg.string("stage"), cfg.string("rm_head"));
    if (!cfg.has_table("model")) run.model_folder = cfg.string("model_name_or_path");
  } catch (const config::ConfigError& e) {
    throw UsageError(where + " does not give a model: " + e.what() + hint);
  }
  return run;
}

std::vector<TensorInfo> model_tensors(const Source& source) {
  std::vector<TensorInfo> out;
  for (TensorInfo t : source.reader.tensors("model")) {
    t.name = t.name.substr(std::string("model/").size());
    out.push_back(std::move(t));
  }
  sort_export_order(out);
  return out;
}

void sort_export_order(std::vector<TensorInfo>& tensors) {
  auto rank = [](const std::string& n) { return n.rfind("lm_head.", 0) == 0 ? 1 : 0; };
  std::sort(tensors.begin(), tensors.end(), [&](const TensorInfo& a, const TensorInfo& b) {
    if (rank(a.name) != rank(b.name)) return rank(a.name) < rank(b.name);
    return natural_less(a.name, b.name);
  });
}

bool frozen_in_full_run(const model::ModelConfig& config, const std::string& name) {
  return config.score_head != model::ScoreHead::None && name == "lm_head.weight";
}

void check_model_tensors(const Source& source, const std::vector<TensorInfo>& tensors,
                         const model::ModelConfig& config, const Finetuning& finetuning) {
  const auto expected = expected_parameter_shapes(config);
  const bool lora = finetuning.type == "lora";
  std::vector<std::string> problems;
  if (lora) problems = adapter_problems(tensors, expected, finetuning.lora_rank, finetuning.use_dora);
  std::set<std::string> seen;
  for (const TensorInfo& t : tensors) {
    if (lora && adapter_name(t.name)) continue;
    seen.insert(t.name);
    const std::string id = "tensor '/model/" + t.name + "'";
    if (t.name.rfind("model.", 0) != 0 && t.name != "lm_head.weight" && !model::is_score_head_parameter(t.name)) {
      problems.push_back(id + " is not a Hugging Face parameter name (model.*, lm_head.weight, or a reward model's v_head.summary.* or score.*)");
      continue;
    }
    if (!at::isFloatingType(t.dtype)) {
      problems.push_back(id + " has dtype " + dtype_name(t.dtype) + ", not a floating-point one");
      continue;
    }
    auto it = expected.find(t.name);
    if (it == expected.end()) {
      problems.push_back(id + " is not a parameter of the run's model" +
                         (t.name == "lm_head.weight" && config.tie_word_embeddings
                              ? std::string(" (it has tie_word_embeddings = true: no lm_head)")
                              : std::string()));
    } else if (it->second != t.shape) {
      problems.push_back(id + " has shape " + shape_text(t.shape) +
                         ", the run's model config gives " + shape_text(it->second));
    }
  }
  if (finetuning.type == "full")  // a freeze or LoRA checkpoint holds only what trained
    for (const auto& [name, shape] : expected)
      if (seen.count(name) == 0 && !frozen_in_full_run(config, name))
        problems.push_back("tensor '/model/" + name + "' " + shape_text(shape) + " is missing");
  if (problems.empty()) return;
  std::string msg = source.state + " does not hold the model of its run configuration (" +
                    config.summary() + "): " + std::to_string(problems.size()) + " problem" +
                    (problems.size() == 1 ? "" : "s");
  const std::size_t shown = std::min<std::size_t>(problems.size(), 12);
  for (std::size_t i = 0; i < shown; ++i) msg += "\n  " + problems[i];
  if (shown < problems.size())
    msg += "\n  ... and " + std::to_string(problems.size() - shown) + " more";
  msg +=
      "\nwas the checkpoint written by this run, and by an lftrain that names tensors as "
      "Hugging Face does?";
  throw UsageError(msg);
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return detail::shape_str(shape); }

std::int64_t numel(const std::vector<std::int64_t>& shape) { return detail::numel_of(shape); }

std::string human_bytes(std::int64_t bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof(buf), "%" PRId64 " B", bytes);
  else
    std::snprintf(buf, sizeof(buf), "%.2f %s", v, units[u]);
  return buf;
}

std::string dtype_name(at::ScalarType dtype) {
  try {
    return store_dtype_name(dtype);
  } catch (const std::invalid_argument&) {
    return c10::toString(dtype);
  }
}

}  // namespace merge_detail

std::map<std::string, std::vector<std::int64_t>> expected_parameter_shapes(
    const model::ModelConfig& config) {
  // The model itself, on the meta device: no memory, and the names and shapes training saves.
  torch::NoGradGuard no_grad;
  const auto m = model::create_causal_lm(config, at::TensorOptions().device(at::kMeta).dtype(at::kFloat));
  std::map<std::string, std::vector<std::int64_t>> out;
  for (const auto& p : m->named_parameters(/*recurse=*/true))
    out[p.key()] = p.value().sizes().vec();
  return out;
}

}  // namespace lft::ckpt
