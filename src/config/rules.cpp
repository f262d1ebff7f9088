// Rules across keys: the model source, required keys, contradictions, mesh and model shapes.
#include <algorithm>
#include <filesystem>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "internal.h"
#include "lft/config/batching.h"
#include "lft/runtime/stage.h"

namespace lft::config::detail {
namespace {

const Checked* get(const Input& in, const std::string& path) {
  auto it = in.entries.find(path);
  return it == in.entries.end() ? nullptr : &it->second;
}

Value value(const Input& in, const std::string& path) {
  if (const Checked* c = get(in, path)) return c->value;
  return *find_key(path)->default_value;
}

// Source order: the file by line and column, then the command line by argument.
bool later(const Location& a, const Location& b) {
  const bool a_cli = a.file == "<command line>";
  const bool b_cli = b.file == "<command line>";
  return std::tie(a_cli, a.line, a.column) > std::tie(b_cli, b.line, b.column);
}

// An error that involves two settings: reported at the later one, naming where the other is.
[[noreturn]] void fail_two(const Input& in, const Location& a, const std::string& a_name,
                           const Location& b, const std::string& b_name, const std::string& what,
                           const std::string& hint) {
  const bool a_later = later(a, b);
  const Location& primary = a_later ? a : b;
  const Location& other = a_later ? b : a;
  fail(in.file, &primary, what + "; " + (a_later ? b_name : a_name) + " is set at " + other.str(),
       hint, &other);
}

std::string shown(const Input& in, const std::string& path) {
  return path + " = " + format_value(value(in, path));
}

void model_source(const Input& in) {
  const Checked* folder = get(in, "model_name_or_path");
  auto table = in.tables.find("model");
  if (folder != nullptr && table != in.tables.end()) {
    fail_two(in, folder->loc, "key 'model_name_or_path'", table->second, "table [model]",
             "key 'model_name_or_path' and an inline [model] table both give the model",
             "set one of them: model_name_or_path to fine-tune a Hugging Face model, or [model] "
             "to train a new one from scratch");
  }
  if (folder == nullptr && table == in.tables.end()) {
    fail(in.file, nullptr,
         "no model: set model_name_or_path (a Hugging Face model folder) or an inline [model] "
         "table",
         "e.g. model_name_or_path = \"/models/Qwen2.5-0.5B\", or a [model] table with "
         "vocab_size, hidden_size, intermediate_size, num_hidden_layers and "
         "num_attention_heads");
  }
}

void required_keys(const Input& in) {
  for (const KeySpec& spec : schema()) {
    if (!spec.required_in_table || get(in, spec.path) != nullptr) continue;
    const std::size_t dot = spec.path.find('.');
    const std::string name = spec.path.substr(dot + 1);
    const std::string hint = "add " + name + " = <" + type_name(spec.type) + ">";
    if (dot == std::string::npos) {
      fail(in.file, nullptr, "missing required key '" + spec.path + "'",
           hint + " (" + spec.help + ")");
    }
    const std::string table = spec.path.substr(0, dot);
    auto it = in.tables.find(table);
    if (it == in.tables.end()) continue;
    fail(in.file, &it->second, "table [" + table + "] is missing required key '" + spec.path + "'",
         hint + " under [" + table + "] (" + spec.help + ")");
  }
}

void contradictions(const Input& in) {
  const std::string engine = std::get<std::string>(value(in, "distributed"));
  const EngineCapabilities& can = capabilities_of(engine);
  if (can.deepspeed_config && get(in, "deepspeed") == nullptr) {
    fail(in.file, &get(in, "distributed")->loc,
         "distributed = \"" + engine + "\" needs key 'deepspeed' (a DeepSpeed JSON config file)",
         "add deepspeed = \"path/to/ds_config.json\"");
  }
  const Checked* bf16 = get(in, "bf16");
  const Checked* fp16 = get(in, "fp16");
  if (bf16 && fp16 && std::get<bool>(bf16->value) && std::get<bool>(fp16->value)) {
    fail_two(in, bf16->loc, "key 'bf16'", fp16->loc, "key 'fp16'",
             "bf16 = true and fp16 = true contradict each other",
             "choose one mixed-precision mode: remove bf16 or fp16");
  }
  const Checked* fp8 = get(in, "fp8");
  if (fp8 && std::get<bool>(fp8->value) && !can.float8) {
    fail_two(in, fp8->loc, "key 'fp8'", get(in, "distributed")->loc, "distributed",
             "fp8 = true applies to distributed = " + engines_with(&EngineCapabilities::float8) + ", not \"" +
                 engine + "\"",
             "use fsdp2 for sharded float8 training (as torchtitan), or remove fp8");
  }
  const Checked* ratio = get(in, "warmup_ratio");
  const Checked* steps = get(in, "warmup_steps");
  if (ratio && steps && std::get<double>(ratio->value) != 0 &&
      std::get<std::int64_t>(steps->value) != 0) {
    fail_two(
        in, ratio->loc, "key 'warmup_ratio'", steps->loc, "key 'warmup_steps'",
        shown(in, "warmup_ratio") + " and " + shown(in, "warmup_steps") + " contradict each other",
        "set one of warmup_ratio and warmup_steps");
  }
  const Checked* global_batch = get(in, "global_batch_size");
  const Checked* accumulation = get(in, "gradient_accumulation_steps");
  if (global_batch && accumulation)
    fail_two(in, global_batch->loc, "key 'global_batch_size'", accumulation->loc, "key 'gradient_accumulation_steps'",
             "global_batch_size sets gradient_accumulation_steps, which is set too",
             "set one of global_batch_size and gradient_accumulation_steps");
  const Checked* max_steps = get(in, "max_steps");
  const Checked* epochs = get(in, "num_train_epochs");
  // In a LlamaFactory YAML 0 is the Hugging Face Trainer's "no limit" (num_train_epochs decides);
  // lftrain's own files say -1 for that, and 0 would read as "train no step".
  if (max_steps && std::get<std::int64_t>(max_steps->value) == 0 && !in.yaml)
    fail(in.file, &max_steps->loc, "max_steps = 0 would train no step",
         "give the number of steps, or -1 (the default) to run num_train_epochs epochs");
  // A LlamaFactory YAML often keeps num_train_epochs beside max_steps, which then wins (as in the
  // Hugging Face Trainer).
  if (max_steps && epochs && std::get<std::int64_t>(max_steps->value) != -1 && !in.yaml) {
    fail_two(
        in, max_steps->loc, "key 'max_steps'", epochs->loc, "key 'num_train_epochs'",
        shown(in, "max_steps") + " and " + shown(in, "num_train_epochs") + " contradict each other",
        "set one of max_steps and num_train_epochs (max_steps = -1 uses num_train_epochs)");
  }
}

void data_sources(const Input& in) {
  const Checked* files = get(in, "train_dataset");
  const Checked* named = get(in, "dataset");
  if (files == nullptr && named == nullptr)
    fail(in.file, nullptr, "missing required key 'train_dataset' (or 'dataset')",
         "add train_dataset = \"path/to/data.jsonl\", or dataset = \"name\" with the name's entry in "
         "dataset_dir/dataset_info.json");
  if (files != nullptr && named != nullptr)
    fail_two(in, files->loc, "key 'train_dataset'", named->loc, "key 'dataset'",
             "train_dataset (files) and dataset (names) both say what to train on",
             "keep one of them");
  const Checked* eval = get(in, "eval_dataset");
  const Checked* val_size = get(in, "val_size");
  if (eval != nullptr && val_size != nullptr && std::get<double>(val_size->value) > 0)
    fail_two(in, eval->loc, "key 'eval_dataset'", val_size->loc, "key 'val_size'",
             "eval_dataset and val_size both say what to evaluate on", "keep one of them");
}

// A pair's chosen and rejected sequences are never packed, and pairs are not evaluated.
void pair_stage_keys(const Input& in, const std::string& stage) {
  for (const char* key : {"packing", "neat_packing"})
    if (const Checked* c = get(in, key); c != nullptr && std::get<bool>(c->value))
      fail(in.file, &c->loc, std::string(key) + " = true with stage = \"" + stage + "\": a pair's chosen and rejected answers are "
                             "sequences of their own, compared as wholes, so they are never packed (as LlamaFactory)",
           std::string("remove ") + key);
  for (const char* key : {"val_size", "eval_dataset"})
    if (const Checked* c = get(in, key); c != nullptr && (std::string(key) == "eval_dataset" || std::get<double>(c->value) > 0))
      fail(in.file, &c->loc, std::string(key) + " with stage = \"" + stage + "\": evaluation of preference pairs (eval rewards) is not "
                             "built in this version",
           std::string("remove ") + key + "; the training log has the rewards of every step");
}

// The preference keys only with stage = "dpo" (pref_loss_weighting: or "rm"; rm_head: "rm"), and what
// the pair stages (dpo, rm) do not combine with.
void preference_keys(const Input& in) {
  const std::string stage = std::get<std::string>(value(in, "stage"));
  const Checked* st = get(in, "stage");
  auto only_with = [&](const char* key, const std::vector<std::string>& stages) {
    const Checked* c = get(in, key);
    if (c == nullptr || std::find(stages.begin(), stages.end(), stage) != stages.end()) return;
    const std::string wanted = "stage = \"" + stages.front() + "\"" + (stages.size() > 1 ? " or \"" + stages[1] + "\"" : "");
    const std::string what = std::string("key '") + key + "' applies to " + wanted + ", but " + shown(in, "stage");
    if (st != nullptr) fail_two(in, c->loc, std::string("key '") + key + "'", st->loc, "stage", what, "set " + wanted + ", or remove " + key);
    fail(in.file, &c->loc, what + " (the default)", "set " + wanted + ", or remove " + key);
  };
  for (const char* key : {"pref_beta", "pref_loss", "pref_ftx", "simpo_gamma", "dpo_label_smoothing", "ld_alpha", "ref_model"})
    only_with(key, {"dpo"});
  only_with("pref_loss_weighting", {"dpo", "rm"});
  only_with("rm_head", {"rm"});
  if (stage != "dpo") {
    if (stage == "rm") pair_stage_keys(in, stage);
    return;
  }
  const std::string loss = std::get<std::string>(value(in, "pref_loss"));
  const Checked* smoothing = get(in, "dpo_label_smoothing");
  if (smoothing != nullptr && std::get<double>(smoothing->value) > 0 && loss != "sigmoid")
    fail(in.file, &smoothing->loc, "dpo_label_smoothing applies to pref_loss = \"sigmoid\" only, but " + shown(in, "pref_loss"),
         "remove dpo_label_smoothing, or use pref_loss = \"sigmoid\" (LlamaFactory checks the same)");
  // beta scales the rewards: at 0 ipo's target 1 / (2 beta) and simpo's gamma / beta are infinite
  // (inf and NaN at the first step), and sigmoid's and hinge's losses are constants, which train
  // nothing without pref_ftx. orpo's beta weighs its odds-ratio term: 0 leaves the chosen NLL.
  if (const Checked* beta = get(in, "pref_beta"); beta != nullptr && std::get<double>(beta->value) == 0) {
    const bool divides = loss == "ipo" || loss == "simpo";
    const bool constant = (loss == "sigmoid" || loss == "hinge") && std::get<double>(value(in, "pref_ftx")) == 0;
    if (divides || constant)
      fail(in.file, &beta->loc,
           "pref_beta = 0 with pref_loss = \"" + loss + "\" " +
               (divides ? std::string("divides by 0 (an infinite loss at the first step)")
                        : std::string("makes the loss a constant: nothing would train (pref_ftx is 0)")),
           "set pref_beta > 0 (LlamaFactory's default is 0.1)");
  }
  const Checked* ref = get(in, "ref_model");
  if (ref != nullptr && (loss == "orpo" || loss == "simpo"))
    fail(in.file, &ref->loc, "pref_loss = \"" + loss + "\" is reference-free: it has no use for ref_model",
         "remove ref_model, or use pref_loss = \"sigmoid\", \"hinge\" or \"ipo\"");
  pair_stage_keys(in, stage);
}

// batching_strategy other than "normal": sequences not pairs (or pre-training documents), micro-
// batch shapes that a pipeline's stages need not agree on beforehand; the dynamic ones are
// step-driven (max_steps); the joined ones (padding_free) are no second packing.
void batching_keys(const Input& in) {
  const Checked* b = get(in, "batching_strategy");
  if (b == nullptr || std::get<std::string>(b->value) == "normal") return;
  const std::string strategy = std::get<std::string>(b->value);
  const std::string said = "batching_strategy = \"" + strategy + "\"";
  const bool dynamic = batches_by_tokens(strategy);
  const Checked* max_steps = get(in, "max_steps");
  if (dynamic && (max_steps == nullptr || std::get<std::int64_t>(max_steps->value) <= 0))
    fail(in.file, &b->loc,
         said + " needs max_steps: the ranks' streams of samples repeat, so no epoch ends a run (as LlamaFactory v1)",
         "set max_steps to the number of optimizer steps");
  const bool joined = joins_micro_batches(strategy);
  const std::string stage = std::get<std::string>(value(in, "stage"));
  if (trains_on_pairs(stage) || (joined && stage == "pt")) {
    const std::string what = said + " batches sequences of conversations; stage = \"" + stage + "\" batches " +
                             (stage == "pt" ? "packed documents" : "preference pairs");
    if (const Checked* st = get(in, "stage")) fail_two(in, b->loc, "key 'batching_strategy'", st->loc, "stage", what, "remove batching_strategy");
    fail(in.file, &b->loc, what + " (the default stage)", "remove batching_strategy");
  }
  const Checked* pp = get(in, "mesh.pp");
  if (pp != nullptr && std::get<std::int64_t>(pp->value) > 1)
    fail_two(in, b->loc, "key 'batching_strategy'", pp->loc, "key 'mesh.pp'",
             said + " gives micro-batches of varying shapes, which pipeline stages do not exchange in this version",
             "remove batching_strategy, or use mesh.pp = 1");
  if (joined)
    for (const char* key : {"packing", "neat_packing"})
      if (const Checked* c = get(in, key); c != nullptr && std::get<bool>(c->value))
        fail_two(in, b->loc, "key 'batching_strategy'", c->loc, std::string("key '") + key + "'",
                 said + " joins each micro-batch's samples into one row already", std::string("remove ") + key);
}

// The LoRA keys only with finetuning_type = "lora", the freeze keys only with "freeze".
void finetuning_keys(const Input& in) {
  const std::string type = std::get<std::string>(value(in, "finetuning_type"));
  const std::pair<const char*, std::vector<const char*>> owners[] = {
      {"lora", {"lora_rank", "lora_alpha", "lora_dropout", "lora_target", "additional_target", "use_rslora",
                "use_dora", "adapter_name_or_path", "quantization_bit", "quantization_type", "double_quantization",
                "quantization_method"}},
      {"freeze", {"freeze_trainable_layers", "freeze_trainable_modules", "freeze_extra_modules"}}};
  for (const auto& [owner, keys] : owners)
    for (const char* key : keys) {
      const Checked* c = get(in, key);
      if (c == nullptr || type == owner) continue;
      const Checked* ft = get(in, "finetuning_type");
      const std::string what = std::string("key '") + key + "' applies to finetuning_type = \"" + owner +
                               "\", but " + shown(in, "finetuning_type");
      const std::string hint = std::string("set finetuning_type = \"") + owner + "\", or remove " + key;
      if (ft != nullptr) fail_two(in, c->loc, std::string("key '") + key + "'", ft->loc, "finetuning_type", what, hint);
      fail(in.file, &c->loc, what + " (the default)", hint);
    }
}

// QLoRA's base is 4-bit; LLM.int8 (8) is not built.
void quantization_keys(const Input& in) {
  const Checked* bits = get(in, "quantization_bit");
  if (bits == nullptr) return;
  const std::int64_t b = std::get<std::int64_t>(bits->value);
  if (b == 8)
    fail(in.file, &bits->loc,
         "quantization_bit = 8 asks for bitsandbytes' LLM.int8 base, whose training (int8 GEMMs with fp16 outlier "
         "columns) is not built in lftrain",
         "use quantization_bit = 4 (QLoRA, NF4 or FP4), or remove quantization_bit");
  if (b != 0 && b != 4)
    fail(in.file, &bits->loc, "quantization_bit = " + std::to_string(b) + ": bitsandbytes quantizes to 4 or 8 bits",
         "use quantization_bit = 4, or remove quantization_bit");
}

void mesh(const Input& in) {
  std::vector<std::string> fill;
  for (const KeySpec& spec : schema()) {
    const Checked* c = spec.path.rfind("mesh.", 0) == 0 ? get(in, spec.path) : nullptr;
    if (c && std::get<std::int64_t>(c->value) == -1) fill.push_back(spec.path);
  }
  if (fill.size() >= 2) {
    fail_two(in, get(in, fill[0])->loc, "key '" + fill[0] + "'", get(in, fill[1])->loc,
             "key '" + fill[1] + "'",
             "keys '" + fill[0] + "' and '" + fill[1] +
                 "' are both -1, but at most one mesh size may be -1 (fill)",
             "give one of them an explicit size");
  }
}

void model_shape(const Input& in) {
  if (in.tables.count("model") == 0) return;
  const std::int64_t hidden = std::get<std::int64_t>(value(in, "model.hidden_size"));
  const std::int64_t heads = std::get<std::int64_t>(value(in, "model.num_attention_heads"));
  if (hidden % heads != 0) {
    fail_two(in, get(in, "model.hidden_size")->loc, "key 'model.hidden_size'",
             get(in, "model.num_attention_heads")->loc, "key 'model.num_attention_heads'",
             shown(in, "model.hidden_size") + " is not divisible by " +
                 shown(in, "model.num_attention_heads"),
             "hidden_size must be a multiple of num_attention_heads (head dim = hidden_size / "
             "num_attention_heads)");
  }
  const Checked* kv = get(in, "model.num_key_value_heads");
  if (kv && heads % std::get<std::int64_t>(kv->value) != 0) {
    fail_two(in, get(in, "model.num_attention_heads")->loc, "key 'model.num_attention_heads'",
             kv->loc, "key 'model.num_key_value_heads'",
             shown(in, "model.num_attention_heads") + " is not divisible by " +
                 shown(in, "model.num_key_value_heads"),
             "num_key_value_heads must divide num_attention_heads (each key/value head serves "
             "the same number of query heads)");
  }
}

// Whether `outer` is `inner` or a folder above it (both absolute and normalized).
bool contains(const std::filesystem::path& outer, const std::filesystem::path& inner) {
  auto o = outer.begin(), i = inner.begin();
  for (; o != outer.end() && !o->empty(); ++o, ++i)
    if (i == inner.end() || *o != *i) return false;
  return true;
}

std::filesystem::path normalized(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p =
      std::filesystem::weakly_canonical(std::filesystem::absolute(path), ec);
  return ec ? std::filesystem::absolute(path).lexically_normal() : p;
}

// output_dir receives checkpoints, rotation and logs: it must be a folder of its own.
void output_location(const Input& in) {
  const std::string dir = std::get<std::string>(value(in, "output_dir"));
  const Checked* c = get(in, "output_dir");
  const Location* loc = c != nullptr ? &c->loc : nullptr;
  const std::string hint = "give the run a folder of its own, e.g. output_dir = \"output/my-run\"";
  if (dir.empty())
    fail(in.file, loc, "key 'output_dir' is empty (checkpoints would go to the current folder)",
         hint);
  const std::filesystem::path out = normalized(dir);
  if (out == out.root_path())
    fail(in.file, loc, "key 'output_dir' = \"" + dir + "\" is the root of the file system", hint);
  if (contains(out, normalized(in.file)))
    fail(in.file, loc,
         "key 'output_dir' = \"" + dir + "\" holds the config file " + in.file +
             " (checkpoint rotation and logs would write beside it)",
         hint);
  if (const Checked* m = get(in, "model_name_or_path")) {
    const std::string model = std::get<std::string>(m->value);
    if (contains(out, normalized(model)))
      fail(in.file, loc, "key 'output_dir' = \"" + dir + "\" holds the model folder " + model,
           hint);
  }
}

}  // namespace

void check_rules(const Input& in, Problems& problems) {
  // The rules read each other's keys (model_shape needs the required ones): the first that fails
  // ends this phase.
  for (void (*rule)(const Input&) :
       {output_location, model_source, required_keys, data_sources, contradictions, finetuning_keys,
        quantization_keys, preference_keys, batching_keys, mesh, model_shape}) {
    problems.check([&] { rule(in); });
    if (!problems.empty()) return;
  }
}

}  // namespace lft::config::detail
