#include "lft/train/make_optimizer.h"

#include "lft/comm/communicator.h"
#include "lft/model/muon_matrices.h"
#include "lft/optim/adamw.h"
#include "lft/optim/muon.h"

namespace lft::train {
namespace {

// Muon's piece group over a communicator. The exchanged tensors live where Muon's momenta are:
// on the communicator's device, or on the host under offload while the communicator is a GPU's
// (then they are moved there and back).
class CommPieceGroup final : public optim::PieceGroup {
 public:
  explicit CommPieceGroup(Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void all_gather(const at::Tensor& in, const at::Tensor& out, const std::vector<std::int64_t>& counts) override {
    const at::Device device = comm_.device();
    if (out.device() == device) {
      comm_.all_gather(in.to(device), out, counts);
      return;
    }
    at::Tensor there = at::empty(out.sizes(), out.options().device(device));
    comm_.all_gather(in.to(device), there, counts);
    out.copy_(there);
  }

 private:
  Communicator& comm_;
};

// Muon over the engine's pieces, gathering whole matrices over its piece group.
std::unique_ptr<optim::Muon> make_muon(engine::Engine& engine, const optim::MuonOptions& options, bool adapters) {
  Communicator* comm = engine.piece_group();
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::vector<std::int64_t>> offsets;
  std::vector<bool> matrix;
  const std::vector<std::string> names = engine.parameter_names();
  for (const TensorBox& box : engine.parameter_boxes()) {
    matrix.push_back(model::muon_matrix(names[shapes.size()], box.global_shape, adapters));
    shapes.push_back(box.global_shape);
    offsets.push_back(box.offset);
  }
  return std::make_unique<optim::Muon>(engine.parameters(), names, std::move(shapes), std::move(offsets), matrix,
                                       options, comm ? std::make_unique<CommPieceGroup>(*comm) : nullptr);
}

}  // namespace

std::unique_ptr<optim::Optimizer> make_optimizer(engine::Engine& engine, const TrainOptions& options) {
  if (options.use_muon) return make_muon(engine, options.muon, options.muon_adapters);
  return std::make_unique<optim::AdamW>(engine.parameters(), engine.parameter_names(), options.adamw);
}

}  // namespace lft::train
