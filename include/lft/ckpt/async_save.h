// Checkpoints written in the background (as torchtitan's async checkpointing): at the step
// boundary every rank copies its tensors and optimizer state to host memory, which is all the
// training waits for (into buffers kept from one save to the next: only the first save allocates
// them, and they are part of the run's memory estimate); a thread then writes the checkpoint with save_checkpoint on a communicator
// of its own while training goes on. Everything save_checkpoint guarantees holds: the folder is
// written aside and published (COMPLETE, `latest`) only when durable, so a crash during the write
// leaves the previous checkpoint as the one `auto` resumes. A save waits for the one in flight.
// Needs MPI_THREAD_MULTIPLE (the runtime asks for it).
#pragma once

#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lft/ckpt/checkpoint.h"

namespace lft::ckpt {

class AsyncSaver {
 public:
  // Collective over `world`: duplicates it for the background writes.
  explicit AsyncSaver(MPI_Comm world);
  ~AsyncSaver();  // waits for the save in flight
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  // Collective. Waits for the previous save, snapshots `params` and `optimizer`'s state, and
  // starts writing them; `done(folder, seconds)` runs on the writing thread when the checkpoint
  // is published. Returns the seconds this call blocked (the wait and the snapshot).
  double start(const SaveOptions& options, const RunInfo& run, const Progress& progress,
               const std::vector<HeldTensor>& params, const optim::Optimizer& optimizer,
               std::function<void(const std::string&, double)> done);
  // Waits for the save in flight, if any; rethrows its failure.
  void wait();
  bool in_flight() const { return writer_.joinable(); }

 private:
  // Copies `t` into staging buffer `slot` (allocated on the first save, or when its shape changes).
  at::Tensor stage_copy(std::size_t slot, const at::Tensor& t);

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::vector<at::Tensor> staging_;  // host copies of the state: written by start(), read by the writer
  std::thread writer_;
  std::exception_ptr failure_;
};

}  // namespace lft::ckpt
