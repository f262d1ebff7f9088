// lftrain's command line: what to do, the config file and its key=value overrides.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lft::app {

enum class Mode { Run, Check, PrintExample, Help, Version, HelpConfig, HelpConfigMarkdown, ListEngines, Plan };

struct CliOptions {
  Mode mode = Mode::Run;
  std::string config_path;
  std::vector<std::string> overrides;  // "key=value", in order
  std::string init_model_dir;          // --init-model DIR: write the initial model there, train nothing
  std::string tokenizer_dir;           // --tokenizer DIR: tokenizer files copied with --init-model
  std::int64_t example_index = -1;     // --print-example N: print training example N, train nothing
  std::string plan_cluster_path;       // --plan CLUSTER: rank layouts for that cluster (no MPI)
  bool plan_this_layout = false;       // --this-layout: predict the config's own layout only
};

// Throws UsageError for an unknown flag, a missing config path, a --print-example without a
// whole number >= 0, a --plan without its cluster file or a --this-layout without --plan.
CliOptions parse_cli(int argc, char** argv);

std::string usage_text();

}  // namespace lft::app
