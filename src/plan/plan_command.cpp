#include "lft/plan/plan_command.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "lft/config/config.h"
#include "lft/plan/plan_report.h"
#include "lft/plan/planner.h"
#include "lft/runtime/error.h"

namespace lft::plan {
namespace {

// As the session reads a run config (src/app/config_text.cpp), without the broadcast.
std::string read_config_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw config::ConfigError("config error: config file '" + path +
                              "' is a folder, not a file\n  give the path of a TOML file, e.g. "
                              "`lftrain --plan inputs/clusters/h100-8x8.toml inputs/plan/llama3-8b.toml`");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw config::ConfigError("config error: cannot read config file '" + path + "': " + std::strerror(errno) +
                              "\n  give the path of a TOML file, e.g. `lftrain --plan "
                              "inputs/clusters/h100-8x8.toml inputs/plan/llama3-8b.toml`");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

int run_plan_command(const std::string& cluster_path, const std::string& config_path,
                     const std::vector<std::string>& overrides, bool this_layout) {
  try {
    PlanRequest request;
    request.cluster = read_cluster(cluster_path);
    request.config_text = read_config_file(config_path);
    request.config_name = config_path;
    request.overrides = overrides;
    if (this_layout) {
      PlanResult context;
      const Candidate candidate = predict_config_layout(request, context);
      std::fputs(layout_text(request, context, candidate).c_str(), stdout);
    } else {
      std::fputs(plan_text(request, make_plan(request)).c_str(), stdout);
    }
    return 0;
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lftrain --plan: %s\n", e.what());
    return kRunFailedExitCode;
  }
}

}  // namespace lft::plan
