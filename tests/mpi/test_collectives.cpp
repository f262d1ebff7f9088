// Every collective of the MPI backend against values each rank computes locally, for each dtype
// and for sizes that do not divide by the world size.
#include <ATen/ATen.h>

#include <cmath>
#include <numeric>

#include "mpi_test_util.h"

namespace lft {
namespace {

using test::world;

// Rank r contributes (r + 1) * (i % 13) at index i.
at::Tensor contribution(int rank, int64_t n, at::ScalarType dtype) {
  return (at::arange(n, at::kLong).remainder(13) * (rank + 1)).to(dtype);
}

class AllReduceTest : public testing::TestWithParam<std::tuple<at::ScalarType, int64_t>> {};

TEST_P(AllReduceTest, SumMatchesLocalSum) {
  const auto [dtype, n] = GetParam();
  const int size = world().size();
  auto t = contribution(world().rank(), n, dtype);
  world().all_reduce(t, ReduceOp::Sum);
  const auto expected = contribution(0, n, at::kDouble) * (size * (size + 1) / 2);
  EXPECT_TRUE(at::equal(t.to(at::kDouble), expected)) << "dtype " << dtype << ", n " << n;
}

TEST_P(AllReduceTest, MaxMatchesLocalMax) {
  const auto [dtype, n] = GetParam();
  auto t = contribution(world().rank(), n, dtype);
  world().all_reduce(t, ReduceOp::Max);
  EXPECT_TRUE(at::equal(t, contribution(world().size() - 1, n, dtype)));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AllReduceTest,
                         testing::Combine(testing::Values(at::kFloat, at::kDouble, at::kLong,
                                                          at::kInt, at::kBFloat16, at::kHalf),
                                          testing::Values(int64_t{1}, int64_t{7}, int64_t{1001})));

TEST(AllReduce, AvgOfFloats) {
  const int size = world().size();
  auto t = at::full({5}, static_cast<double>(world().rank()), at::kFloat);
  world().all_reduce(t, ReduceOp::Avg);
  EXPECT_TRUE(at::allclose(t, at::full({5}, (size - 1) / 2.0, at::kFloat)));
}

TEST(AllReduce, AvgOfIntegersIsRejected) {
  auto t = at::ones({3}, at::kLong);
  EXPECT_THROW(world().all_reduce(t, ReduceOp::Avg), std::invalid_argument);
}

// 1 + (n-1) * 2^-8 in bf16: adding 2^-8 to 1 one step at a time in bf16 stays at 1 (half an ulp
// rounds to even), so only an fp32 accumulation reaches the right answer.
TEST(AllReduce, BFloat16SumAccumulatesInFloat32) {
  LFT_REQUIRE_RANKS(3);
  const double mine = world().rank() == 0 ? 1.0 : 1.0 / 256;
  auto t = at::full({4}, mine, at::kBFloat16);
  world().all_reduce(t);
  const float exact = 1.0f + (world().size() - 1) / 256.0f;
  const auto expected = at::full({4}, exact, at::kFloat).to(at::kBFloat16);
  EXPECT_TRUE(at::equal(t, expected)) << t << " vs " << expected;
  EXPECT_GT(t[0].item<float>(), 1.0f);
}

TEST(ReduceScatter, EqualShards) {
  const int size = world().size();
  for (auto dtype : {at::kFloat, at::kDouble, at::kLong, at::kBFloat16}) {
    const int64_t shard = 5;
    auto in = contribution(world().rank(), shard * size, dtype);
    auto out = at::empty({shard}, in.options());
    world().reduce_scatter(in, out);
    auto full = contribution(0, shard * size, at::kDouble) * (size * (size + 1) / 2);
    EXPECT_TRUE(at::equal(out.to(at::kDouble), full.narrow(0, shard * world().rank(), shard)))
        << dtype;
  }
}

// counts[r] = r % 3 + 2*r: unequal, one shard may be small.
std::vector<int64_t> uneven_counts(int size) {
  std::vector<int64_t> c;
  for (int r = 0; r < size; ++r) c.push_back(r % 3 + 2 * r);
  return c;
}

TEST(ReduceScatter, UnequalShardsAndAvg) {
  const int size = world().size();
  const auto counts = uneven_counts(size);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const int64_t offset = std::accumulate(counts.begin(), counts.begin() + world().rank(), int64_t{0});
  auto in = contribution(world().rank(), total, at::kFloat);
  auto out = at::empty({counts[world().rank()]}, at::kFloat);
  world().reduce_scatter(in, out, ReduceOp::Avg, counts);
  auto full = contribution(0, total, at::kDouble) * ((size + 1) / 2.0);
  EXPECT_TRUE(at::allclose(out.to(at::kDouble), full.narrow(0, offset, counts[world().rank()])));
}

// The MPI backend reduce-scatters by direct exchanges and sums each part in rank order: every
// rank's part has the bits of ((in_0 + in_1) + in_2) + ..., the inputs may have any shape, Max
// reduces, and reduce-scatters in flight together match in posting order.
TEST(ReduceScatter, SumsInRankOrderTakesAnyShapeAndMaxAndOverlaps) {
  const int size = world().size(), me = world().rank();
  const int64_t part = 6;
  auto input_of = [&](int r) {
    at::Tensor t = at::empty({size, 2, part / 2}, at::kFloat);
    for (int64_t i = 0; i < t.numel(); ++i)
      // Rank 1 adds 1e8, rank 2 takes it away: another order loses or keeps rank 0's small values.
      t.view({-1})[i] = 1.0f / static_cast<float>(3 + 7 * r + i) + (r == 1 ? 1e8f : r == 2 ? -1e8f : 0.0f);
    return t;
  };
  at::Tensor sum_in = input_of(me), max_in = -input_of(me);
  at::Tensor sum_out = at::empty({2, part / 2}, at::kFloat), max_out = at::empty({part}, at::kFloat);
  WorkPtr first = world().reduce_scatter_async(sum_in, sum_out, ReduceOp::Sum);
  WorkPtr second = world().reduce_scatter_async(max_in, max_out, ReduceOp::Max);
  second->wait();
  first->wait();
  at::Tensor expected_sum = input_of(0).narrow(0, me, 1).reshape({-1});
  at::Tensor expected_max = -input_of(0).narrow(0, me, 1).reshape({-1});
  for (int r = 1; r < size; ++r) {
    const at::Tensor mine = input_of(r).narrow(0, me, 1).reshape({-1});
    expected_sum = expected_sum + mine;
    expected_max = at::maximum(expected_max, -mine);
  }
  EXPECT_TRUE(at::equal(sum_out.reshape({-1}), expected_sum));
  EXPECT_TRUE(at::equal(max_out, expected_max));
}

// 16-bit pieces summed into fp32 (MPI's reduce-scatter): the same bits as widening every input
// to fp32 first, at half the bytes; equal and unequal shards, Sum and Max. Values that bf16 holds
// exactly (at least rank 0's) whose fp32 sum the 16-bit dtype would round.
TEST(ReduceScatter, SixteenBitPiecesSumIntoFp32AsWidenedInputsDo) {
  const int size = world().size(), me = world().rank();
  ASSERT_TRUE(world().sums_16bit_into_fp32()) << "the MPI communicator sums 16-bit pieces in fp32";
  const auto counts = uneven_counts(size);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  auto input_of = [&](int r, at::ScalarType dtype) {
    const int bits = dtype == at::kBFloat16 ? 7 : 10;  // the dtype's mantissa
    return (1.0 + at::arange(total, at::kDouble).remainder(5).mul(0.125) + std::ldexp(1.0, -bits - r)).to(dtype);
  };
  for (const at::ScalarType dtype : {at::kBFloat16, at::kHalf})
    for (const bool equal : {true, false})
      for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
        const std::vector<int64_t> shards = equal ? std::vector<int64_t>{} : counts;
        const int64_t mine = equal ? total / size : counts[me];
        const at::Tensor in = equal ? input_of(me, dtype).narrow(0, 0, total / size * size).contiguous() : input_of(me, dtype);
        at::Tensor out = at::empty({mine}, at::kFloat), widened_out = at::empty({mine}, at::kFloat);
        world().reset_stats();
        world().reduce_scatter(in, out, op, shards);
        EXPECT_EQ(world().stats()[CollKind::ReduceScatter].bytes, static_cast<std::uint64_t>(in.numel()) * 2);
        world().reduce_scatter(in.to(at::kFloat), widened_out, op, shards);
        EXPECT_TRUE(at::equal(out, widened_out)) << dtype << (equal ? " equal" : " unequal") << " shards";
        if (op == ReduceOp::Sum && size > 1 && mine > 0)  // the 16-bit sum would have rounded
          EXPECT_FALSE(at::equal(out, out.to(dtype).to(at::kFloat))) << dtype;
      }
  at::Tensor narrow_out = at::empty({counts[me]}, at::kBFloat16);
  EXPECT_THROW(world().reduce_scatter(at::zeros({total}, at::kFloat), narrow_out, ReduceOp::Sum, counts),
               std::invalid_argument);
}

TEST(AllGather, EqualAndUnequalShards) {
  const int size = world().size();
  for (auto dtype : {at::kFloat, at::kLong, at::kBFloat16, at::kByte}) {
    auto in = at::full({3}, world().rank() + 1, at::TensorOptions().dtype(dtype));
    auto out = at::empty({3 * size}, in.options());
    world().all_gather(in, out);
    auto expected = at::arange(1, size + 1, at::kLong).repeat_interleave(3).to(dtype);
    EXPECT_TRUE(at::equal(out, expected)) << dtype;
  }
  const auto counts = uneven_counts(size);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  auto in = at::full({counts[world().rank()]}, world().rank() + 1, at::kDouble);
  auto out = at::empty({total}, at::kDouble);
  world().all_gather(in, out, counts);
  std::vector<double> expected;
  for (int r = 0; r < size; ++r) expected.insert(expected.end(), counts[r], r + 1.0);
  EXPECT_TRUE(at::equal(out, at::tensor(expected, at::kDouble)));
}

// Rank r sends block j = 16 r + 2 j + (0, 1) to rank j (exact in bf16 up to 8 ranks); rank j's
// block r is what r sent it.
TEST(AllToAll, EveryRankGetsItsBlockFromEachRank) {
  const int size = world().size(), me = world().rank();
  const int64_t k = 2;
  for (auto dtype : {at::kFloat, at::kLong, at::kBFloat16}) {
    const auto block_of = [&](int from, int to) { return at::arange(k, at::kLong) + 16 * from + 2 * to; };
    std::vector<at::Tensor> mine, expected;
    for (int j = 0; j < size; ++j) mine.push_back(block_of(me, j));
    for (int r = 0; r < size; ++r) expected.push_back(block_of(r, me));
    const at::Tensor in = at::cat(mine).to(dtype);
    at::Tensor out = at::empty_like(in);
    world().reset_stats();
    world().all_to_all(in, out);
    EXPECT_TRUE(at::equal(out.to(at::kLong), at::cat(expected))) << "dtype " << dtype;
    EXPECT_EQ(world().stats()[CollKind::AllToAll].calls, 1u);
    EXPECT_EQ(world().stats()[CollKind::AllToAll].bytes, static_cast<std::uint64_t>(in.numel() * in.element_size()));
  }
  at::Tensor longer = at::zeros({size * k + 1}), out = at::zeros({size * k});
  EXPECT_THROW(world().all_to_all(longer, out), std::invalid_argument);
}

// Uneven blocks (the expert-parallel row exchange): rank r sends (r + j) % 3 rows of 3 elements to
// rank j (some none), each row holding (from, to, i); rank j gets, in rank order, what each sent
// it, counted as the even all-to-all that sends as many bytes to the other ranks (the rows that
// leave x n / (n - 1): the bus bytes are what leaves). Counts that do not add up are refused.
TEST(AllToAll, UnevenBlocksArriveInRankOrder) {
  const int size = world().size(), me = world().rank();
  const auto rows_between = [](int from, int to) { return static_cast<int64_t>((from + to) % 3); };
  const auto block = [&](int from, int to) {
    const int64_t rows = rows_between(from, to);
    return at::stack({at::full({rows}, from, at::kLong), at::full({rows}, to, at::kLong), at::arange(rows, at::kLong)}, 1);
  };
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    std::vector<at::Tensor> mine, expected;
    std::vector<int64_t> send, recv;
    for (int j = 0; j < size; ++j) {
      mine.push_back(block(me, j));
      send.push_back(3 * rows_between(me, j));
      expected.push_back(block(j, me));
      recv.push_back(3 * rows_between(j, me));
    }
    const at::Tensor in = at::cat(mine).to(dtype);
    at::Tensor out = at::empty({at::cat(expected).size(0), 3}, in.options());
    world().reset_stats();
    world().all_to_all(in, out, send, recv);
    EXPECT_TRUE(at::equal(out.to(at::kLong), at::cat(expected))) << "dtype " << dtype;
    EXPECT_EQ(world().stats()[CollKind::AllToAll].calls, 1u);
    const double leaving = static_cast<double>((in.numel() - send[static_cast<std::size_t>(me)]) * in.element_size());
    EXPECT_EQ(world().stats()[CollKind::AllToAll].bytes,
              size == 1 ? 0u : static_cast<std::uint64_t>(std::llround(leaving * size / (size - 1))));
    EXPECT_NEAR(bus_bytes(CollKind::AllToAll, static_cast<double>(world().stats()[CollKind::AllToAll].bytes), size),
                size == 1 ? 0.0 : leaving, 1.0);
    std::vector<int64_t> wrong = send;
    wrong[0] += 1;
    EXPECT_THROW(world().all_to_all(in, out, wrong, recv), std::invalid_argument);
    EXPECT_THROW(world().all_to_all(in, out, send, {}), std::invalid_argument);
  }
}

TEST(Broadcast, FromLastRank) {
  const int root = world().size() - 1;
  auto t = world().rank() == root ? at::arange(11, at::kHalf) : at::zeros({11}, at::kHalf);
  world().broadcast(t, root);
  EXPECT_TRUE(at::equal(t, at::arange(11, at::kHalf)));
}

TEST(SendRecv, RingPassesEachRanksTensor) {
  LFT_REQUIRE_RANKS(2);
  const int size = world().size();
  const int next = (world().rank() + 1) % size, prev = (world().rank() + size - 1) % size;
  auto out = at::full({6}, world().rank(), at::kFloat);
  auto in = at::empty({6}, at::kFloat);
  auto recv = world().recv_async(in, prev, 7);
  auto send = world().send_async(out, next, 7);
  send->wait();
  recv->wait();
  EXPECT_TRUE(at::equal(in, at::full({6}, prev, at::kFloat)));
}

TEST(Async, ManyInFlightCompleteInAnyWaitOrder) {
  std::vector<at::Tensor> tensors;
  std::vector<WorkPtr> works;
  for (int i = 0; i < 6; ++i) {
    tensors.push_back(at::full({100 + i}, static_cast<double>(i), at::kFloat));
    works.push_back(world().all_reduce_async(tensors.back()));
  }
  for (int i = 5; i >= 0; --i) {
    while (!works[i]->test()) {
    }
    works[i]->wait();  // a no-op once test() said done
    EXPECT_TRUE(at::equal(tensors[i], at::full({100 + i}, i * world().size(), at::kFloat)));
  }
  world().barrier();
}

TEST(Stats, CountCallsAndPayloadBytes) {
  MpiCommunicator comm(MPI_COMM_WORLD, "stats", false);
  auto t = at::ones({100}, at::kFloat);
  comm.all_reduce(t);
  auto h = at::ones({100}, at::kBFloat16);
  comm.all_reduce(h);  // travels as fp32 on MPI
  auto out = at::empty({100 * comm.size()}, at::kBFloat16);
  comm.all_gather(h, out);  // moves 16-bit words
  EXPECT_EQ(comm.stats()[CollKind::AllReduce].calls, 2u);
  EXPECT_EQ(comm.stats()[CollKind::AllReduce].bytes, 800u);
  EXPECT_EQ(comm.stats()[CollKind::AllGather].bytes, 200u * comm.size());
  EXPECT_GT(comm.stats()[CollKind::AllReduce].seconds, 0.0);
  EXPECT_EQ(comm.stats()[CollKind::Broadcast].calls, 0u);
  comm.reset_stats();
  EXPECT_EQ(comm.stats().total_calls(), 0u);
}

TEST(Validation, ShapeMismatchesAreRejectedBeforeCommunicating) {
  auto in = at::ones({5}, at::kFloat);
  auto wrong = at::empty({5 * world().size() + 1}, at::kFloat);
  EXPECT_THROW(world().all_gather(in, wrong), std::invalid_argument);
  EXPECT_THROW(world().all_gather(in, at::empty({5 * world().size()}, at::kDouble)),
               std::invalid_argument);
  EXPECT_THROW(world().reduce_scatter(wrong, in), std::invalid_argument);
  EXPECT_THROW(world().all_gather(in, wrong, {1, 2}), std::invalid_argument);
}

}  // namespace
}  // namespace lft
