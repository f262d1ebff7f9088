// lftrain: one SPMD executable. Every rank runs this main; MPI says who is who.
#include <cstdio>
#include <exception>

#include "lft/app/cli.h"
#include "lft/app/session.h"
#include "lft/build_config.h"
#include "lft/comm/liveness.h"
#include "lft/comm/watchdog.h"
#include "lft/config/config.h"
#include "lft/engine/registry.h"
#include "lft/plan/plan_command.h"
#include "lft/runtime/error.h"
#include "lft/runtime/runtime.h"
#include "lft/runtime/signals.h"

namespace {

// Modes that print and exit need no MPI.
bool print_only(const lft::app::CliOptions& opts) {
  using lft::app::Mode;
  switch (opts.mode) {
    case Mode::Help: std::fputs(lft::app::usage_text().c_str(), stdout); return true;
    case Mode::Version: std::printf("lftrain %s\n", LFT_VERSION); return true;
    case Mode::HelpConfig: std::fputs(lft::config::help_text().c_str(), stdout); return true;
    case Mode::HelpConfigMarkdown:
      std::fputs(lft::config::reference_markdown().c_str(), stdout);
      return true;
    case Mode::ListEngines: std::fputs(lft::engine::list_engines_text().c_str(), stdout); return true;
    default: return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  lft::app::CliOptions opts;
  try {
    opts = lft::app::parse_cli(argc, argv);
    if (print_only(opts)) return 0;
    // --plan reads two files and predicts: one process, no MPI.
    if (opts.mode == lft::app::Mode::Plan)
      return lft::plan::run_plan_command(opts.plan_cluster_path, opts.config_path, opts.overrides,
                                         opts.plan_this_layout);
  } catch (const lft::UsageError& e) {
    std::fprintf(stderr, "lftrain: %s\n", e.what());
    return lft::kUsageExitCode;
  }

  lft::Runtime rt(&argc, &argv);
  lft::Liveness::start(rt.world(), rt.hosts());
  lft::Watchdog::start();
  lft::install_signal_handlers();
  int status = 0;
  try {
    status = lft::app::run_session(rt, opts);
  } catch (const lft::UsageError& e) {
    if (rt.rank() == 0) std::fprintf(stderr, "lftrain: %s\n", e.what());
    status = lft::kUsageExitCode;
  } catch (const lft::RunFailure& e) {
    if (rt.rank() == 0) std::fprintf(stderr, "lftrain: %s\n", e.what());
    status = lft::kRunFailedExitCode;
  } catch (const std::exception& e) {
    lft::fatal_one(std::string("unexpected error: ") + e.what());
  }
  lft::Watchdog::stop();
  lft::Liveness::stop();
  return status;
}
