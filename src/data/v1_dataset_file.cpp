// LlamaFactory v1's dataset files (v1/core/data_engine.py, plugins/data_plugins/{loader,converter}.py).
#include "lft/data/v1_dataset_file.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <sys/stat.h>

#include <cmath>
#include <map>
#include <set>

#include "lft/runtime/error.h"

namespace lft::data {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

[[noreturn]] void bad(const std::string& file, const std::string& entry, const std::string& what,
                      const std::string& hint) {
  throw UsageError(file + ": dataset \"" + entry + "\": " + what + "\n  hint: " + hint);
}

std::string scalar(const YAML::Node& node, const std::string& file, const std::string& entry, const std::string& key) {
  if (!node.IsScalar()) bad(file, entry, "'" + key + "' must be a string", "write e.g. " + key + ": value");
  return node.Scalar();
}

const std::set<std::string> kKeys{"path", "source", "converter", "size", "weight", "split", "streaming"};

// The most records one entry's size may draw: the draws are held as 64-bit indices and copies of
// the records before tokenizing, so a larger count cannot be a dataset this process can hold.
constexpr std::int64_t kMaxDrawn = (std::int64_t{1} << 31) - 1;

}  // namespace

bool is_v1_dataset_file(const std::string& path) {
  const std::string ext = ".yaml";
  return path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

std::vector<DatasetSource> read_v1_dataset_file(const std::string& file) {
  if (!exists(file)) throw UsageError(file + ": dataset file not found");
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::DeepRecursion& e) {  // yaml-cpp words it "bad file"
    throw UsageError(file + ":" + std::to_string(e.mark.line + 1) + ": values nested more than " +
                     std::to_string(e.depth() - 1) + " levels deep: a v1 dataset file maps names to flat entries");
  } catch (const YAML::Exception& e) {
    throw UsageError(file + ": YAML error: " + e.what());
  }
  if (!root.IsMap() || root.size() == 0)
    throw UsageError(file + ": a v1 dataset file maps dataset names to {path, source, converter, size, weight}");
  std::vector<DatasetSource> out;
  std::map<std::string, int> lines;  // each entry's line: a name given twice is refused, as v1 does
  for (const auto& kv : root) {
    const std::string name = kv.first.Scalar();
    const int line = kv.first.Mark().line + 1;
    if (const auto seen = lines.find(name); seen != lines.end())
      bad(file + ":" + std::to_string(line), name,
          "named twice (also at line " + std::to_string(seen->second) + "): both entries would be read",
          "give each dataset one entry, or name them apart");
    lines.emplace(name, line);
    const YAML::Node& e = kv.second;
    if (!e.IsMap()) bad(file, name, "an entry is a mapping", "give path, source: local and a converter");
    for (const auto& key : e)
      if (!kKeys.count(key.first.Scalar()))
        bad(file, name, "unknown key '" + key.first.Scalar() + "'",
            "v1's dataset keys are path, source, converter, size, weight, split and streaming");
    if (!e["path"]) bad(file, name, "no 'path'", "give the data file, e.g. path: data/identity.json");
    DatasetSource s;
    s.name = name;
    s.path = scalar(e["path"], file, name, "path");
    const std::string source = e["source"] ? scalar(e["source"], file, name, "source") : "hf_hub";
    if (source != "local")
      bad(file, name, "source: " + source + " downloads from the Hugging Face Hub, which lftrain does not do",
          "download the dataset (e.g. huggingface-cli download --repo-type dataset " + s.path +
              "), then give its file as path with source: local");
    if (!exists(s.path))
      bad(file, name, "path " + s.path + " does not exist (v1 reads it relative to the working directory)",
          "run from the folder the paths are relative to, or give an absolute path");
    const std::string converter = e["converter"] ? scalar(e["converter"], file, name, "converter") : "";
    if (converter == "alpaca") {
      s.options.format = "alpaca";
      s.options.columns.query_separator = "";  // v1 joins instruction and input with nothing between
    } else if (converter == "sharegpt") {
      s.options.format = "sharegpt";
    } else if (converter.empty()) {
      s.options.format = "messages";  // v1's own records: messages, or main's pairs (sft_records.cpp)
    } else if (converter == "pair") {
      s.options.format = "pair";  // preference pairs: read with stage = "dpo" (refused otherwise)
      s.options.columns.ranking = true;
    } else {
      bad(file, name, "unknown converter '" + converter + "'", "v1's converters are alpaca, sharegpt and pair");
    }
    if (e["split"] && scalar(e["split"], file, name, "split") != "train")
      bad(file, name, "split: " + e["split"].Scalar() + ": a local file has only the split \"train\"",
          "remove split, or write split: train");
    if (e["streaming"] && e["streaming"].as<bool>(false))
      bad(file, name, "streaming: true is not supported: lftrain tokenizes the whole dataset before training",
          "remove streaming");
    try {
      if (e["size"]) s.v1_size = e["size"].as<std::int64_t>();
      if (e["weight"]) s.v1_weight = e["weight"].as<double>();
    } catch (const YAML::Exception&) {
      bad(file, name, "size must be an integer and weight a number", "write e.g. size: 500 or weight: 0.5");
    }
    if (e["size"] && s.v1_size < 0) bad(file, name, "size must be >= 0", "write e.g. size: 500");
    if (e["size"] && s.v1_size > kMaxDrawn)
      bad(file, name, "size: " + std::to_string(s.v1_size) + " would draw more records than one process holds (at most " +
                          std::to_string(kMaxDrawn) + ")",
          "give the number of records to draw, e.g. size: 500");
    if (e["weight"] && !(s.v1_weight >= 0 && std::isfinite(s.v1_weight)))
      bad(file, name, "weight must be a number >= 0", "write e.g. weight: 0.5");
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace lft::data
