// A Trainer built the way lftrain builds one, for multi-rank tests.
#pragma once

#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lft/comm/mpi_communicator.h"
#include "lft/config/config.h"
#include "lft/engine/mesh_plan.h"
#include "lft/engine/parallel_config.h"
#include "lft/engine/registry.h"
#include "lft/engine/run_plan.h"
#include "lft/train/trainer.h"

namespace lft::test {

// Parses `toml`, plans the mesh over `comm` and builds the trainer; `mesh` receives the mesh,
// which must outlive the trainer.
inline std::unique_ptr<train::Trainer> make_trainer(const std::string& toml, MpiCommunicator& comm,
                                                    std::unique_ptr<DeviceMesh>& mesh) {
  // A trainer keeps references to its config and plan.
  static std::list<config::Config> keep;
  static std::list<engine::RunPlan> plans;
  keep.push_back(config::parse_config(toml, "test.toml"));
  const engine::EngineInfo& info = engine::engine_for(keep.back());
  mesh = std::make_unique<DeviceMesh>(comm, engine::plan_mesh(keep.back(), info, comm.size()));
  plans.push_back(engine::resolve_run_plan(keep.back(), mesh->shape()));
  return std::make_unique<train::Trainer>(keep.back(), plans.back(), *mesh, DeviceChoice{});
}

// The losses of the first `steps` steps of `toml` over `comm`.
inline std::vector<double> train_losses(const std::string& toml, MpiCommunicator& comm, int steps) {
  std::unique_ptr<DeviceMesh> mesh;
  auto trainer = make_trainer(toml, comm, mesh);
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) losses.push_back(trainer->step().loss);
  return losses;
}

// Per step of the first `steps`: the loss and the gradient norm (which sees every parameter's
// gradient, where the loss after a few Adam steps barely does).
inline std::vector<std::pair<double, double>> losses_and_grad_norms(const std::string& toml, MpiCommunicator& comm,
                                                                    int steps) {
  std::unique_ptr<DeviceMesh> mesh;
  auto trainer = make_trainer(toml, comm, mesh);
  std::vector<std::pair<double, double>> out;
  for (int i = 0; i < steps; ++i) {
    const train::StepResult r = trainer->step();
    out.emplace_back(r.loss, r.grad_norm);
  }
  return out;
}

// Bus bytes per step (nccl-tests' convention) over the engine's communicators, counted over
// `steps` steps from the end of a first one: ZeRO-1/2 post a step's gathers in the next step's
// forward, so a window from the end of one step to the end of another holds whole steps.
inline double bus_bytes_per_step(train::Trainer& trainer, int steps) {
  trainer.step();
  for (Communicator* c : trainer.engine().communicators()) c->reset_stats();
  for (int i = 0; i < steps; ++i) trainer.step();
  double moved = 0;
  for (Communicator* c : trainer.engine().communicators())
    for (int k = 0; k < kCollKindCount; ++k) {
      const auto kind = static_cast<CollKind>(k);
      moved += bus_bytes(kind, static_cast<double>(c->stats()[kind].bytes), c->size()) / steps;
    }
  return moved;
}

}  // namespace lft::test
