// LlamaFactory v1's config files (v1/config/{model,data,training,sample}_args.py of llamafactory
// 0.9.5) mapped onto lftrain's keys before validation: renamed, given v1's defaults where they
// differ from lftrain's, noted where they have no effect here, or refused saying why.
// docs/llamafactory.md ("LlamaFactory v1") lists every key.
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "internal.h"

namespace lft::config::detail {
namespace {

// Keys only v1 files have; the classic trainer's own keys, which a v1 file does not.
const char* const kV1Markers[] = {"model", "model_class", "micro_batch_size", "global_batch_size",
                                  "enable_activation_checkpointing", "batching_strategy", "batching_workers",
                                  "save_epochs", "save_ckpt_as_hf", "sample_backend", "max_new_tokens",
                                  "full_determinism", "dist_config.name"};
const char* const kV1Tables[] = {"peft_config", "kernel_config", "quant_config", "init_config", "optim_config",
                                 "lr_scheduler_config"};
const char* const kClassicMarkers[] = {"stage", "finetuning_type", "dataset", "dataset_dir", "do_train",
                                       "per_device_train_batch_size", "gradient_accumulation_steps", "lora_rank",
                                       "lora_target"};

bool under(const std::string& path, const char* table) {
  const std::string prefix = std::string(table) + ".";
  return path.compare(0, prefix.size(), prefix) == 0;
}

// A key=value argument of the command line.
bool from_command_line(const Item& item) { return item.loc.file == kCommandLine; }

bool is_v1_marker(const std::string& path) {
  return std::any_of(std::begin(kV1Markers), std::end(kV1Markers), [&](const char* k) { return path == k; }) ||
         std::any_of(std::begin(kV1Tables), std::end(kV1Tables), [&](const char* t) { return path == t || under(path, t); });
}

// The mapping of one file: takes v1's items out of `in` and puts lftrain's in.
class V1Mapper {
 public:
  V1Mapper(Input& in, Problems& problems) : in_(in), problems_(problems) {}

  void run() {
    check_not_mixed();
    model_keys();
    peft_keys();
    engine_keys();
    training_keys();
    inert_and_refused();
    in_.format = "a LlamaFactory v1 YAML (" + why_v1() + ")";
  }

 private:
  std::optional<Item> take(const std::string& path) {
    auto it = std::find_if(in_.items.begin(), in_.items.end(), [&](const Item& i) { return i.path == path; });
    if (it == in_.items.end()) return std::nullopt;
    Item item = *it;
    in_.items.erase(it);
    return item;
  }
  // `path = value` at `where` (a default: at the file), unless the file sets `path` itself.
  void put(const std::string& path, const Value& value, const Item* where = nullptr) {
    if (find_item(in_, path) != nullptr) return;
    Item item;
    if (where != nullptr) item = *where;
    item.kind = ItemKind::Scalar;
    item.path = path;
    item.value = value;
    if (where == nullptr) item.loc.file = in_.file;
    in_.items.push_back(item);
  }
  void rename(const std::string& from, const std::string& to) {
    if (auto item = take(from)) merge_alias(std::move(*item), to);
  }
  // One rule for a key that arrives through two names (v1's and lftrain's, or main's top-level
  // and 0.9.5's dist_config spelling): a command-line override replaces the file's value
  // whichever name either uses; two values of the file (or of the command line) must be equal,
  // else the error names both places.
  void merge_alias(Item item, const std::string& to) {
    auto own = std::find_if(in_.items.begin(), in_.items.end(), [&](const Item& i) { return i.path == to; });
    if (own == in_.items.end()) {
      item.path = to;
      in_.items.push_back(std::move(item));
      return;
    }
    const bool item_overrides = from_command_line(item), own_overrides = from_command_line(*own);
    if (item_overrides != own_overrides) {
      if (item_overrides) {  // else the override already there stays
        item.path = to;
        *own = std::move(item);
      }
      return;
    }
    if (shown_value(item) != shown_value(*own)) conflict(item, *own);
  }
  void conflict(const Item& a, const Item& b) {
    problems_.check([&] {
      fail(in_.file, &a.loc, "'" + a.path + "' and '" + b.path + "' both set " + b.path + " in this v1 config",
           "keep one of them", &b.loc);
    });
  }
  void note(const Item& item, const std::string& why) {
    in_.notes.push_back(item.loc.str() + ": " + item.path + " = " + shown_value(item) + ": " + why);
  }
  void refuse(const Item& item, const std::string& what, const std::string& hint) {
    problems_.check([&] { fail(in_.file, &item.loc, item.path + " = " + shown_value(item) + ": " + what, hint); });
  }
  std::string string_of(const Item& item) {
    return item.kind == ItemKind::Scalar && std::holds_alternative<std::string>(item.value)
               ? std::get<std::string>(item.value)
               : "";
  }
  bool true_of(const Item& item) {
    return item.kind == ItemKind::Scalar && std::holds_alternative<bool>(item.value) && std::get<bool>(item.value);
  }

  std::string why_v1() const {
    for (const Item& i : original_)
      if (is_v1_marker(i.path)) return "key '" + i.path + "' at " + i.loc.str();
    return "train_dataset without the classic trainer's stage, finetuning_type or dataset";
  }

  void check_not_mixed() {
    original_ = in_.items;
    // A command-line override names lftrain's keys, which are the classic trainer's too: it
    // replaces a v1 key's value (merge_alias), it does not make the file classic.
    const Item* classic = nullptr;
    for (const char* k : kClassicMarkers)
      if ((classic = find_item(in_, k)) != nullptr && !from_command_line(*classic)) break;
    if (classic == nullptr || from_command_line(*classic)) return;
    const auto v1 = std::find_if(in_.items.begin(), in_.items.end(), [](const Item& i) { return is_v1_marker(i.path); });
    if (v1 == in_.items.end()) return;
    problems_.check([&] {
      fail(in_.file, &v1->loc,
           "this file mixes LlamaFactory v1's keys ('" + v1->path + "') with the classic trainer's ('" + classic->path + "')",
           "write it in one of the two: v1 (model, peft_config, dist_config.name, micro_batch_size, ...) or classic "
           "(model_name_or_path, stage, finetuning_type, per_device_train_batch_size, ...); docs/llamafactory.md",
           &classic->loc);
    });
  }

  void model_keys() {
    rename("model", "model_name_or_path");
    // v1's `llamafactory-cli sft`, or `llamafactory-cli dpo` for a file with DPO's keys (main's
    // trainer: pref_loss, pref_beta, ...; `lftrain FILE stage=dpo` for one without).
    for (const char* k : {"pref_loss", "pref_beta", "pref_ftx", "simpo_gamma", "dpo_label_smoothing", "ld_alpha"})
      if (const Item* pref = find_item(in_, k)) {
        note(*pref, "a DPO key: this v1 file trains as `llamafactory-cli dpo` does (stage = \"dpo\")");
        put("stage", Value{std::string("dpo")}, pref);
        break;
      }
    // main's `llamafactory-cli rm`: model_class: cls, transformers' token classification with one
    // label (`lftrain FILE stage=rm` for a file without it).
    if (auto c = take("model_class")) {
      const std::string cls = string_of(*c);
      if (cls == "cls") {
        note(*c, "a reward model: this v1 file trains as `llamafactory-cli rm` does (stage = \"rm\", rm_head = \"score\")");
        put("stage", Value{std::string("rm")}, &*c);
      } else if (cls != "llm") {
        refuse(*c, "lftrain trains causal language models (model_class: llm) and reward models (cls) only",
               "use model_class: llm or cls, or remove it");
      }
    }
    // main's BaseTrainer weighs each micro-batch's loss by its trained tokens, DPO's and RM's too
    // (v1 0.9.5 had neither trainer); its reward model is a token classifier.
    if (const Item* stage = find_item(in_, "stage"); stage != nullptr) {
      const std::string name = string_of(*stage);
      if (name == "dpo" || name == "rm") put("pref_loss_weighting", Value{std::string("tokens")}, stage);
      if (name == "rm") put("rm_head", Value{std::string("score")}, stage);
    }
    put("stage", Value{std::string("sft")});
    // 0.9.5's files name a built-in template (qwen3_nothink, ...); main's have none and render the
    // model's own Jinja template.
    put("template", Value{std::string("model")});
    for (const char* k : {"trust_remote_code", "flash_attn"})
      if (auto item = take(k)) note(*item, "no effect: lftrain's model families and attention are its own");
    if (auto item = take("init_config.name"))
      note(*item, "no effect: every rank builds only the parameters it holds, then reads its share");
    if (auto item = take("kernel_config.name"))
      note(*item, "lftrain's fused kernels (fused_kernels, default \"all\") take the place of v1's kernel plugins");
    // include_kernels, and a kernel's own settings (main's flash-linear-attention chunk_size).
    for (const char* k : {"kernel_config.include_kernels", "kernel_config.chunk_size"})
      if (auto item = take(k)) note(*item, "no effect: see fused_kernels");
    quant_keys();
  }

  // v1's quant_config (its bnb plugin, also behind name: auto) is the classic quantization keys.
  void quant_keys() {
    if (auto name = take("quant_config.name")) {
      const std::string method = string_of(*name);
      if (method != "bnb" && method != "auto")
        refuse(*name, "lftrain's quantized bases are bitsandbytes' (v1's bnb plugin)", "use quant_config.name: bnb");
    }
    rename("quant_config.quantization_bit", "quantization_bit");
    rename("quant_config.quantization_type", "quantization_type");
    rename("quant_config.double_quantization", "double_quantization");
    if (auto d = take("quant_config.compute_dtype"))
      note(*d, "lftrain dequantizes the 4-bit base into the run's compute dtype (bf16 with bf16: true, else float32)");
    for (const Item& item : in_.items)
      if (under(item.path, "quant_config"))
        refuse(item, "unknown key for quant_config", "quant_config takes name, quantization_bit, quantization_type, "
                                                     "double_quantization, compute_dtype");
  }

  void peft_keys() {
    if (auto e = take("peft_config.export_dir"))
      refuse(*e, "merging an adapter into the model is lfmerge's work, not a training run",
             "run the file with lfmerge (lfmerge FILE merges the run's LoRA checkpoint as llamafactory-cli merge does; "
             "or lfmerge CHECKPOINT --out DIR, --format peft for the adapter alone)");
    for (const char* k : {"peft_config.export_size", "peft_config.infer_dtype", "peft_config.export_hub_model_id",
                          "peft_config.export_legacy_format"})
      take(k);
    const auto name = take("peft_config.name");
    const std::string method = name ? string_of(*name) : "";
    if (!name) {
      put("finetuning_type", Value{std::string("full")});
    } else if (method == "lora") {
      put("finetuning_type", Value{method}, &*name);
      rename("peft_config.r", "lora_rank");
      rename("peft_config.lora_alpha", "lora_alpha");
      rename("peft_config.lora_dropout", "lora_dropout");
      rename("peft_config.target_modules", "lora_target");
      rename("peft_config.use_rslora", "use_rslora");
      rename("peft_config.use_dora", "use_dora");
      rename("peft_config.adapter_name_or_path", "adapter_name_or_path");
      rename("peft_config.modules_to_save", "additional_target");
      put("lora_alpha", Value{std::int64_t{16}});
      put("lora_dropout", Value{0.05});
    } else if (method == "freeze") {
      put("finetuning_type", Value{method}, &*name);
      rename("peft_config.freeze_trainable_layers", "freeze_trainable_layers");
      rename("peft_config.freeze_trainable_modules", "freeze_trainable_modules");
      rename("peft_config.freeze_extra_modules", "freeze_extra_modules");
      if (auto c = take("peft_config.cast_trainable_params_to_fp32"))
        note(*c, "no effect: lftrain keeps every trained parameter in fp32");
    } else {
      refuse(*name, "v1's PEFT methods are lora and freeze", "write peft_config: {name: lora, ...} or {name: freeze, ...}");
    }
    for (const Item& item : in_.items)
      if (under(item.path, "peft_config"))
        refuse(item, "unknown key for peft_config.name = " + (method.empty() ? "(none)" : method),
               method == "lora" ? "lora takes r, lora_alpha, lora_dropout, target_modules, use_rslora, use_dora, adapter_name_or_path, modules_to_save"
                                : "freeze takes freeze_trainable_layers, freeze_trainable_modules, freeze_extra_modules");
  }

  // LlamaFactory main (#10641) reads the topology keys at the top level of the file; 0.9.5 reads
  // them inside dist_config. Either place is read here, main's moved to 0.9.5's first.
  void topology_keys() {
    const std::pair<const char*, const char*> moved[] = {
        {"cp_size", "dist_config.cp_size"},         {"cp_mode", "dist_config.cp_mode"},
        {"dp_size", "dist_config.dp_size"},         {"ep_size", "dist_config.ep_size"},
        {"mp_replicate_size", "dist_config.mp_replicate_size"},
        {"mp_shard_size", "dist_config.mp_shard_size"}, {"dist_timeout", "dist_config.timeout"}};
    for (const auto& [top, nested] : moved)
      if (auto item = take(top)) merge_alias(std::move(*item), nested);
  }

  void engine_keys() {
    topology_keys();
    const auto name = take("dist_config.name");
    // fsdpturbo: v1's FSDP2 with expert parallelism (ep_size) from the FSDPTurbo library; here
    // fsdp2 with [mesh] ep, its experts whole on each ep rank (docs/llamafactory.md).
    const bool turbo = name && string_of(*name) == "fsdpturbo";
    const std::string engine = turbo ? "fsdp2" : name ? string_of(*name) : "";
    if (name && engine != "fsdp2" && engine != "deepspeed")
      refuse(*name, "v1's distributed plugins are fsdp2, fsdpturbo and deepspeed",
             "write dist_config: {name: fsdp2}, {name: fsdpturbo, ep_size: N} or {name: deepspeed, config_file: ...}");
    if (turbo) turbo_keys();
    if (name) {
      if (const Item* own = find_item(in_, "distributed"))
        conflict(*name, *own);
      else
        put("distributed", Value{engine}, &*name);
    } else {
      put("distributed", Value{std::string("ddp")});  // v1: DistributedDataParallel on several ranks
    }
    rename("dist_config.config_file", "deepspeed");
    const Item* offload = find_item(in_, "dist_config.offload_params");
    if (offload == nullptr || !true_of(*offload))
      if (auto pin = take("dist_config.pin_memory"))  // v1's default is true, whether it offloads or not
        note(*pin, "no effect without offload_params: true (it pins the offloaded shards)");
    if (auto t = take("dist_config.timeout")) {
      if (std::holds_alternative<std::int64_t>(t->value)) t->value = static_cast<double>(std::get<std::int64_t>(t->value));
      merge_alias(std::move(*t), "comm_timeout");
    }
    rename("dist_config.mp_replicate_size", "mesh.dp_replicate");
    rename("dist_config.mp_shard_size", "mesh.dp_shard");
    if (auto dp = take("dist_config.dp_size")) {
      if (find_item(in_, "mesh.dp_shard") == nullptr && find_item(in_, "mesh.dp_replicate") == nullptr) {
        dp->path = "mesh.dp_shard";
        in_.items.push_back(*dp);
      } else {
        note(*dp, "the data-parallel size is mp_replicate_size x mp_shard_size here");
      }
    }
    rename("dist_config.cp_size", "mesh.cp");
    rename("dist_config.ep_size", "mesh.ep");
    if (auto dcp = take("dist_config.dcp_path"))
      refuse(*dcp, "lftrain loads the Hugging Face model folder (model), not a torch distributed checkpoint",
             "remove dcp_path");
    bf16(engine, name.has_value());
  }

  // FSDPTurbo's own keys: its eager dispatcher is what lftrain does (an all-to-all of the routed
  // rows, dropless); the others choose modules by pattern, which lftrain takes from the model.
  void turbo_keys() {
    if (auto d = take("dist_config.ep_dispatcher")) {
      if (string_of(*d) != "eager")
        refuse(*d, "lftrain's expert parallelism exchanges the routed rows all-to-all (FSDPTurbo's eager dispatcher)",
               "write ep_dispatcher: eager, or remove it");
      else
        note(*d, "lftrain's all-to-all of the routed rows, dropless");
    }
    for (const char* key : {"dist_config.ep_modules", "dist_config.ep_fsdp_modules", "dist_config.fsdp_ignored_modules",
                            "dist_config.fsdp_modules", "dist_config.hook_modules", "dist_config.fsdp_implementation"})
      if (auto item = take(key))
        refuse(*item, "lftrain places a mixture of experts' experts itself (every routed expert of each MoE layer)",
               "remove it");
  }

  // v1's bf16 (default true) acts through FSDP2's mixed precision (bf16 parameters, fp32
  // reductions); without dist_config v1 trains in fp32, and DeepSpeed takes it from its file.
  void bf16(const std::string& engine, bool named) {
    auto flag = take("bf16");
    const Item* mp = find_item(in_, "dist_config.mixed_precision");
    const Item* engine_item = find_item(in_, "distributed");
    const std::string distributed = engine_item ? string_of(*engine_item) : "";
    if (distributed == "fsdp2" || engine == "fsdp2") {
      if (mp != nullptr && flag) {  // the guide's spelling beside v1's: both must agree
        const bool agree = (string_of(*mp) == "bf16") == true_of(*flag);
        if (!agree) conflict(*flag, *mp);
      }
      const bool on = mp != nullptr ? string_of(*mp) == "bf16" : !flag || true_of(*flag);
      put("bf16", Value{on}, flag ? &*flag : nullptr);
      put("dist_config.mixed_precision", Value{std::string(on ? "bf16" : "fp32")}, flag ? &*flag : nullptr);
      return;
    }
    if (engine == "deepspeed" || distributed == "deepspeed") {
      if (flag) note(*flag, "bf16 follows the DeepSpeed file's bf16.enabled (\"auto\": off), as v1 hands the file to accelerate");
      return;
    }
    if (flag && true_of(*flag) && !named)
      note(*flag, "no effect without dist_config: v1 trains in fp32 then (its bf16 acts through FSDP2's mixed precision)");
    else if (flag)
      in_.items.push_back(*flag);
  }

  // optim_config: {name: muon, ...} (LlamaFactory main's only optimizer plugin; its defaults where
  // the file leaves a key out, the learning rate v1's learning_rate). Without it v1 takes torch's
  // AdamW (training_keys).
  void optimizer_plugin() {
    const auto name = take("optim_config.name");
    if (!name) return;
    if (string_of(*name) != "muon") {
      refuse(*name, "LlamaFactory registers only the muon optimizer plugin",
             "use optim_config: {name: muon, ...}, or remove optim_config (v1 then trains with torch's AdamW)");
      return;
    }
    put("use_muon", Value{true}, &*name);
    put("muon_adapters", Value{false}, &*name);  // v1 gives LoRA's factors to AdamW
    rename("optim_config.wd", "weight_decay");
    rename("optim_config.momentum", "muon_momentum");
    rename("optim_config.nesterov", "muon_nesterov");
    rename("optim_config.ns_steps", "muon_ns_steps");
    rename("optim_config.adamw_eps", "adam_epsilon");
    if (auto lr = take("optim_config.lr"))
      note(*lr, "no effect: v1 sets the optimizer's lr to learning_rate");
    if (auto betas = take("optim_config.adamw_betas")) {
      const std::string text = string_of(*betas);
      const auto cut = text.find('\n');
      char* end = nullptr;
      const double b1 = cut == std::string::npos ? 0 : std::strtod(text.c_str(), &end);
      const bool first_ok = end == text.c_str() + cut;
      const double b2 = cut == std::string::npos ? 0 : std::strtod(text.c_str() + cut + 1, &end);
      if (!first_ok || cut == std::string::npos || *end != '\0' || text.find('\n', cut + 1) != std::string::npos)
        refuse(*betas, "adamw_betas takes two numbers", "write e.g. adamw_betas: [0.9, 0.95]");
      put("adam_beta1", Value{b1}, &*betas);
      put("adam_beta2", Value{b2}, &*betas);
    }
    put("weight_decay", Value{0.1}, &*name);
    put("adam_beta2", Value{0.95}, &*name);
  }

  void training_keys() {
    rename("micro_batch_size", "per_device_train_batch_size");
    rename("enable_activation_checkpointing", "gradient_checkpointing");
    put("gradient_checkpointing", Value{true});
    put("learning_rate", Value{1e-4});
    put("logging_steps", Value{std::int64_t{1}});
    put("lr_scheduler_type", Value{std::string("constant")});
    optimizer_plugin();
    put("weight_decay", Value{0.01});
    put("decay_all_parameters", Value{true});
    put("sample_order", Value{std::string("per_rank")});
    if (find_item(in_, "save_steps") == nullptr) put("save_steps", Value{std::int64_t{0}});
    if (auto b = take("batching_strategy")) {
      const std::string s = string_of(*b);
      if (s != "normal") put("batching_strategy", Value{s}, &*b);
    }
    if (auto item = take("lr_scheduler_config.name"))
      refuse(*item, "LlamaFactory registers no scheduler plugin (v1 itself fails on it)",
             "remove it: v1 trains at a constant learning rate");
    if (auto e = take("save_epochs"))
      refuse(*e, "saving by epochs is not built in lftrain", "use save_steps (steps per epoch are in the start-up log)");
    if (auto hf = take("save_ckpt_as_hf"))
      if (true_of(*hf))
        refuse(*hf, "lftrain saves sharded HDF5 checkpoints", "export any checkpoint with: lfmerge CHECKPOINT --out DIR");
  }

  void inert_and_refused() {
    for (const char* k : {"sample_backend", "max_new_tokens"})
      if (auto item = take(k)) note(*item, "no effect: sampling settings, and lftrain trains only");
    if (auto w = take("batching_workers")) note(*w, "no effect: batches are cut from data tokenized in memory");
    if (auto d = take("full_determinism")) note(*d, "no effect: lftrain's runs are deterministic (same inputs, same losses)");
    for (const Item& item : in_.items)
      for (const char* t : kV1Tables)
        if (under(item.path, t)) refuse(item, "unknown key", "see docs/llamafactory.md for v1's keys");
  }

  Input& in_;
  Problems& problems_;
  std::vector<Item> original_;
};

}  // namespace

bool is_v1_plugin_table(const std::string& path) {
  return std::any_of(std::begin(kV1Tables), std::end(kV1Tables), [&](const char* t) { return path == t; });
}

bool is_v1_plugin_key(const std::string& path) {
  return std::any_of(std::begin(kV1Tables), std::end(kV1Tables), [&](const char* t) { return under(path, t); });
}

bool is_v1_config(const Input& in) {
  if (!in.yaml) return false;
  const bool marked = std::any_of(in.items.begin(), in.items.end(), [](const Item& i) { return is_v1_marker(i.path); });
  if (marked) return true;
  const bool classic = std::any_of(std::begin(kClassicMarkers), std::end(kClassicMarkers), [&](const char* k) {
    const Item* item = find_item(in, k);
    return item != nullptr && !from_command_line(*item);
  });
  return !classic && find_item(in, "train_dataset") != nullptr;
}

void apply_v1_keys(Input& in, Problems& problems) { V1Mapper(in, problems).run(); }

}  // namespace lft::config::detail
