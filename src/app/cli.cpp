#include "lft/app/cli.h"

#include "lft/runtime/error.h"

namespace lft::app {
namespace {

// --print-example's N: a whole number >= 0, digits only.
std::int64_t example_number(const std::string& text) {
  const bool digits = !text.empty() && text.size() <= 18 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits)
    throw UsageError("--print-example needs a whole number >= 0 (the example, counted from 0), got '" + text +
                     "'\n" + usage_text());
  return std::stoll(text);
}

}  // namespace

std::string usage_text() {
  return "usage: lftrain [--check | --print-example N] CONFIG [key=value ...]\n"
         "       lftrain --plan CLUSTER CONFIG [key=value ...] [--this-layout]\n"
         "       lftrain --help | --version | --help-config [--markdown] | --list-engines\n"
         "\n"
         "  CONFIG           the run's configuration: TOML, or YAML (.yaml/.yml, LlamaFactory's\n"
         "                   format: docs/llamafactory.md); keys in docs/config.md\n"
         "  key=value        override a key of the file, e.g. learning_rate=1e-4 mesh.tp=2\n"
         "  --check          validate the config, build the mesh, test every communicator,\n"
         "                   print the plan and exit without training\n"
         "  --print-example N\n"
         "                   print training example N (from 0) as the start-up log shows the\n"
         "                   first: input_ids, inputs, label_ids, labels; exit without training\n"
         "  --plan CLUSTER   the layouts (engine, mesh, micro-batch, checkpointing) of CONFIG that\n"
         "                   fit the cluster described in CLUSTER (a TOML file: docs/plan.md),\n"
         "                   ranked by predicted tokens/s, with the config lines of the best;\n"
         "                   one process, no MPI launcher\n"
         "  --this-layout    with --plan: predict CONFIG's own layout, collective by collective\n"
         "  --help-config    every config key with its type, default and allowed values\n"
         "  --list-engines   the engines (`distributed`) this build has\n"
         "  --init-model DIR [--tokenizer TDIR]\n"
         "                   write the config's [model], initialised from `seed`, as a Hugging Face\n"
         "                   folder (config.json, model.safetensors, TDIR's tokenizer files)\n"
         "\n"
         "Start it with MPI: mpirun -np 4 lftrain run.toml, or srun inside sbatch.\n";
}

CliOptions parse_cli(int argc, char** argv) {
  CliOptions opts;
  bool markdown = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") opts.mode = Mode::Help;
    else if (arg == "--version") opts.mode = Mode::Version;
    else if (arg == "--help-config") opts.mode = Mode::HelpConfig;
    else if (arg == "--markdown") markdown = true;
    else if (arg == "--list-engines") opts.mode = Mode::ListEngines;
    else if (arg == "--check") opts.mode = Mode::Check;
    else if (arg == "--print-example") {
      if (i + 1 >= argc) throw UsageError("--print-example needs an example number\n" + usage_text());
      opts.mode = Mode::PrintExample;
      opts.example_index = example_number(argv[++i]);
    }
    else if (arg == "--plan") {
      if (i + 1 >= argc) throw UsageError("--plan needs a cluster file (e.g. inputs/clusters/h100-8x8.toml)\n" + usage_text());
      opts.mode = Mode::Plan;
      opts.plan_cluster_path = argv[++i];
    }
    else if (arg == "--this-layout") opts.plan_this_layout = true;
    else if ((arg == "--init-model" || arg == "--tokenizer") && i + 1 < argc)
      (arg == "--init-model" ? opts.init_model_dir : opts.tokenizer_dir) = argv[++i];
    else if (arg.rfind("--", 0) == 0)
      throw UsageError("unknown option '" + arg + "'\n" + usage_text());
    else if (opts.config_path.empty() && arg.find('=') == std::string::npos)
      opts.config_path = arg;
    else
      opts.overrides.push_back(arg);
  }
  if (markdown && opts.mode == Mode::HelpConfig) opts.mode = Mode::HelpConfigMarkdown;
  if (!opts.tokenizer_dir.empty() && opts.init_model_dir.empty())
    throw UsageError("--tokenizer goes with --init-model\n" + usage_text());
  if (opts.plan_this_layout && opts.mode != Mode::Plan)
    throw UsageError("--this-layout goes with --plan CLUSTER\n" + usage_text());
  if ((opts.mode == Mode::Run || opts.mode == Mode::Check || opts.mode == Mode::PrintExample ||
       opts.mode == Mode::Plan) &&
      opts.config_path.empty())
    throw UsageError("no config file given\n" + usage_text());
  return opts;
}

}  // namespace lft::app
