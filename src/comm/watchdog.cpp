#include "lft/comm/watchdog.h"

#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "lft/comm/device_read.h"
#include "lft/comm/liveness.h"
#include "lft/runtime/error.h"
#include "lft/runtime/host_transfer.h"
#include "lft/runtime/signals.h"

namespace lft {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kLivenessProbeSeconds = 3;

struct Entry {
  std::string what;
  const char* timeout_key;
  double timeout_seconds;
  Clock::time_point start;
};

struct State {
  std::mutex mutex;
  std::condition_variable wake;
  std::map<std::uint64_t, Entry> active;
  std::uint64_t next_id = 1;
  std::thread thread;
  bool running = false;
  // Set (under the mutex) when a deadline passed: the job is being aborted with a report.
  bool aborting = false;
  double collective_seconds = 600;
  double setup_seconds = 1800;
};

State& state() {
  static State s;
  return s;
}

// What the signal handler prints: two buffers, flipped atomically, so the handler never reads one
// that is being written (it only calls async-signal-safe functions).
constexpr std::size_t kSignalTextSize = 512;
char g_signal_text[2][kSignalTextSize];
std::atomic<int> g_signal_slot{-1};

void publish_for_signal(const std::string& text) {
  const int next = g_signal_slot.load() == 0 ? 1 : 0;
  std::snprintf(g_signal_text[next], kSignalTextSize, "%s", text.c_str());
  g_signal_slot.store(next);
}

void refresh_signal_text_locked(State& s) {
  if (s.active.empty()) {
    g_signal_slot.store(-1);
    return;
  }
  const Entry& newest = s.active.rbegin()->second;
  publish_for_signal(newest.what);
}

std::mutex g_hooks_mutex;
std::vector<void (*)()> g_abort_hooks;

constexpr double kAbortHookSeconds = 5;

// The hooks run on a thread of their own: one that blocks must not keep the job from ending.
void run_abort_hooks() {
  std::vector<void (*)()> hooks;
  {
    std::lock_guard<std::mutex> lock(g_hooks_mutex);
    hooks = g_abort_hooks;
  }
  if (hooks.empty()) return;
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread([hooks, done] {
    for (void (*hook)() : hooks) hook();
    done->store(true);
  }).detach();
  const auto until = Clock::now() + std::chrono::duration<double>(kAbortHookSeconds);
  while (!done->load() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

[[noreturn]] void report_and_abort(const Entry& e) {
  run_abort_hooks();
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%g", e.timeout_seconds);
  const std::string peers = Liveness::report(kLivenessProbeSeconds);
  fatal_one(e.what + " did not complete within " + seconds + " s (" + e.timeout_key +
            "). A peer rank has not joined it: it died, hangs, or runs a different code path. " +
            (peers.empty() ? "" : peers + " ") + "Aborting the job; raise " + e.timeout_key +
            " if this phase is legitimately slow.");
}

void watch_loop() {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  while (s.running) {
    s.wake.wait_for(lock, std::chrono::milliseconds(100));
    const auto now = Clock::now();
    for (const auto& [id, e] : s.active) {
      const double waited = std::chrono::duration<double>(now - e.start).count();
      if (waited > e.timeout_seconds) {
        const Entry copy = e;
        s.aborting = true;
        lock.unlock();
        report_and_abort(copy);
      }
    }
  }
}

}  // namespace

void Watchdog::start() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.running) return;
  s.running = true;
  s.thread = std::thread(watch_loop);
  set_wait_reporter(&Watchdog::current_wait);
  set_host_reader(&read_on_host);  // the model's host reads wait under the watchdog too
}

void Watchdog::add_abort_hook(void (*hook)()) {
  std::lock_guard<std::mutex> lock(g_hooks_mutex);
  g_abort_hooks.push_back(hook);
}

const char* Watchdog::current_wait() {
  const int slot = g_signal_slot.load();
  return slot < 0 ? nullptr : g_signal_text[slot];
}

void Watchdog::stop() {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.running) return;
    s.running = false;
  }
  s.wake.notify_all();
  s.thread.join();
}

void Watchdog::set_timeouts(double collective_seconds, double setup_seconds) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.collective_seconds = collective_seconds;
  s.setup_seconds = setup_seconds;
}

double Watchdog::collective_timeout() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().collective_seconds;
}

double Watchdog::setup_timeout() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().setup_seconds;
}

Watchdog::Scope::Scope(std::string what, double timeout_seconds, const char* timeout_key) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  id_ = s.next_id++;
  s.active.emplace(id_, Entry{std::move(what), timeout_key, timeout_seconds, Clock::now()});
  refresh_signal_text_locked(s);
}

Watchdog::Scope::~Scope() {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  s.active.erase(id_);
  refresh_signal_text_locked(s);
  // The job was declared failed while this rank waited (the wait may still complete, e.g. when
  // mpirun's SIGCONT wakes a frozen peer before its SIGTERM): it must not go on to side effects
  // such as publishing a checkpoint. It stays here until the abort ends the process.
  if (s.aborting) {
    lock.unlock();
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

}  // namespace lft
