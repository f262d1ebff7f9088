// Muon over pieces (optim/muon.h): the ranks of a group, each holding a box of every matrix as the
// engines cut them (FSDP2's even cut of rows, an uneven one with empty pieces, megatron's
// tensor-parallel boxes cut again over shard ranks), update their boxes exactly as one rank
// updates the whole matrices (bit for bit, every step), from the same gradients; and
// LlamaFactory's rule (model/muon_matrices.h) picks the matrices.
#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>

#include "lft/model/muon_matrices.h"
#include "lft/optim/muon.h"
#include "mpi_test_util.h"

namespace lft {
namespace {

using test::world;

class WorldPieces final : public optim::PieceGroup {
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

// How the ranks cut the parameters: FSDP2's even cut of dim 0; an uneven one (all rows on the last
// rank but one row on rank 0); megatron's boxes, tp = 2 where the world is even: down_proj cut by
// columns (row-parallel), q_proj by rows (column-parallel), k_proj replicated over tp (fewer kv
// heads than tp ranks), each box cut again by rows over the world / tp shard ranks.
enum class Cut { EvenRows, UnevenRows, MegatronBoxes };

// An even cut of n over `parts`: part p's [begin, begin + count).
std::pair<std::int64_t, std::int64_t> even(std::int64_t n, int p, int parts) {
  const std::int64_t per = (n + parts - 1) / parts, begin = std::min(n, per * p);
  return {begin, std::min(n, begin + per) - begin};
}

// Rank `me`'s piece of parameter i: a view of `whole`, and its box's offset.
std::pair<at::Tensor, std::vector<std::int64_t>> piece_of(const at::Tensor& whole, std::size_t i, int me, int ranks,
                                                           Cut cut) {
  const std::int64_t d0 = whole.size(0);
  if (cut == Cut::UnevenRows && ranks > 1) {
    const std::int64_t first = std::min<std::int64_t>(1, d0);
    const std::int64_t begin = me == 0 ? 0 : first, rows = me == 0 ? first : me == ranks - 1 ? d0 - first : 0;
    return {whole.narrow(0, begin, rows), {begin}};
  }
  if (cut != Cut::MegatronBoxes || whole.dim() != 2) {
    const auto [begin, rows] = even(d0, me, ranks);
    return {whole.narrow(0, begin, rows), {begin}};
  }
  const int tp = ranks % 2 == 0 ? 2 : 1, t = me % tp, shards = ranks / tp, s = me / tp;
  at::Tensor box = whole;
  std::vector<std::int64_t> offset = {0, 0};
  if (i == 0) {  // row-parallel: columns
    const auto [begin, cols] = even(whole.size(1), t, tp);
    box = box.narrow(1, begin, cols);
    offset[1] = begin;
  } else if (i == 1) {  // column-parallel: rows
    const auto [begin, rows] = even(d0, t, tp);
    box = box.narrow(0, begin, rows);
    offset[0] = begin;
  }
  const auto [begin, rows] = even(box.size(0), s, shards);
  offset[0] += begin;
  return {box.narrow(0, begin, rows), offset};
}

void expect_pieces_equal_one_rank(Cut cut) {
  const int ranks = world().size(), me = world().rank();
  optim::MuonOptions options;
  options.weight_decay = 0.1;
  std::vector<at::Tensor> whole, pieces;
  std::vector<std::string> names;
  std::vector<std::vector<std::int64_t>> shapes, origins, offsets;
  std::vector<bool> matrix;
  for (std::size_t i = 0; i < kParams.size(); ++i) {
    whole.push_back(seeded(kParams[i].shape, 100 + i));
    auto [piece, offset] = piece_of(whole.back(), i, me, ranks, cut);
    pieces.push_back(piece.clone());
    names.push_back(kParams[i].name);
    shapes.push_back(kParams[i].shape);
    matrix.push_back(model::muon_matrix(kParams[i].name, kParams[i].shape));
    origins.emplace_back();
    offsets.push_back(offset);
  }
  optim::Muon one(whole, names, shapes, origins, matrix, options, nullptr);
  optim::Muon cut_up(pieces, names, shapes, offsets, matrix, options, std::make_unique<WorldPieces>());
  EXPECT_EQ(one.muon_matrices(), 3u);
  for (int step = 1; step <= 3; ++step) {
    for (std::size_t i = 0; i < kParams.size(); ++i) {
      const at::Tensor g = seeded(kParams[i].shape, 1000 * step + i);
      whole[i].mutable_grad() = g;
      pieces[i].mutable_grad() = piece_of(g, i, me, ranks, cut).first.clone();
    }
    one.step(1e-2);
    cut_up.step(1e-2);
    for (std::size_t i = 0; i < kParams.size(); ++i) {
      EXPECT_TRUE(at::equal(pieces[i], piece_of(whole[i], i, me, ranks, cut).first))
          << kParams[i].name << " step " << step << " rank " << me << " cut " << static_cast<int>(cut);
      EXPECT_TRUE(at::equal(cut_up.state(i, 0), piece_of(one.state(i, 0), i, me, ranks, cut).first)) << kParams[i].name;
    }
  }
}

TEST(Muon, RowPiecesOverRanksUpdateAsOneRankBitwise) { expect_pieces_equal_one_rank(Cut::EvenRows); }

TEST(Muon, UnevenAndEmptyRowPiecesUpdateAsOneRankBitwise) { expect_pieces_equal_one_rank(Cut::UnevenRows); }

// Megatron's tensor-parallel boxes (columns, rows, replicas) cut again by rows over shard ranks.
TEST(Muon, MegatronBoxesAndTheirShardsUpdateAsOneRankBitwise) { expect_pieces_equal_one_rank(Cut::MegatronBoxes); }

// Pieces that do not make the whole matrix are refused when the optimizer is made (at any world
// size: every rank claims the same two of its six columns).
TEST(Muon, PiecesThatDoNotTileAMatrixAreRefused) {
  const at::Tensor w = at::zeros({4, 6});
  // Every rank claims the first column pair: the other columns are nobody's.
  std::vector<at::Tensor> params = {w.narrow(1, 0, 2).clone()};
  EXPECT_THROW(optim::Muon(params, {"model.layers.0.self_attn.o_proj.weight"}, {{4, 6}}, {{0, 0}}, {true},
                           optim::MuonOptions(), std::make_unique<WorldPieces>()),
               std::logic_error);
}

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
