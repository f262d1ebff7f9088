// Test-only fault injection, so whole-job tests can show that a missing or dead rank ends the job
// with a report instead of a hang. Off unless the environment variable LFT_TEST_FAULT is set:
//   LFT_TEST_FAULT=skip:RANK:N   world rank RANK never arrives at its N-th collective (counted over
//                                every communicator, from 1): it sleeps instead, as a hung rank would
//   LFT_TEST_FAULT=kill:RANK:N   world rank RANK dies (SIGKILL) just before its N-th collective
//   ...:RANK:N:COMM               either, counting only the collectives on communicator COMM
//                                (e.g. kill:1:3:ep: its 3rd call on the expert-parallel group)
//   LFT_TEST_KILL_IN_SAVE=RANK[:N] world rank RANK dies (SIGKILL) in the middle of writing its
//                                N-th checkpoint (default 1), after its tensors and before the
//                                file is closed
#pragma once

#include <cstdint>
#include <string>

namespace lft {

// Called at the start of every collective with the process-wide collective count (from 1) and
// the communicator's name.
void inject_fault_if_requested(std::uint64_t collective_number, const std::string& comm, const std::string& what);
// Called by a checkpoint save between writing the tensors and closing the file.
void inject_save_fault_if_requested();
// LFT_TEST_FREEZE_IN_SAVE="RANK[:N]": world rank RANK stops itself (SIGSTOP, a frozen node) in
// its N-th save (default 1st) after writing the state, before the barrier of the publication.
void inject_publish_freeze_if_requested();

}  // namespace lft
