#include "lft/train/make_optimizer.h"

#include "lft/comm/communicator.h"
#include "lft/model/muon_matrices.h"
#include "lft/optim/adamw.h"
#include "lft/optim/muon.h"

namespace lft::train {
namespace {

// Muon's row group over a communicator; the exchanged tensors live on the CPU for Muon's
// bookkeeping and on the communicator's device otherwise.
class CommRowGroup final : public optim::RowGroup {
 public:
  explicit CommRowGroup(Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void all_gather(const at::Tensor& in, const at::Tensor& out, const std::vector<std::int64_t>& counts) override {
    if (in.device() == comm_.device()) {
      comm_.all_gather(in, out, counts);
      return;
    }
    at::Tensor there = out.to(comm_.device());
    comm_.all_gather(in.to(comm_.device()), there, counts);
    out.copy_(there);
  }

 private:
  Communicator& comm_;
};

// Muon with the group it gathers over (the optimizer keeps a pointer to it).
class MuonOverGroup final : public optim::Optimizer {
 public:
  MuonOverGroup(engine::Engine& engine, const optim::MuonOptions& options, bool adapters) {
    Communicator* comm = engine.row_piece_group();
    if (comm != nullptr) group_ = std::make_unique<CommRowGroup>(*comm);
    std::vector<std::vector<std::int64_t>> shapes;
    std::vector<std::int64_t> offsets;
    std::vector<bool> matrix;
    const std::vector<std::string> names = engine.parameter_names();
    for (const TensorBox& box : engine.parameter_boxes()) {
      matrix.push_back(model::muon_matrix(names[shapes.size()], box.global_shape, adapters));
      shapes.push_back(box.global_shape);
      offsets.push_back(box.offset.empty() ? 0 : box.offset[0]);
    }
    muon_ = std::make_unique<optim::Muon>(engine.parameters(), names, std::move(shapes), std::move(offsets), matrix,
                                          options, group_.get());
  }
  void step(double lr) override { muon_->step(lr); }
  std::int64_t steps() const override { return muon_->steps(); }
  void set_steps(std::int64_t steps) override { muon_->set_steps(steps); }
  std::vector<std::string> state_names() const override { return muon_->state_names(); }
  const at::Tensor& state(std::size_t param, std::size_t k) const override { return muon_->state(param, k); }
  void load_state(std::size_t param, std::size_t k, const at::Tensor& value) override {
    muon_->load_state(param, k, value);
  }
  std::vector<std::pair<std::string, double>> hyperparameters() const override { return muon_->hyperparameters(); }
  std::int64_t state_bytes() const override { return muon_->state_bytes(); }
  std::string describe() const override { return muon_->describe(); }

 private:
  std::unique_ptr<CommRowGroup> group_;
  std::unique_ptr<optim::Muon> muon_;
};

}  // namespace

std::unique_ptr<optim::Optimizer> make_optimizer(engine::Engine& engine, const TrainOptions& options) {
  if (options.use_muon) return std::make_unique<MuonOverGroup>(engine, options.muon, options.muon_adapters);
  return std::make_unique<optim::AdamW>(engine.parameters(), engine.parameter_names(), options.adamw);
}

}  // namespace lft::train
