// lfmerge's command line: its options, usage text and the values they take (merge.h).
#include <ATen/ATen.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "lft/ckpt/merge.h"
#include "lft/runtime/error.h"

namespace lft::ckpt {

std::int64_t parse_byte_size(const std::string& text) {
  const std::string bad = "size '" + text +
                          "' is not a size: use a number with an optional unit, e.g. 5GB, 500MB, "
                          "100KB, 2GiB or 123456 (bytes)";
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0) throw UsageError(bad);
  double value = 0;
  try {
    std::size_t used = 0;
    value = std::stod(text.substr(0, i), &used);
    if (used != i) throw UsageError(bad);
  } catch (const std::logic_error&) {
    throw UsageError(bad);
  }
  std::string unit = text.substr(i);
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  double scale = 0;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "KB")
    scale = 1e3;
  else if (unit == "MB")
    scale = 1e6;
  else if (unit == "GB")
    scale = 1e9;
  else if (unit == "TB")
    scale = 1e12;
  else if (unit == "KIB")
    scale = 1024.0;
  else if (unit == "MIB")
    scale = 1024.0 * 1024;
  else if (unit == "GIB")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "TIB")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    throw UsageError(bad);
  const double bytes = value * scale;
  if (bytes < 1 || bytes > 9e18) throw UsageError("size '" + text + "' is out of range");
  return static_cast<std::int64_t>(bytes);
}

at::ScalarType parse_export_dtype(const std::string& text) {
  if (text == "fp32" || text == "float32") return at::kFloat;
  if (text == "bf16" || text == "bfloat16") return at::kBFloat16;
  if (text == "fp16" || text == "float16") return at::kHalf;
  throw UsageError("--dtype '" + text + "' is not one of bf16, fp16, fp32");
}

std::string merge_usage() {
  return "usage: lfmerge CHECKPOINT --out DIR [--format hf|hdf5|peft] [--dtype bf16|fp16|fp32]\n"
         "                [--max-shard-size 5GB] [--base MODEL] [--dry-run] [--force]\n"
         "       lfmerge PEFT_ADAPTER --base MODEL --out DIR [--dtype ...] [--max-shard-size ...]\n"
         "       lfmerge EXPORT.yaml [--dry-run] [--force]\n"
         "       lfmerge --inspect CHECKPOINT\n"
         "\n"
         "Exports the model of an lftrain checkpoint (output_dir/checkpoint-<step>) as a Hugging "
         "Face\nmodel folder, or describes a checkpoint. No optimizer state is exported. A freeze "
         "or LoRA\ncheckpoint is exported as the whole model: its trained tensors over the base "
         "model's weights,\nwith the LoRA adapters merged in (the base folder must be the one "
         "the run trained on).\nA PEFT LoRA adapter folder (adapter_config.json) is merged onto --base "
         "as PEFT's merge_and_unload does.\n"
         "\n"
         "  --out DIR             folder to write (created; must be empty unless --force)\n"
         "  --format F            hf (default): model.safetensors (+ shards and index), "
         "config.json,\n"
         "                        tokenizer files; hdf5: DIR/model.h5 with full tensors; peft "
         "(LoRA\n"
         "                        checkpoints): adapter_model.safetensors and "
         "adapter_config.json\n"
         "                        for peft.PeftModel.from_pretrained\n"
         "  --dtype D             fp32 (default, the master weights), bf16 or fp16\n"
         "  --max-shard-size S    hf: shard when the weights exceed S (default 5GB; 500MB, "
         "2GiB, ...)\n"
         "  --base MODEL          the base model folder: a PEFT adapter's (required), or the one a\n"
         "                        checkpoint's run trained on (checked)\n"
         "  --dry-run             check everything and print what would be written\n"
         "  --force               write into a non-empty DIR, replacing its export files\n"
         "  --inspect CHECKPOINT  print step, mesh, engine, ... and every tensor of a "
         "checkpoint\n"
         "  EXPORT.yaml           LlamaFactory v1's export_lora.yaml (llamafactory-cli merge): model,\n"
         "                        peft_config {name: lora, adapter_name_or_path (a run's output_dir,\n"
         "                        a checkpoint, or a PEFT adapter folder), export_dir, export_size\n"
         "                        (GB a shard), infer_dtype}\n"
         "\n"
         "Exit status: 0 done, 2 wrong command line or input, 1 writing failed.\n";
}

MergeCommand parse_merge_command_line(const std::vector<std::string>& args) {
  MergeCommand cmd;
  std::vector<std::string> positional;
  std::string merge_option;  // the first option that only applies to a merge
  bool shard_size_given = false;
  const std::string see = " (lfmerge --help shows the usage)";
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i], value;
    bool has_value = false;
    if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
      value = arg.substr(arg.find('=') + 1);
      arg = arg.substr(0, arg.find('='));
      has_value = true;
    }
    auto take = [&]() {
      if (has_value) return value;
      if (i + 1 >= args.size()) throw UsageError(arg + " needs a value" + see);
      return args[++i];
    };
    auto no_value = [&]() {
      if (has_value) throw UsageError(arg + " takes no value" + see);
    };
    if (arg == "-h" || arg == "--help") {
      cmd.action = MergeCommand::Action::Help;
      return cmd;
    }
    if (merge_option.empty() && arg.size() > 1 && arg[0] == '-' && arg != "--inspect")
      merge_option = arg;
    if (arg == "--inspect") {
      cmd.action = MergeCommand::Action::Inspect;
      cmd.inspect_path = take();
    } else if (arg == "--out" || arg == "-o") {
      cmd.options.out_dir = take();
    } else if (arg == "--format") {
      const std::string f = take();
      if (f == "hf")
        cmd.options.format = ExportFormat::HuggingFace;
      else if (f == "hdf5")
        cmd.options.format = ExportFormat::Hdf5;
      else if (f == "peft")
        cmd.options.format = ExportFormat::Peft;
      else
        throw UsageError("--format '" + f + "' is not one of hf, hdf5, peft");
    } else if (arg == "--base") {
      cmd.options.expected_model = take();
    } else if (arg == "--dtype") {
      cmd.options.dtype = parse_export_dtype(take());
    } else if (arg == "--max-shard-size") {
      cmd.options.max_shard_bytes = parse_byte_size(take());
      shard_size_given = true;
    } else if (arg == "--dry-run") {
      no_value();
      cmd.options.dry_run = true;
    } else if (arg == "--force") {
      no_value();
      cmd.options.force = true;
    } else if (arg.size() > 1 && arg[0] == '-') {
      throw UsageError("unknown option '" + arg + "'" + see);
    } else {
      positional.push_back(arg);
    }
  }
  if (cmd.action == MergeCommand::Action::Inspect) {
    if (!positional.empty() || !merge_option.empty())
      throw UsageError("--inspect takes one checkpoint and no other arguments, got also '" +
                       (positional.empty() ? merge_option : positional.front()) + "'" + see);
    return cmd;
  }
  if (shard_size_given && cmd.options.format != ExportFormat::HuggingFace)
    throw UsageError(
        "--max-shard-size applies to --format hf only (model.h5 and adapter_model.safetensors are "
        "one file)" +
        see);
  // LlamaFactory v1's export_lora.yaml (`llamafactory-cli merge FILE`): its keys are the options.
  const std::string& first = positional.empty() ? std::string() : positional.front();
  const bool yaml = first.size() > 5 && (first.substr(first.size() - 5) == ".yaml" || first.substr(first.size() - 4) == ".yml");
  if (positional.size() == 1 && yaml) {
    if (!cmd.options.out_dir.empty() || cmd.options.format != ExportFormat::HuggingFace || shard_size_given)
      throw UsageError("an export file (" + first + ") gives the output folder, size and dtype itself; only --dry-run "
                       "and --force go beside it" + see);
    MergeOptions from_file = read_export_yaml(first);
    from_file.dry_run = cmd.options.dry_run;
    from_file.force = cmd.options.force;
    cmd.options = from_file;
    return cmd;
  }
  if (positional.size() != 1)
    throw UsageError(
        std::string(positional.empty() ? "no checkpoint given" : "more than one checkpoint given") +
        ": pass one checkpoint folder, e.g. lfmerge output/checkpoint-100 --out "
        "export" +
        see);
  if (cmd.options.out_dir.empty())
    throw UsageError("missing --out DIR (the folder to write the model to)" + see);
  cmd.options.checkpoint = positional.front();
  return cmd;
}

}  // namespace lft::ckpt
