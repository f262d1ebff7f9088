// The watchdog: no collective, and no set-up phase, may wait forever. Code that may block on other
// ranks opens a Scope with a deadline; a background thread aborts the whole job (MPI_Abort) with a
// report naming the rank and what it was waiting in when a deadline passes. The signal handlers
// (runtime/signals.h) print what the rank was waiting in when a launcher terminates it.
#pragma once

#include <cstdint>
#include <string>

namespace lft {

class Watchdog {
 public:
  // Starts the watchdog thread. Idempotent.
  static void start();
  // Stops the thread (before MPI_Finalize).
  static void stop();

  // Deadlines for collectives (config `comm_timeout`) and set-up phases (`setup_timeout`).
  static void set_timeouts(double collective_seconds, double setup_seconds);
  static double collective_timeout();
  static double setup_timeout();
  // What this rank waits in now, or nullptr. Async-signal-safe (for signal handlers).
  static const char* current_wait();
  // Called on the watchdog's thread when a deadline passes, before the job is aborted: releases
  // what a blocked call holds (NCCL aborts its communicators). Registered once, never removed.
  static void add_abort_hook(void (*hook)());

  // While a Scope lives, its description is "what this rank waits in"; if it lives longer than
  // `timeout_seconds` the job is aborted. `timeout_key` names the config key that sets it.
  class Scope {
   public:
    Scope(std::string what, double timeout_seconds, const char* timeout_key);
    // Does not return once the job is being aborted (a deadline passed): see watchdog.cpp.
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    std::uint64_t id_;
  };
};

}  // namespace lft
