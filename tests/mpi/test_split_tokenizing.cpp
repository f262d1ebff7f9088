// SFT data and pre-training text tokenized split across ranks (each rank every n-th conversation, one all-gather)
// gives every rank exactly the sequences one rank makes alone, with and without the cache; a
// failure on one rank reaches every rank with that rank's message.
#include <ATen/ATen.h>

#include <cstdlib>
#include <numeric>

#include "lft/config/config.h"
#include "lft/train/split_tokenizing.h"
#include "lft/train/training_data.h"
#include "mpi_test_util.h"

namespace lft {
namespace {

using test::world;

std::string sft_toml(const std::string& extra) {
  return "distributed = \"ddp\"\nstage = \"sft\"\ntrain_dataset = \"inputs/data/arithmetic_alpaca.json\"\n"
         "template = \"default\"\ncutoff_len = 64\nval_size = 0.1\n" + extra +
         "[model]\nvocab_size = 259\nhidden_size = 32\nintermediate_size = 64\n"
         "num_hidden_layers = 2\nnum_attention_heads = 4\nnum_key_value_heads = 2\n";
}

data::Batch everything(const train::TrainingData& d) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(d.num_sequences()));
  std::iota(all.begin(), all.end(), 0);
  return d.batch(all);
}

void expect_same(const train::TrainingData& a, const train::TrainingData& b) {
  ASSERT_EQ(a.num_sequences(), b.num_sequences());
  const data::Batch x = everything(a), y = everything(b);
  EXPECT_TRUE(at::equal(x.input_ids, y.input_ids));
  EXPECT_TRUE(at::equal(x.weights, y.weights));
  EXPECT_EQ(a.eval().num_sequences(), b.eval().num_sequences());
}

TEST(SplitTokenizing, EveryRankGetsTheOneRankSequences) {
  LFT_REQUIRE_RANKS(2);
  for (const std::string extra : {"", "packing = true\n", "neat_packing = true\npacking = true\n"}) {
    SCOPED_TRACE(extra);
    const config::Config cfg = config::parse_config(sft_toml(extra), "split.toml");
    const train::TrainingData alone(train::data_options(cfg), MPI_COMM_SELF);
    const train::TrainingData split(train::data_options(cfg), MPI_COMM_WORLD);
    expect_same(alone, split);
  }
}

TEST(SplitTokenizing, PretrainingTextGivesEveryRankTheOneRankStream) {
  LFT_REQUIRE_RANKS(2);
  const config::Config cfg = config::parse_config(
      "distributed = \"ddp\"\ntrain_dataset = \"inputs/data/arithmetic.txt\"\ncutoff_len = 64\n"
      "[model]\nvocab_size = 259\nhidden_size = 32\nintermediate_size = 64\nnum_hidden_layers = 2\n"
      "num_attention_heads = 4\nnum_key_value_heads = 2\n",
      "pt.toml");
  const train::TrainingData alone(train::data_options(cfg), MPI_COMM_SELF);
  const train::TrainingData split(train::data_options(cfg), MPI_COMM_WORLD);
  ASSERT_EQ(alone.num_sequences(), split.num_sequences());
  EXPECT_TRUE(at::equal(everything(alone).input_ids, everything(split).input_ids));
}

TEST(SplitTokenizing, CacheWrittenBySplitTokenizingIsReusedByEveryRank) {
  LFT_REQUIRE_RANKS(2);
  const std::string dir = "/tmp/lft_split_cache_np" + std::to_string(world().size());
  if (world().rank() == 0) std::remove((dir + ".lftok").c_str());
  world().barrier();
  const config::Config cfg =
      config::parse_config(sft_toml("tokenized_path = \"" + dir + ".lftok\"\n"), "split.toml");
  const train::TrainingData first(train::data_options(cfg), MPI_COMM_WORLD);  // tokenizes, rank 0 writes
  world().barrier();
  const train::TrainingData second(train::data_options(cfg), MPI_COMM_WORLD);  // every rank reads
  EXPECT_NE(second.describe().find("reused"), std::string::npos) << second.describe();
  expect_same(first, second);
  expect_same(train::TrainingData(train::data_options(config::parse_config(sft_toml(""), "split.toml")), MPI_COMM_SELF), second);
}

TEST(SplitTokenizing, OneRanksErrorReachesEveryRank) {
  LFT_REQUIRE_RANKS(2);
  const data::SftParallel p = train::split_tokenizing(MPI_COMM_WORLD);
  try {
    p.gather({}, world().rank() == 1 ? "id 9999 outside the vocabulary" : "", 1);
    ADD_FAILURE() << "no rank may go on";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "rank 1 while tokenizing: id 9999 outside the vocabulary");
  }
}

TEST(SplitTokenizing, ExamplesSurviveTheWireForm) {
  data::TokenizedExample a, b;
  a.ids = {1, 2, 3};
  a.weights = {0.f, 1.f, 0.5f};
  a.truncated = true;
  b.ids = {};
  const auto packed = train::pack_examples({a, b});
  const auto back = train::unpack_examples(packed.data(), packed.size());
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].ids, a.ids);
  EXPECT_EQ(back[0].weights, a.weights);
  EXPECT_TRUE(back[0].truncated);
  EXPECT_TRUE(back[1].ids.empty());
  EXPECT_FALSE(back[1].truncated);
}

}  // namespace
}  // namespace lft
