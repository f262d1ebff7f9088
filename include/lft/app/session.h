// One lftrain process from a parsed command line to its exit: loading the config (rank 0 reads,
// every rank parses), the agreement that every rank accepted it, threads, device, engine, mesh,
// the startup log and the communication check.
#pragma once

#include <string>

#include "lft/app/cli.h"
#include "lft/runtime/runtime.h"

namespace lft::app {

// Runs `opts` (mode Run, Check or PrintExample). Returns the exit status; throws UsageError for
// an every-rank error (the caller prints it on rank 0 and exits 2).
int run_session(Runtime& rt, const CliOptions& opts);

// Rank 0 reads `path` and broadcasts its text (under the watchdog's set-up deadline). A missing
// or unreadable file is a UsageError on every rank.
std::string read_config_text(const std::string& path);

}  // namespace lft::app
