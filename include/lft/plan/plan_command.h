// `lftrain --plan CLUSTER.toml CONFIG [key=value ...] [--this-layout]`: one process, no MPI.
#pragma once

#include <string>
#include <vector>

namespace lft::plan {

// Reads the cluster and run config files and prints the ranked layouts (or, with `this_layout`,
// the prediction for the config's own layout). Returns the exit status: 0, or 1 for an
// unexpected failure (printed). A bad file throws UsageError (config::ConfigError), as a run does.
int run_plan_command(const std::string& cluster_path, const std::string& config_path,
                     const std::vector<std::string>& overrides, bool this_layout);

}  // namespace lft::plan
