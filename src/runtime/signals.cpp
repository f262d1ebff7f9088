#include "lft/runtime/signals.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>

#include "lft/runtime/error.h"

namespace lft {
namespace {

std::atomic<bool> g_graceful{false};
std::atomic<WaitReporter> g_reporter{nullptr};
std::atomic<int> g_received{0};
std::atomic<long long> g_first_ms{0};  // when the graceful stop was asked for (CLOCK_MONOTONIC)

long long now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void write_line(const char* text, int n) {
  if (n > 0) {
    ssize_t ignored = write(STDERR_FILENO, text, static_cast<size_t>(n));
    (void)ignored;
  }
}

// Only async-signal-safe calls in here.
void on_signal(int sig) {
  const WaitReporter reporter = g_reporter.load();
  const char* waiting = reporter != nullptr ? reporter() : nullptr;
  const char* what = waiting ? waiting : "no collective (computing or idle)";
  char line[768];
  const int rank = world_rank_or_minus_one();
  // Slurm sends SIGTERM twice, milliseconds apart, at a time limit: a repeat within 2 s is the
  // same request, not a second one.
  if (g_graceful.load() && g_received.load() != 0 && now_ms() - g_first_ms.load() < 2000) return;
  if (g_graceful.load() && g_received.exchange(sig) == 0) {
    g_first_ms.store(now_ms());
    const int n = std::snprintf(line, sizeof(line),
                                "[rank %d] lftrain: received signal %d while waiting in %s; "
                                "stopping with a checkpoint at the next step boundary that every "
                                "rank reaches (none if a rank has failed: the job then ends "
                                "without one)\n",
                                rank, sig, what);
    write_line(line, n);
    return;
  }
  if (sig == SIGUSR1) return;  // only meaningful while training
  const int n = std::snprintf(line, sizeof(line),
                              "[rank %d] lftrain: terminated by signal %d while waiting in %s\n",
                              rank, sig, what);
  write_line(line, n);
  _exit(128 + sig);
}

}  // namespace

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}

void set_graceful_stop(bool on) { g_graceful.store(on); }

void set_wait_reporter(WaitReporter reporter) { g_reporter.store(reporter); }

int stop_signal_received() { return g_received.load(); }

}  // namespace lft
