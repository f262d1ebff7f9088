// Muon (MomentUm Orthogonalized by Newton-Schulz) as LlamaFactory runs it (`use_muon`, v1's
// `optim_config: {name: muon}`: Moonlight's Muon, docs/optimizer.md): the decoder's matrices take
// SGD momentum (Nesterov by default) whose update is orthogonalised by a quintic Newton-Schulz
// iteration in bf16 and scaled by 0.2 sqrt(max(rows, cols)); every other parameter (embedding,
// head, norms, biases, the experts that transformers 5 holds as 3-d tensors) takes Moonlight's
// AdamW. Weight decay lr * wd on both.
//
// The Newton-Schulz step needs each matrix whole. Where an engine cuts the tensors a rank updates
// into pieces over a group (fsdp, fsdp2 and ZeRO: rows; megatron: its tensor-parallel boxes, rows or
// columns, and the rows of those its sharded data parallelism keeps), the matrices are dealt to the
// group's ranks in turn: each rank receives every piece of the matrices it is dealt (one
// all-gather) and places each in its box, computes their orthogonalised updates, and every rank
// takes its box of every update (a second all-gather). Pieces held by several ranks (megatron's
// replicated kv heads, a router replicated over tp) are the same values, placed twice. The
// arithmetic on each matrix is the one-rank run's.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lft/optim/optimizer.h"

namespace lft::optim {

struct MuonOptions {
  double momentum = 0.95;
  bool nesterov = true;
  std::int64_t ns_steps = 5;
  double weight_decay = 0.1;  // lr * weight_decay, on every parameter
  double adamw_beta1 = 0.9;
  double adamw_beta2 = 0.95;
  double adamw_eps = 1e-8;
};

// The group over which an engine cuts each parameter into boxes (every rank the same parameters in
// the same order; their boxes together make each whole): what Muon needs of a communicator.
class PieceGroup {
 public:
  virtual ~PieceGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // `out` gets every rank's `in` back to back; counts[r] elements come from rank r. Collective.
  virtual void all_gather(const at::Tensor& in, const at::Tensor& out, const std::vector<std::int64_t>& counts) = 0;
};

// G's orthogonalisation as Keller Jordan's zeropower_via_newtonschulz5 computes it (bf16).
at::Tensor newton_schulz5(const at::Tensor& g, std::int64_t steps);

class Muon final : public Optimizer {
 public:
  // params[i] (this rank's piece of parameter names[i]: a box of a tensor of global_shapes[i] at
  // offsets[i], empty for the origin) is updated from its gradient, by Muon where matrix[i] (a 2-d
  // global shape), else by AdamW. `group` null: every piece is its whole parameter. Collective over
  // `group` (the pieces' boxes are exchanged once).
  Muon(std::vector<at::Tensor> params, std::vector<std::string> names,
       std::vector<std::vector<std::int64_t>> global_shapes, const std::vector<std::vector<std::int64_t>>& offsets,
       const std::vector<bool>& matrix, MuonOptions options, std::unique_ptr<PieceGroup> group);

  void step(double lr) override;
  std::int64_t steps() const override { return steps_; }
  void set_steps(std::int64_t steps) override;
  // exp_avg: Muon's momentum buffer or AdamW's first moment; exp_avg_sq: AdamW's second moment
  // (undefined for a Muon matrix: it has none).
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  const at::Tensor& state(std::size_t param, std::size_t k) const override {
    return k == 0 ? exp_avg_[param] : exp_avg_sq_[param];
  }
  void load_state(std::size_t param, std::size_t k, const at::Tensor& value) override;
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  std::int64_t state_bytes() const override;
  std::string describe() const override;

  std::size_t muon_matrices() const { return matrices_.size(); }

 private:
  struct Box {
    std::int64_t row = 0, col = 0, rows = 0, cols = 0;
    std::int64_t numel() const { return rows * cols; }
  };
  static at::Tensor box_of(const at::Tensor& whole, const Box& b) {  // a view
    return whole.narrow(0, b.row, b.rows).narrow(1, b.col, b.cols);
  }
  struct Matrix {
    std::size_t param;                // index into params_
    std::vector<std::int64_t> shape;  // global
    std::vector<Box> rank_boxes;      // the box each rank of the group holds (rank order)
    int owner = 0;                    // the rank that orthogonalises it
  };
  // Every rank's box of every matrix (one all-gather), checked to make each matrix whole.
  void exchange_boxes(const std::vector<std::vector<std::int64_t>>& offsets);
  void step_adamw(double lr);
  void step_muon(double lr);
  // The orthogonalised, scaled-by-nothing updates of matrices [first, last) on this rank's boxes.
  std::vector<at::Tensor> updates(std::size_t first, std::size_t last, const std::vector<at::Tensor>& momenta);

  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  MuonOptions options_;
  std::unique_ptr<PieceGroup> group_;
  std::vector<Matrix> matrices_;
  std::vector<std::size_t> adamw_;  // params_ AdamW updates
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  std::vector<std::int64_t> adamw_steps_;
  std::int64_t steps_ = 0;
};

}  // namespace lft::optim
