// Every-rank errors stay every-rank errors: ranks can disagree (a file visible on one node only),
// so after a step that may fail, all ranks agree on the verdict. If any rank failed, every rank
// throws the same UsageError, carrying the lowest failing rank's message.
#pragma once

#include <string>

namespace lft::app {

// `error` is this rank's message, empty if it succeeded. Collective over MPI_COMM_WORLD.
void agree_or_throw(const std::string& error);

// Every rank passes what it was launched with (its command line); unless all are the same, every
// rank throws a UsageError naming the ranks that differ from rank 0 (an MPMD launch with other
// settings would otherwise hang in the first collective one side never reaches). Collective.
void agree_on_launch(const std::string& command_line);

// Runs `step`, turning a UsageError into agreement (above). Collective.
template <class Step>
void run_agreed(Step&& step);

}  // namespace lft::app

#include "lft/runtime/error.h"

template <class Step>
void lft::app::run_agreed(Step&& step) {
  std::string error;
  try {
    step();
  } catch (const UsageError& e) {
    error = e.what();
    if (error.empty()) error = "error";
  }
  agree_or_throw(error);
}
