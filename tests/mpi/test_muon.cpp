// Muon over row pieces (optim/muon.h): the ranks of a group, each holding rows of every matrix as
// the sharding engines cut them (FSDP2's even cut, and an uneven one with empty pieces), update
// their rows exactly as one rank updates the whole matrices (bit for bit, every step), from the
// same gradients; and LlamaFactory's rule (model/muon_matrices.h) picks the matrices.
#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>

#include "lft/model/muon_matrices.h"
#include "lft/optim/muon.h"
#include "mpi_test_util.h"

namespace lft {
namespace {

using test::world;

class WorldRows final : public optim::RowGroup {
 public:
  int rank() const override { return world().rank(); }
  int size() const override { return world().size(); }
  void all_gather(const at::Tensor& in, const at::Tensor& out, const std::vector<std::int64_t>& counts) override {
    world().all_gather(in, out, counts);
  }
};

struct Param {
  std::string name;
  std::vector<std::int64_t> shape;
};

// Tall, wide, smaller than the world (empty pieces), a norm and the embedding (AdamW's).
const std::vector<Param> kParams = {{"model.layers.0.mlp.down_proj.weight", {37, 16}},
                                    {"model.layers.0.self_attn.q_proj.weight", {16, 40}},
                                    {"model.layers.0.input_layernorm.weight", {16}},
                                    {"model.layers.0.self_attn.k_proj.weight", {3, 8}},
                                    {"model.embed_tokens.weight", {50, 16}}};

at::Tensor seeded(const std::vector<std::int64_t>& shape, std::uint64_t seed) {
  at::Generator g = at::detail::createCPUGenerator(seed);
  return at::randn(shape, g, at::kFloat);
}

// Rank r's rows [begin, begin + rows) of a parameter of d0 rows: FSDP2's ceil cut, or (uneven) all
// rows on the last rank but one row on rank 0.
std::pair<std::int64_t, std::int64_t> rows_of(std::int64_t d0, int rank, int ranks, bool uneven) {
  if (uneven && ranks > 1) {
    if (rank == 0) return {0, std::min<std::int64_t>(1, d0)};
    if (rank == ranks - 1) return {std::min<std::int64_t>(1, d0), d0 - std::min<std::int64_t>(1, d0)};
    return {std::min<std::int64_t>(1, d0), 0};
  }
  const std::int64_t per = (d0 + ranks - 1) / ranks, begin = std::min(d0, per * rank);
  return {begin, std::min(d0, begin + per) - begin};
}

void expect_pieces_equal_one_rank(bool uneven) {
  const int ranks = world().size(), me = world().rank();
  optim::MuonOptions options;
  options.weight_decay = 0.1;
  std::vector<at::Tensor> whole, pieces;
  std::vector<std::string> names;
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::int64_t> zeros, offsets;
  std::vector<bool> matrix;
  for (std::size_t i = 0; i < kParams.size(); ++i) {
    whole.push_back(seeded(kParams[i].shape, 100 + i));
    const auto [begin, rows] = rows_of(kParams[i].shape[0], me, ranks, uneven);
    pieces.push_back(whole.back().narrow(0, begin, rows).clone());
    names.push_back(kParams[i].name);
    shapes.push_back(kParams[i].shape);
    matrix.push_back(model::muon_matrix(kParams[i].name, kParams[i].shape));
    zeros.push_back(0);
    offsets.push_back(begin);
  }
  optim::Muon one(whole, names, shapes, zeros, matrix, options, nullptr);
  optim::Muon cut(pieces, names, shapes, offsets, matrix, options, std::make_unique<WorldRows>());
  EXPECT_EQ(one.muon_matrices(), 3u);
  for (int step = 1; step <= 3; ++step) {
    for (std::size_t i = 0; i < kParams.size(); ++i) {
      const at::Tensor g = seeded(kParams[i].shape, 1000 * step + i);
      whole[i].mutable_grad() = g;
      const auto [begin, rows] = rows_of(kParams[i].shape[0], me, ranks, uneven);
      pieces[i].mutable_grad() = g.narrow(0, begin, rows).clone();
    }
    one.step(1e-2);
    cut.step(1e-2);
    for (std::size_t i = 0; i < kParams.size(); ++i) {
      const auto [begin, rows] = rows_of(kParams[i].shape[0], me, ranks, uneven);
      EXPECT_TRUE(at::equal(pieces[i], whole[i].narrow(0, begin, rows)))
          << kParams[i].name << " step " << step << " rank " << me << (uneven ? " (uneven cut)" : "");
      EXPECT_TRUE(at::equal(cut.state(i, 0), one.state(i, 0).narrow(0, begin, rows))) << kParams[i].name;
    }
  }
}

TEST(Muon, RowPiecesOverRanksUpdateAsOneRankBitwise) { expect_pieces_equal_one_rank(false); }

TEST(Muon, UnevenAndEmptyRowPiecesUpdateAsOneRankBitwise) { expect_pieces_equal_one_rank(true); }

TEST(Muon, LlamaFactoryRuleChoosesTheMatrices) {
  EXPECT_TRUE(model::muon_matrix("model.layers.3.self_attn.o_proj.weight", {8, 8}));
  EXPECT_TRUE(model::muon_matrix("model.layers.3.self_attn.o_proj.lora_A.weight", {4, 8}));
  EXPECT_TRUE(model::muon_matrix("model.layers.3.mlp.gate.weight", {8, 16}));  // a router
  EXPECT_FALSE(model::muon_matrix("model.embed_tokens.weight", {50, 8}));
  EXPECT_FALSE(model::muon_matrix("lm_head.weight", {50, 8}));
  EXPECT_FALSE(model::muon_matrix("model.norm.weight", {8}));
  EXPECT_FALSE(model::muon_matrix("model.layers.0.mlp.experts.3.down_proj.weight", {8, 16}));
  // v1's rule: LoRA's factors take AdamW.
  EXPECT_FALSE(model::muon_matrix("model.layers.3.self_attn.o_proj.lora_B.weight", {8, 4}, /*adapters=*/false));
  EXPECT_TRUE(model::muon_matrix("model.layers.3.self_attn.o_proj.weight", {8, 8}, /*adapters=*/false));
}

}  // namespace
}  // namespace lft
