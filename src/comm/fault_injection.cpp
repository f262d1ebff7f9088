#include "lft/comm/fault_injection.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "lft/runtime/error.h"
#include "lft/runtime/log.h"

namespace lft {
namespace {

struct Fault {
  enum class Action { None, Skip, Kill } action = Action::None;
  int rank = -1;
  std::uint64_t number = 0;
  std::string comm;  // "": N counts every collective; else only those on this communicator
};

Fault parse_fault() {
  Fault f;
  const char* spec = std::getenv("LFT_TEST_FAULT");
  if (spec == nullptr || *spec == '\0') return f;
  char action[16] = {0}, comm[32] = {0};
  unsigned long long number = 0;
  int rank = -1;
  if (std::sscanf(spec, "%15[a-z]:%d:%llu:%31s", action, &rank, &number, comm) < 3 || number == 0)
    throw UsageError("LFT_TEST_FAULT='" + std::string(spec) +
                     "' is not ACTION:RANK:N[:COMMUNICATOR] with ACTION skip or kill and N >= 1");
  f.comm = comm;
  const std::string a = action;
  if (a == "skip") f.action = Fault::Action::Skip;
  else if (a == "kill") f.action = Fault::Action::Kill;
  else throw UsageError("LFT_TEST_FAULT action '" + a + "' is not skip or kill");
  f.rank = rank;
  f.number = number;
  return f;
}

}  // namespace

void inject_fault_if_requested(std::uint64_t collective_number, const std::string& comm, const std::string& what) {
  static const Fault fault = parse_fault();
  static std::atomic<std::uint64_t> on_comm{0};
  if (fault.action == Fault::Action::None || world_rank_or_minus_one() != fault.rank) return;
  if (!fault.comm.empty()) {
    if (comm != fault.comm) return;
    collective_number = ++on_comm;
  }
  if (collective_number != fault.number) return;
  if (fault.action == Fault::Action::Kill) {
    log_rank("LFT_TEST_FAULT: killing this rank before " + what);
    std::raise(SIGKILL);
  }
  log_rank("LFT_TEST_FAULT: this rank never arrives at " + what);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(3600));
}

namespace {

// Whether `variable` ("RANK" for its first save, or "RANK:N") names this rank's save now under way;
// `saves` counts this rank's saves seen by that fault.
bool this_save_is_named(const char* variable, std::atomic<int>& saves) {
  const char* spec = std::getenv(variable);
  if (spec == nullptr || *spec == '\0' || std::atoi(spec) != world_rank_or_minus_one()) return false;
  const char* colon = std::strchr(spec, ':');
  return ++saves == (colon != nullptr ? std::atoi(colon + 1) : 1);
}

}  // namespace

void inject_save_fault_if_requested() {
  static std::atomic<int> saves{0};
  if (!this_save_is_named("LFT_TEST_KILL_IN_SAVE", saves)) return;
  log_rank("LFT_TEST_KILL_IN_SAVE: killing this rank in the middle of a checkpoint save");
  std::raise(SIGKILL);
}

void inject_publish_freeze_if_requested() {
  static std::atomic<int> saves{0};
  if (!this_save_is_named("LFT_TEST_FREEZE_IN_SAVE", saves)) return;
  log_rank("LFT_TEST_FREEZE_IN_SAVE: stopping this rank between writing a checkpoint and its publication");
  std::raise(SIGSTOP);
}

}  // namespace lft
