// LlamaFactory's training keys that lftrain has no key of its own for: each is honoured by a
// mapping onto lftrain's keys, accepted with a note that says why it has no effect here, or
// refused saying why. Applied to TOML and YAML alike, before validation; a YAML file also gets
// LlamaFactory's defaults for the engine (ddp), stage (sft), resuming (auto) and finetuning_type
// (lora), see docs/llamafactory.md.
#include <algorithm>
#include <string>
#include <variant>
#include <vector>

#include "internal.h"

namespace lft::config::detail {
namespace {

// Keys accepted with no effect, and why.
struct Inert {
  const char* key;
  const char* why;
};
const Inert kInert[] = {
    {"report_to", "lftrain logs to trainer_log.jsonl and its own output, not to experiment trackers"},
    {"run_name", "lftrain logs to trainer_log.jsonl and its own output, not to experiment trackers"},
    {"overwrite_cache", "the tokenized-data cache (tokenized_path) is keyed by everything it depends on"},
    {"preprocessing_num_workers", "every MPI rank tokenizes a share of the data"},
    {"preprocessing_batch_size", "every MPI rank tokenizes a share of the data"},
    {"dataloader_num_workers", "batches are cut from data tokenized in memory, in the training process"},
    {"dataloader_pin_memory", "batches are cut from data tokenized in memory, in the training process"},
    {"ddp_timeout", "collectives are watched by comm_timeout (seconds, default 600) instead"},
    {"trust_remote_code", "lftrain runs no Python model code: its model families are built in"},
    {"flash_attn", "attention is lftrain's own"},
    {"use_v1_kernels", "lftrain's kernels are its own"},
    {"enable_liger_kernel", "lftrain's kernels are its own"},
    {"use_fast_tokenizer", "lftrain reads tokenizer.json with its own tokenizer"},
    {"low_cpu_mem_usage", "each rank builds only the parameters it holds"},
    {"save_only_model",
     "checkpoints keep the optimizer state so that runs resume; `lfmerge CHECKPOINT --out DIR` "
     "exports the model alone"},
    {"ddp_find_unused_parameters", "every parameter takes part in every step"},
    {"include_num_input_tokens_seen", "tokens seen are always counted and logged"},
    {"do_eval", "evaluation runs whenever val_size or eval_dataset is set"},
    {"per_device_eval_batch_size", "evaluation batches have per_device_train_batch_size sequences"},
    {"master_addr", "MPI (mpirun, srun) starts and connects the ranks, so no address is needed"},
    {"master_port", "MPI (mpirun, srun) starts and connects the ranks, so no port is needed"},
    {"resources_per_worker", "each MPI rank is one worker, placed by mpirun or srun"},
    {"placement_strategy", "each MPI rank is one worker, placed by mpirun or srun"},
    {"ray_run_name", "lftrain logs to trainer_log.jsonl and its own output"},
    {"ray_storage_path", "checkpoints go to output_dir"},
    {"ray_storage_filesystem", "checkpoints go to output_dir"},
    {"ray_init_kwargs", "lftrain starts no Ray cluster: MPI plays Ray's part"},
};

// Keys whose LlamaFactory default is the only value lftrain implements.
struct OnlyDefault {
  const char* key;
  Value value;
  const char* why;
};
const OnlyDefault kOnlyDefault[] = {
    {"do_train", Value{true}, "lftrain trains: a run without do_train has nothing to do"},
    {"do_predict", Value{false}, "prediction (generation) is not part of lftrain"},
    {"logging_strategy", Value{std::string("steps")}, "lftrain logs every logging_steps optimizer steps"},
    {"mix_strategy", Value{std::string("concat")}, "datasets are concatenated in the order listed"},
    {"streaming", Value{false}, "lftrain tokenizes the whole dataset before training"},
    {"train_on_prompt", Value{false}, "prompts are always masked from the loss"},
    {"mask_history", Value{false}, "every assistant turn is trained"},
    {"pure_bf16", Value{false}, "use bf16 (mixed precision with fp32 master weights)"},
    {"pissa_init", Value{false}, "PiSSA initialisation is not implemented: adapters start as PEFT's default"},
    {"create_new_adapter", Value{false}, "adapter_name_or_path is trained on, not merged under a new adapter"},
    {"use_llama_pro", Value{false}, "LLaMA Pro's block expansion is not implemented"},
    {"pref_bco_weight", Value{0.0}, "BCO's extra loss term is not implemented"},
    {"use_ref_model", Value{true}, "the preference losses use a reference model unless pref_loss is orpo or simpo"},
};

// Variants lftrain does not implement, refused whenever set: LoRA's (and OFT's module_dropout) and
// preference training's.
struct Unbuilt {
  std::vector<const char*> keys;
  const char* what;
  const char* hint;
};
const Unbuilt kUnbuilt[] = {
    {{"loraplus_lr_ratio", "loraplus_lr_embedding", "lora_bf16_mode", "pissa_iter", "pissa_convert", "module_dropout",
      "use_unsloth"},
     "a LoRA variant (or OFT)",
     "remove it: lftrain's LoRA takes lora_rank, lora_alpha, lora_dropout, lora_target, additional_target, "
     "use_rslora, use_dora and adapter_name_or_path"},
    {{"ref_model_adapters", "ref_model_quantization_bit", "kto_chosen_weight", "kto_rejected_weight"},
     "a preference-training variant",
     "remove it: lftrain's stage dpo takes pref_beta, pref_loss, pref_ftx, simpo_gamma, dpo_label_smoothing, "
     "ld_alpha and ref_model"},
};

// Adds `path = value` where `from` was, unless the file sets `path` itself (which then wins, with
// an error if the two disagree).
void map_onto(Input& in, const Item& from, const std::string& path, const Value& value, Problems& problems) {
  if (const Item* own = find_item(in, path)) {
    if (own->kind != ItemKind::Scalar || own->value != value)
      problems.check([&] {
        fail(in.file, &from.loc,
             "'" + from.path + "' = " + shown_value(from) + " means " + path + " = " + format_value(value) +
                 ", but " + path + " = " + shown_value(*own) + " is set too",
             "remove one of the two", &own->loc);
      });
    return;
  }
  Item mapped = from;
  mapped.path = path;
  mapped.value = value;
  in.items.push_back(mapped);
}

// The item's bool, or nullptr with a type error added.
const bool* bool_of(const Input& in, const Item& item, Problems& problems) {
  if (item.kind == ItemKind::Scalar && std::holds_alternative<bool>(item.value)) return &std::get<bool>(item.value);
  problems.check([&] {
    fail(in.file, &item.loc, "key '" + item.path + "' must be a bool, got " + describe(item),
         "write e.g. " + item.path + " = true");
  });
  return nullptr;
}

// Keys lftrain handles in its own way (each branch of apply()).
const char* const kSpecialKeys[] = {"disable_gradient_checkpointing", "overwrite_output_dir",
                                    "eval_strategy", "evaluation_strategy", "fsdp", "fsdp_config", "optim"};

void apply(Input& in, const Item& item, Problems& problems) {
  const std::string& key = item.path;
  for (const Inert& k : kInert)
    if (key == k.key) {
      in.notes.push_back(item.loc.str() + ": " + key + " = " + shown_value(item) + " has no effect: " + k.why);
      return;
    }
  for (const OnlyDefault& k : kOnlyDefault)
    if (key == k.key) {
      if (item.kind != ItemKind::Scalar || item.value != k.value)
        problems.check([&] {
          fail(in.file, &item.loc, key + " = " + shown_value(item) + " is not supported: " + k.why,
               "remove it, or set " + key + " = " + format_value(k.value));
        });
      return;
    }
  for (const Unbuilt& u : kUnbuilt)
    for (const char* unbuilt : u.keys)
      if (key == unbuilt) {
        problems.check([&] {
          fail(in.file, &item.loc, "key '" + key + "' configures " + u.what + " that lftrain does not implement", u.hint);
        });
        return;
      }
  if (key == "disable_gradient_checkpointing") {
    if (const bool* disable = bool_of(in, item, problems))
      map_onto(in, item, "gradient_checkpointing", Value{!*disable}, problems);
  } else if (key == "overwrite_output_dir") {
    const bool* overwrite = bool_of(in, item, problems);
    if (overwrite == nullptr || find_item(in, "resume_from_checkpoint") != nullptr) return;  // an explicit resume wins
    if (!*overwrite)  // LlamaFactory resumes from output_dir's newest checkpoint, if any
      map_onto(in, item, "resume_from_checkpoint", Value{std::string("auto")}, problems);
    else
      in.notes.push_back(item.loc.str() + ": overwrite_output_dir = true: the run starts from scratch; "
                         "checkpoints of the same steps already in output_dir are replaced when the new ones are complete");
  } else if (key == "eval_strategy" || key == "evaluation_strategy") {
    const bool known = item.kind == ItemKind::Scalar &&
                       (item.value == Value{std::string("steps")} || item.value == Value{std::string("no")});
    if (!known)
      problems.check([&] {
        fail(in.file, &item.loc, key + " = " + shown_value(item) + " is not supported",
             "lftrain evaluates every eval_steps steps when val_size or eval_dataset is set: use \"steps\" or \"no\"");
      });
    else if (item.value == Value{std::string("no")})
      in.notes.push_back(item.loc.str() + ": " + key + " = \"no\": lftrain evaluates when val_size or eval_dataset is "
                         "set (every eval_steps steps, and at the end); leave them out for no evaluation");
  } else if (key == "fsdp" || key == "fsdp_config") {
    problems.check([&] {
      fail(in.file, &item.loc, "key '" + key + "' is the Hugging Face Trainer's FSDP switch",
           "set distributed = \"fsdp2\" (or \"fsdp\") and its options in a dist_config table "
           "(mixed_precision, reshard_after_forward, offload_params, ...)");
    });
  } else if (key == "optim") {
    const bool adamw = item.kind == ItemKind::Scalar && (item.value == Value{std::string("adamw_torch")} ||
                                                         item.value == Value{std::string("adamw_torch_fused")});
    if (!adamw)
      problems.check([&] { fail(in.file, &item.loc, "optim = " + shown_value(item) + " is not implemented", "lftrain's optimizer is AdamW: use \"adamw_torch\""); });
  }
}

bool handled(const std::string& key) {
  const auto is = [&](const char* k) { return key == k; };
  return std::any_of(std::begin(kInert), std::end(kInert), [&](const Inert& k) { return is(k.key); }) ||
         std::any_of(std::begin(kOnlyDefault), std::end(kOnlyDefault), [&](const OnlyDefault& k) { return is(k.key); }) ||
         std::any_of(std::begin(kUnbuilt), std::end(kUnbuilt),
                     [&](const Unbuilt& u) { return std::any_of(u.keys.begin(), u.keys.end(), is); }) ||
         std::any_of(std::begin(kSpecialKeys), std::end(kSpecialKeys), is);
}

// A key LlamaFactory sets by default where lftrain's default differs, located at the file.
void add_default(Input& in, const std::string& path, const std::string& value) {
  Item item;
  item.path = path;
  item.value = value;
  item.loc.file = in.file;
  in.items.push_back(item);
}

}  // namespace

void apply_llamafactory_keys(Input& in, Problems& problems) {
  std::vector<Item> own;
  const std::vector<Item> all = in.items;
  for (const Item& item : all)
    if (!handled(item.path)) own.push_back(item);
  const bool deepspeed_without_engine = find_item(in, "deepspeed") != nullptr && find_item(in, "distributed") == nullptr;
  const bool has_overwrite = find_item(in, "overwrite_output_dir") != nullptr;
  in.items = own;
  for (const Item& item : all)
    if (handled(item.path)) apply(in, item, problems);

  if (Item* ray = find_item(in, "distributed"); in.yaml && ray != nullptr && ray->value == Value{std::string("ray")}) {
    // The guide's Ray files: Ray's workers run DeepSpeed when a deepspeed file is given, else DDP;
    // under MPI each rank is one worker.
    const bool deepspeed = find_item(in, "deepspeed") != nullptr;
    ray->value = std::string(deepspeed ? "deepspeed" : "ddp");
    in.notes.push_back(ray->loc.str() + ": distributed = \"ray\": the job runs on the MPI world instead of a Ray "
                       "cluster (one worker = one rank; ray_num_workers is checked against the world size), with the "
                       "engine Ray's workers would use: " + std::string(deepspeed ? "deepspeed (the deepspeed file)" : "ddp"));
  }
  if (deepspeed_without_engine) {  // LlamaFactory: a deepspeed file is the engine
    Item engine = *find_item(in, "deepspeed");
    engine.path = "distributed";
    engine.value = std::string("deepspeed");
    in.items.push_back(engine);
  }
  if (!in.yaml || in.v1) return;
  // LlamaFactory's defaults where they differ from lftrain's.
  // DDP when launched on several processes; stage sft; LoRA; resume from output_dir's newest checkpoint.
  if (find_item(in, "finetuning_type") == nullptr) add_default(in, "finetuning_type", "lora");
  if (find_item(in, "distributed") == nullptr) add_default(in, "distributed", "ddp");
  if (find_item(in, "stage") == nullptr) add_default(in, "stage", "sft");
  if (!has_overwrite && find_item(in, "resume_from_checkpoint") == nullptr)
    add_default(in, "resume_from_checkpoint", "auto");
}

}  // namespace lft::config::detail
