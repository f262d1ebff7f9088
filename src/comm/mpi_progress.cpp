#include "lft/comm/mpi_progress.h"

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace lft {
namespace {

std::atomic<int> g_in_flight{0};
std::mutex g_mutex;
std::condition_variable g_wake;  // an operation was posted, or the thread is to stop
bool g_live = false;

}  // namespace

struct MpiProgressThread::State {
  std::chrono::microseconds interval;
  MPI_Comm comm = MPI_COMM_NULL;  // nothing is ever sent on it: probing it only runs progress
  std::atomic<bool> stop{false};
  std::thread thread;

  void loop() {
    std::unique_lock<std::mutex> lock(g_mutex);
    for (;;) {
      g_wake.wait(lock, [this] { return stop || g_in_flight.load() > 0; });
      if (stop) return;
      lock.unlock();
      while (g_in_flight.load() > 0 && !stop) {
        int flag = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, MPI_STATUS_IGNORE);
        std::this_thread::sleep_for(interval);
      }
      lock.lock();
    }
  }
};

MpiProgressThread::MpiProgressThread(std::chrono::microseconds interval) {
  if (interval.count() <= 0) return;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_live) throw std::logic_error("MpiProgressThread: one is already running");
    g_live = true;
  }
  state_ = std::make_unique<State>();
  state_->interval = interval;
  MPI_Comm_dup(MPI_COMM_SELF, &state_->comm);
  state_->thread = std::thread([s = state_.get()] { s->loop(); });
}

MpiProgressThread::~MpiProgressThread() {
  if (!state_) return;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    state_->stop = true;
    g_live = false;
  }
  g_wake.notify_all();
  state_->thread.join();
  MPI_Comm_free(&state_->comm);
}

void MpiProgressThread::posted() {
  if (g_in_flight.fetch_add(1) == 0) {
    std::lock_guard<std::mutex> lock(g_mutex);  // pairs with the thread's wait: no lost wake-up
    g_wake.notify_one();
  }
}

void MpiProgressThread::completed() { g_in_flight.fetch_sub(1); }

}  // namespace lft
