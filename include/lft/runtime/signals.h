// Signals. By default SIGTERM and SIGINT (what mpirun and srun send when a peer dies, or a user's
// Ctrl-C) print what the rank was waiting in and end the process. While training, a stop is
// graceful instead: SIGUSR1 (Slurm's warning before a time limit), SIGTERM or SIGINT set a flag;
// the trainer agrees on it over all ranks at the next step boundary, saves a checkpoint and
// exits with kCheckpointedExitCode ("requeue me"). A second signal more than 2 s after the first
// ends the process at once (one within 2 s is taken as the same request: Slurm repeats SIGTERM).
#pragma once

namespace lft {

// Exit status of a run that stopped on a signal after saving a checkpoint (EX_TEMPFAIL: "try
// again"); slurm/train.sbatch requeues the job on it.
constexpr int kCheckpointedExitCode = 75;

// Installs the handlers (idempotent).
void install_signal_handlers();
// What the handlers name as the wait a signal interrupted: `reporter` returns it (or null) and
// must be async-signal-safe. The communication layer registers its watchdog's (this layer knows
// nothing of collectives).
using WaitReporter = const char* (*)();
void set_wait_reporter(WaitReporter reporter);
// Graceful mode on/off (the trainer turns it on for its loop).
void set_graceful_stop(bool on);
// The signal received in graceful mode, or 0. Local to this rank: agree before acting.
int stop_signal_received();

}  // namespace lft
