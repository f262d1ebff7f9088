// Muon (muon.h): Moonlight's update, the same ATen operations in the same order as LlamaFactory's
// third_party/muon/muon.py, so that one rank's run equals LlamaFactory's bit for bit where torch's
// CPU kernels are LibTorch's.
#include "lft/optim/muon.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace lft::optim {
namespace {


// The matrices of one exchange: whole ones of at most this many bytes together (one at least).
constexpr std::int64_t kChunkBytes = 64LL << 20;

}  // namespace

at::Tensor newton_schulz5(const at::Tensor& g, std::int64_t steps) {
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  at::Tensor x = g.to(at::kBFloat16);
  const bool tall = g.size(0) > g.size(1);
  if (tall) x = x.t();
  x = x / (x.norm() + 1e-7);  // spectral norm at most 1
  for (std::int64_t i = 0; i < steps; ++i) {
    at::Tensor A = at::matmul(x, x.t());
    // Python's `b * A + c * A @ A`: (c * A) @ A, as its operators associate.
    at::Tensor B = A * b + at::matmul(A * c, A);
    x = x * a + at::matmul(B, x);
  }
  return tall ? x.t() : x;
}

Muon::Muon(std::vector<at::Tensor> params, std::vector<std::string> names,
           std::vector<std::vector<std::int64_t>> global_shapes, const std::vector<std::vector<std::int64_t>>& offsets,
           const std::vector<bool>& matrix, MuonOptions options, std::unique_ptr<PieceGroup> group)
    : params_(std::move(params)), names_(std::move(names)), options_(options), group_(std::move(group)) {
  if (params_.size() != names_.size() || params_.size() != global_shapes.size() ||
      params_.size() != offsets.size() || params_.size() != matrix.size())
    throw std::invalid_argument("Muon: one name, global shape, offset and choice per parameter is required");
  const int ranks = group_ ? group_->size() : 1;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (matrix[i]) {
      if (global_shapes[i].size() != 2 || params_[i].dim() != 2)
        throw std::invalid_argument("Muon: " + names_[i] + " is no matrix");
      Matrix m;
      m.param = i;
      m.shape = global_shapes[i];
      m.owner = static_cast<int>(matrices_.size() % static_cast<std::size_t>(ranks));
      matrices_.push_back(std::move(m));
      exp_avg_.push_back(at::zeros_like(params_[i]));
      exp_avg_sq_.emplace_back();
    } else {
      adamw_.push_back(i);
      exp_avg_.push_back(at::zeros_like(params_[i]));
      exp_avg_sq_.push_back(at::zeros_like(params_[i]));
    }
  }
  adamw_steps_.assign(params_.size(), 0);
  exchange_boxes(offsets);
}

void Muon::exchange_boxes(const std::vector<std::vector<std::int64_t>>& offsets) {
  // Every rank's box of every matrix (the same matrices in the same order on every rank of the
  // group: the engine cuts every parameter over all of them): row, column, rows, columns.
  const int ranks = group_ ? group_->size() : 1;
  const auto count = static_cast<std::int64_t>(matrices_.size());
  at::Tensor mine = at::empty({count, 4}, at::kLong);
  for (std::int64_t k = 0; k < count; ++k) {
    const std::size_t i = matrices_[static_cast<std::size_t>(k)].param;
    const std::vector<std::int64_t>& at = offsets[i];
    mine[k][0] = at.empty() ? 0 : at[0];
    mine[k][1] = at.size() < 2 ? 0 : at[1];
    mine[k][2] = params_[i].size(0);
    mine[k][3] = params_[i].size(1);
  }
  at::Tensor all = mine.reshape({-1});
  if (ranks > 1) {
    all = at::empty({ranks * mine.numel()}, at::kLong);
    group_->all_gather(mine.reshape({-1}), all, std::vector<std::int64_t>(static_cast<std::size_t>(ranks), mine.numel()));
  }
  const at::Tensor table = all.view({ranks, count, 4});
  const auto values = table.accessor<std::int64_t, 3>();
  for (std::int64_t k = 0; k < count; ++k) {
    Matrix& m = matrices_[static_cast<std::size_t>(k)];
    // The distinct boxes must tile the matrix: inside it, and their areas adding up to it.
    std::vector<std::vector<std::int64_t>> distinct;
    std::int64_t area = 0;
    for (int r = 0; r < ranks; ++r) {
      const Box b{values[r][k][0], values[r][k][1], values[r][k][2], values[r][k][3]};
      m.rank_boxes.push_back(b);
      const bool inside = b.row >= 0 && b.col >= 0 && b.row + b.rows <= m.shape[0] && b.col + b.cols <= m.shape[1];
      const std::vector<std::int64_t> key = {b.row, b.col, b.rows, b.cols};
      if (!inside) area = -1;
      if (inside && b.numel() > 0 && std::find(distinct.begin(), distinct.end(), key) == distinct.end()) {
        distinct.push_back(key);
        area += b.numel();
      }
    }
    if (area != m.shape[0] * m.shape[1])
      throw std::logic_error("Muon: the pieces of " + names_[m.param] + " over " + std::to_string(ranks) +
                             " ranks do not make its " + std::to_string(m.shape[0]) + " x " + std::to_string(m.shape[1]) +
                             " elements");
  }
}

void Muon::step(double lr) {
  c10::NoGradGuard no_grad;
  step_muon(lr);
  step_adamw(lr);
  ++steps_;
}

void Muon::step_muon(double lr) {
  const double wd = options_.weight_decay;
  // Chunk by chunk, so that the update directions (a copy each, with Nesterov) and the exchanged
  // matrices of one chunk only are held at a time.
  std::vector<at::Tensor> momenta(matrices_.size());
  for (std::size_t first = 0; first < matrices_.size();) {
    std::size_t last = first;
    std::int64_t bytes = 0;
    while (last < matrices_.size() && (last == first || bytes < kChunkBytes)) {
      bytes += matrices_[last].shape[0] * matrices_[last].shape[1] * 4;
      ++last;
    }
    for (std::size_t k = first; k < last; ++k) {
      const Matrix& m = matrices_[k];
      const at::Tensor& g = params_[m.param].grad();
      if (!g.defined()) {
        if (group_ && group_->size() > 1)
          throw std::logic_error("Muon: " + names_[m.param] + " has no gradient on this rank of its group");
        continue;  // as torch's optimizers: a parameter without a gradient keeps its value
      }
      at::Tensor& buf = exp_avg_[m.param];
      buf.mul_(options_.momentum).add_(g);
      momenta[k] = options_.nesterov ? g.add(buf, options_.momentum) : buf;
    }
    const std::vector<at::Tensor> u = updates(first, last, momenta);
    for (std::size_t k = first; k < last; ++k) momenta[k] = at::Tensor();
    for (std::size_t k = first; k < last; ++k) {
      if (!u[k - first].defined()) continue;
      const Matrix& m = matrices_[k];
      const double scale = 0.2 * std::sqrt(static_cast<double>(std::max(m.shape[0], m.shape[1])));
      at::Tensor& p = params_[m.param];
      p.mul_(1 - lr * wd);
      p.add_(u[k - first], -(lr * scale));
    }
    first = last;
  }
}

std::vector<at::Tensor> Muon::updates(std::size_t first, std::size_t last, const std::vector<at::Tensor>& momenta) {
  std::vector<at::Tensor> out(last - first);
  if (group_ == nullptr || group_->size() == 1) {
    for (std::size_t k = first; k < last; ++k)
      if (momenta[k].defined()) out[k - first] = newton_schulz5(momenta[k], options_.ns_steps);
    return out;
  }
  const int ranks = group_->size(), me = group_->rank();
  // 1. Every rank's momentum pieces of the chunk's matrices, back to back in rank order.
  std::vector<std::int64_t> counts(static_cast<std::size_t>(ranks), 0);
  for (int r = 0; r < ranks; ++r)
    for (std::size_t k = first; k < last; ++k) counts[r] += matrices_[k].rank_boxes[r].numel();
  std::vector<at::Tensor> mine;
  for (std::size_t k = first; k < last; ++k) mine.push_back(momenta[k].reshape({-1}));
  std::int64_t all_elements = 0;
  for (std::int64_t c : counts) all_elements += c;
  // The exchange stays where the momenta are (the GPU, or the host under offload): the piece
  // group moves it to its communicator's device when that differs.
  const at::TensorOptions fp32 = momenta[first].options().dtype(at::kFloat);
  at::Tensor gathered = at::empty({all_elements}, fp32);
  group_->all_gather(at::cat(mine), gathered, counts);
  // 2. The matrices this rank is dealt, each piece placed in its box, orthogonalised.
  std::vector<std::int64_t> cursor(static_cast<std::size_t>(ranks), 0);
  for (int r = 1; r < ranks; ++r) cursor[r] = cursor[r - 1] + counts[r - 1];
  std::vector<at::Tensor> dealt;
  std::vector<std::int64_t> dealt_counts(static_cast<std::size_t>(ranks), 0);
  for (std::size_t k = first; k < last; ++k) {
    const Matrix& m = matrices_[k];
    at::Tensor whole = m.owner == me ? at::empty(m.shape, fp32) : at::Tensor();
    for (int r = 0; r < ranks; ++r) {
      const Box& b = m.rank_boxes[r];
      if (m.owner == me && b.numel() > 0)
        box_of(whole, b).copy_(gathered.narrow(0, cursor[r], b.numel()).view({b.rows, b.cols}));
      cursor[r] += b.numel();
    }
    dealt_counts[m.owner] += m.shape[0] * m.shape[1];
    if (m.owner == me) dealt.push_back(newton_schulz5(whole, options_.ns_steps).reshape({-1}));
  }
  // 3. Every rank's updates, and this rank's box of each.
  std::int64_t total = 0;
  for (std::int64_t c : dealt_counts) total += c;
  at::Tensor updates = at::empty({total}, fp32.dtype(at::kBFloat16));
  const at::Tensor sent = dealt.empty() ? at::empty({0}, fp32.dtype(at::kBFloat16)) : at::cat(dealt);
  group_->all_gather(sent, updates, dealt_counts);
  std::vector<std::int64_t> owner_start(static_cast<std::size_t>(ranks), 0);
  for (int r = 1; r < ranks; ++r) owner_start[r] = owner_start[r - 1] + dealt_counts[r - 1];
  for (std::size_t k = first; k < last; ++k) {
    const Matrix& m = matrices_[k];
    const std::int64_t numel = m.shape[0] * m.shape[1];
    at::Tensor whole = updates.narrow(0, owner_start[m.owner], numel).view(m.shape);
    owner_start[m.owner] += numel;
    out[k - first] = box_of(whole, m.rank_boxes[me]);
  }
  return out;
}

void Muon::step_adamw(double lr) {
  const double beta1 = options_.adamw_beta1, beta2 = options_.adamw_beta2;
  for (std::size_t i : adamw_) {
    const at::Tensor& g = params_[i].grad();
    if (!g.defined()) continue;
    const std::int64_t step = ++adamw_steps_[i];
    at::Tensor& m = exp_avg_[i];
    at::Tensor& v = exp_avg_sq_[i];
    m.lerp_(g, 1 - beta1);
    v.lerp_(g.square(), 1 - beta2);
    const at::Tensor u = m / (v.sqrt() + options_.adamw_eps);
    const double bias1 = 1 - std::pow(beta1, static_cast<double>(step));
    const double bias2 = 1 - std::pow(beta2, static_cast<double>(step));
    const double scale = bias1 / std::pow(bias2, 0.5);  // Python's `** 0.5`: pow, not sqrt
    at::Tensor& p = params_[i];
    p.mul_(1 - lr * options_.weight_decay);
    p.add_(u, -lr / scale);
  }
}

void Muon::set_steps(std::int64_t steps) {
  steps_ = steps;
  std::fill(adamw_steps_.begin(), adamw_steps_.end(), steps);
}

void Muon::load_state(std::size_t param, std::size_t k, const at::Tensor& value) {
  c10::NoGradGuard no_grad;
  at::Tensor& t = (k == 0 ? exp_avg_ : exp_avg_sq_).at(param);
  if (!t.defined()) throw std::logic_error("Muon: " + names_.at(param) + " has no state " + state_names().at(k));
  t.copy_(value);
}

std::vector<std::pair<std::string, double>> Muon::hyperparameters() const {
  return {{"muon", 1.0},
          {"momentum", options_.momentum},
          {"nesterov", options_.nesterov ? 1.0 : 0.0},
          {"ns_steps", static_cast<double>(options_.ns_steps)},
          {"weight_decay", options_.weight_decay},
          {"beta1", options_.adamw_beta1},
          {"beta2", options_.adamw_beta2},
          {"eps", options_.adamw_eps}};
}

std::string Muon::describe() const {
  const int ranks = group_ ? group_->size() : 1;
  return "muon: " + std::to_string(matrices_.size()) + " matrices (momentum " +
         std::to_string(options_.momentum).substr(0, 5) + (options_.nesterov ? " Nesterov, " : ", ") +
         std::to_string(options_.ns_steps) + " Newton-Schulz steps in bf16" +
         (ranks > 1 ? ", each gathered whole and dealt to one of the " + std::to_string(ranks) + " ranks of its pieces"
                    : std::string()) +
         "), Moonlight's AdamW for the other " + std::to_string(adamw_.size()) + " tensors; weight decay " +
         std::to_string(options_.weight_decay).substr(0, 6) + " on all";
}

std::int64_t Muon::state_bytes() const {
  std::int64_t n = 0;
  for (const at::Tensor* list : {exp_avg_.data(), exp_avg_sq_.data()})
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (list[i].defined()) n += list[i].numel() * list[i].element_size();
  return n;
}

}  // namespace lft::optim
