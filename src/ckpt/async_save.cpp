#include "lft/ckpt/async_save.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <chrono>
#include <stdexcept>

#include "lft/optim/optimizer.h"
#include "lft/runtime/check.h"

namespace lft::ckpt {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// An optimizer's state as it was at the snapshot: what save_checkpoint reads of an optimizer.
class FrozenOptimizer final : public optim::Optimizer {
 public:
  template <typename Stage>
  FrozenOptimizer(const optim::Optimizer& live, std::size_t params, Stage stage)
      : steps_(live.steps()), names_(live.state_names()), hyper_(live.hyperparameters()) {
    state_.resize(params);
    for (std::size_t i = 0; i < params; ++i)
      for (std::size_t k = 0; k < names_.size(); ++k)
        state_[i].push_back(live.state(i, k).defined() ? stage(live.state(i, k)) : at::Tensor());
  }
  void step(double) override { throw std::logic_error("a snapshot of an optimizer does not step"); }
  std::int64_t steps() const override { return steps_; }
  void set_steps(std::int64_t) override { throw std::logic_error("a snapshot of an optimizer is read-only"); }
  std::vector<std::string> state_names() const override { return names_; }
  const at::Tensor& state(std::size_t param, std::size_t k) const override { return state_.at(param).at(k); }
  void load_state(std::size_t, std::size_t, const at::Tensor&) override {
    throw std::logic_error("a snapshot of an optimizer is read-only");
  }
  std::vector<std::pair<std::string, double>> hyperparameters() const override { return hyper_; }
  std::int64_t state_bytes() const override {
    std::int64_t bytes = 0;
    for (const auto& per_param : state_)
      for (const auto& t : per_param)
        if (t.defined()) bytes += static_cast<std::int64_t>(t.nbytes());
    return bytes;
  }

 private:
  std::int64_t steps_;
  std::vector<std::string> names_;
  std::vector<std::pair<std::string, double>> hyper_;
  std::vector<std::vector<at::Tensor>> state_;
};

}  // namespace

AsyncSaver::AsyncSaver(MPI_Comm world) { LFT_MPI_CHECK(MPI_Comm_dup(world, &comm_)); }

AsyncSaver::~AsyncSaver() {
  if (writer_.joinable()) writer_.join();
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

at::Tensor AsyncSaver::stage_copy(std::size_t slot, const at::Tensor& t) {
  if (slot >= staging_.size()) staging_.resize(slot + 1);
  at::Tensor& buffer = staging_[slot];
  if (!buffer.defined() || buffer.sizes() != t.sizes() || buffer.scalar_type() != t.scalar_type())
    buffer = at::empty(t.sizes(), t.options().device(at::kCPU));
  buffer.copy_(t);
  return buffer;
}

void AsyncSaver::wait() {
  if (writer_.joinable()) writer_.join();
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

double AsyncSaver::start(const SaveOptions& options, const RunInfo& run, const Progress& progress,
                         const std::vector<HeldTensor>& params, const optim::Optimizer& optimizer,
                         std::function<void(const std::string&, double)> done) {
  const auto start = Clock::now();
  wait();
  c10::NoGradGuard no_grad;
  std::size_t slot = 0;
  auto stage = [&](const at::Tensor& t) { return stage_copy(slot++, t); };
  std::vector<HeldTensor> copies;
  copies.reserve(params.size());
  for (const HeldTensor& t : params) copies.push_back({t.name, stage(t.local), t.box});
  auto frozen = std::make_shared<FrozenOptimizer>(optimizer, params.size(), stage);
  const double blocked = seconds_since(start);
  writer_ = std::thread([this, options, run, progress, copies = std::move(copies), frozen, done = std::move(done)] {
    try {
      const auto begin = Clock::now();
      const std::string folder = save_checkpoint(comm_, options, run, progress, copies, *frozen);
      if (done) done(folder, seconds_since(begin));
    } catch (...) {
      failure_ = std::current_exception();
    }
  });
  return blocked;
}

}  // namespace lft::ckpt
