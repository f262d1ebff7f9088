#include "lft/data/dataset_registry.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lft/runtime/error.h"
#include "lft/runtime/json_nesting.h"
#include "lft/runtime/text.h"
#include "lft/runtime/stage.h"

namespace lft::data {
namespace {

using nlohmann::json;

json read_registry(const std::string& file) {
  std::ifstream in(file);
  if (!in)
    throw UsageError(file + " not found: `dataset` names entries of dataset_dir/dataset_info.json; set "
                            "dataset_dir to the folder that holds it (LlamaFactory's data/), or name "
                            "files with train_dataset");
  std::stringstream text;
  text << in.rdbuf();
  if (const std::string deep = json_too_deep(text.str()); !deep.empty()) throw UsageError(file + ": " + deep);
  json root = json::parse(text.str(), nullptr, false);
  if (root.is_discarded() || !root.is_object())
    throw UsageError(file + " is not a JSON object of dataset entries (invalid JSON?)");
  return root;
}

std::string nearest_name(const std::string& name, const json& root) {
  std::string best;
  std::size_t best_distance = 3;  // further than 2 edits is no suggestion
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::size_t d = lft::edit_distance(name, it.key());
    if (d < best_distance) {
      best_distance = d;
      best = it.key();
    }
  }
  return best;
}

// `object[key]` as a string into `out`; absent keeps `out`; anything else is an error.
void read_string(const json& object, const char* key, std::string& out, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return;
  if (!it->is_string()) throw UsageError(where + ": \"" + key + "\" must be a string");
  out = it->get<std::string>();
}

// A `columns` or `tags` object: the keys it names, and nothing else (LlamaFactory's rule).
void read_names(const json& entry, const char* group, const std::vector<std::pair<const char*, std::string*>>& fields,
                const std::string& where, std::vector<std::pair<std::string, std::string>>* named = nullptr) {
  const auto it = entry.find(group);
  if (it == entry.end() || it->is_null()) return;
  if (!it->is_object()) throw UsageError(where + ": \"" + group + "\" must be an object");
  for (auto f = it->begin(); f != it->end(); ++f) {
    for (const char* unsupported : {"images", "videos", "audios"})
      if (f.key() == unsupported)
        throw UsageError(where + ": " + group + " \"" + f.key() + "\" (media) is not supported by lftrain");
    if (std::none_of(fields.begin(), fields.end(), [&](const auto& field) { return f.key() == field.first; }))
      throw UsageError(where + ": unknown " + group + " key \"" + f.key() + "\"");
  }
  for (const auto& [key, target] : fields) {
    *target = "";
    read_string(*it, key, *target, where + ": " + group);
    if (named != nullptr && it->contains(key) && !target->empty()) named->emplace_back(key, *target);
  }
}

DatasetSource source_of(const std::string& name, const json& entry, const std::string& dir,
                        const std::string& registry, const std::string& stage, std::int64_t max_samples) {
  const std::string where = registry + ": \"" + name + "\"";
  if (!entry.is_object()) throw UsageError(where + " must be an object with a file_name");
  for (const char* hub : {"hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name"})
    if (entry.contains(hub))
      throw UsageError(where + " is a remote dataset (" + hub + "): lftrain reads local files only; "
                       "download it and give it a file_name");
  if (!entry.contains("file_name")) throw UsageError(where + " has no file_name");
  if (entry.contains("num_samples"))
    throw UsageError(where + ": num_samples (a random subset) is not supported; use max_samples (the first "
                             "records) in the run's config");
  const auto ranking = entry.find("ranking");
  if (ranking != entry.end() && !ranking->is_boolean())
    throw UsageError(where + ": \"ranking\" must be true or false");
  const bool pairs = ranking != entry.end() && ranking->get<bool>();
  if (pairs && !trains_on_pairs(stage))
    throw UsageError(where + " is ranking data (ranking: true): preference pairs train with stage = \"dpo\" or \"rm\", not " +
                     stage);
  if (!pairs && trains_on_pairs(stage))
    throw UsageError(where + " is not ranking data: stage = \"" + stage + "\" trains on preference pairs; mark a pair dataset "
                             "with \"ranking\": true (and its chosen / rejected columns)");
  DatasetSource s;
  s.name = name;
  s.max_samples = max_samples;
  std::string file;
  read_string(entry, "file_name", file, where);
  s.path = !file.empty() && file[0] == '/' ? file : dir + "/" + file;  // as os.path.join
  struct stat st {};
  if (::stat(s.path.c_str(), &st) != 0)
    throw UsageError(where + ": file " + s.path + " not found");
  if (S_ISDIR(st.st_mode))
    throw UsageError(where + ": " + s.path + " is a folder; lftrain reads one file per dataset entry");
  std::string formatting = "alpaca";
  read_string(entry, "formatting", formatting, where);
  if (formatting != "alpaca" && formatting != "sharegpt")
    throw UsageError(where + ": formatting \"" + formatting + "\" is not supported; use alpaca or sharegpt");

  SftColumns& c = s.options.columns;
  c.history = "";  // LlamaFactory reads history, system and tools only when `columns` names them
  c.system = "";
  c.tools = "";
  c.ranking = pairs;
  read_names(entry, "columns",
             {{"prompt", &c.prompt}, {"query", &c.query}, {"response", &c.response}, {"history", &c.history},
              {"system", &c.system}, {"tools", &c.tools}, {"messages", &c.messages}, {"chosen", &c.chosen},
              {"rejected", &c.rejected}},
             where, &s.named_columns);
  if (pairs && c.chosen.empty()) c.chosen = "chosen";  // LlamaFactory's default column names
  if (pairs && c.rejected.empty()) c.rejected = "rejected";
  s.registry_entry = where;
  read_names(entry, "tags",
             {{"role_tag", &c.role_tag}, {"content_tag", &c.content_tag}, {"user_tag", &c.user_tag},
              {"assistant_tag", &c.assistant_tag}, {"observation_tag", &c.observation_tag},
              {"function_tag", &c.function_tag}, {"system_tag", &c.system_tag}},
             where);
  if (stage == "pt") {  // LlamaFactory's pre-training: the prompt column is the document
    s.options.format = "text";
    c.text = formatting == "alpaca" ? c.prompt : c.messages;
    if (formatting != "alpaca")
      throw UsageError(where + ": stage pt reads documents from an alpaca-formatted entry's prompt column");
  } else {
    s.options.format = formatting;
  }
  return s;
}

}  // namespace

std::vector<DatasetSource> resolve_datasets(const std::vector<std::string>& names, const std::string& dataset_dir,
                                            const std::string& stage, std::int64_t max_samples) {
  const std::string registry = dataset_dir + "/dataset_info.json";
  const json root = read_registry(registry);
  std::vector<DatasetSource> sources;
  for (const std::string& name : names) {
    const auto it = root.find(name);
    if (it == root.end()) {
      const std::string guess = nearest_name(name, root);
      throw UsageError("dataset \"" + name + "\" is not in " + registry +
                       (guess.empty() ? std::string() : "; did you mean \"" + guess + "\"?"));
    }
    sources.push_back(source_of(name, *it, dataset_dir, registry, stage, max_samples));
  }
  return sources;
}

}  // namespace lft::data
