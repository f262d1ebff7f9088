// Training sequences from SFT and pre-training data: LlamaFactory's truncation and knapsack,
// packing boundaries, neat packing, batches and their weights, the real demo files end to end,
// the eval split, and the tokenized-data cache.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "lft/data/corpus.h"
#include "lft/data/packed_dataset.h"
#include "lft/data/sft_dataset.h"
#include "lft/runtime/error.h"
#include "sft_test_util.h"
#include "test_util.h"

namespace lft::data {
namespace {

const SpecialTokens kByteSpecial{ByteTokenizer::kBos, ByteTokenizer::kEos, ByteTokenizer::kPad};
constexpr std::int32_t P = ByteTokenizer::kPad;

// Prompt bytes weigh 0, response bytes `w`.
TokenizedExample example(const std::string& prompt, const std::string& response, float w = 1.0f) {
  TokenizedExample ex;
  for (const char c : prompt + response) ex.ids.push_back(static_cast<unsigned char>(c));
  ex.weights.assign(prompt.size(), 0.0f);
  ex.weights.insert(ex.weights.end(), response.size(), w);
  return ex;
}

template <class T>
std::vector<T> row(const at::Tensor& t, std::int64_t r) {
  const at::Tensor c = t[r].contiguous();
  return std::vector<T>(c.data_ptr<T>(), c.data_ptr<T>() + c.numel());
}

std::vector<std::int32_t> ids_row(const Batch& b, std::int64_t r) {
  std::vector<std::int32_t> out;
  for (const std::int64_t id : row<std::int64_t>(b.input_ids, r))
    out.push_back(static_cast<std::int32_t>(id));
  return out;
}

SftDataset all_of(const PackedSequences& seqs) {
  std::vector<std::int64_t> rows;
  for (std::int64_t i = 0; i < seqs.num_sequences(); ++i) rows.push_back(i);
  return SftDataset(std::make_shared<const PackedSequences>(seqs), rows, P);
}

TEST(SftSequencesTest, InferSeqlenMatchesLlamaFactory) {
  using Pair = std::pair<std::int64_t, std::int64_t>;
  EXPECT_EQ(infer_seqlen(10, 3, 8), Pair(5, 3));   // short target: only the source is cut
  EXPECT_EQ(infer_seqlen(3, 10, 8), Pair(3, 5));   // short source: the target gets the rest
  EXPECT_EQ(infer_seqlen(10, 10, 8), Pair(4, 4));  // both long: in proportion
  EXPECT_EQ(infer_seqlen(6, 9, 8), Pair(4, 4));    // int(8 * 9/15) = int(4.8)
  EXPECT_EQ(infer_seqlen(1, 100, 50), Pair(1, 49));
  EXPECT_EQ(infer_seqlen(2, 3, 100), Pair(2, 3));
}

TEST(SftSequencesTest, FlattenTurnsTruncatesPerTurn) {
  const auto bytes = [](const std::string& s) { return ByteTokenizer().encode(s); };
  const std::vector<EncodedTurn> turns{{bytes("AAAA"), bytes("bb"), 1.0f},
                                       {bytes("CCCC"), bytes("dddddd"), 0.5f},
                                       {bytes("E"), bytes("f"), 1.0f}};
  const TokenizedExample whole = flatten_turns(turns, 100);
  EXPECT_FALSE(whole.truncated);
  EXPECT_EQ(test::byte_text(whole.ids), "AAAAbbCCCCddddddEf");
  // Room 10: turn 1 whole (6), turn 2 gets infer_seqlen(4, 6, 4) = (2, 2), turn 3 nothing.
  const TokenizedExample cut = flatten_turns(turns, 10);
  EXPECT_TRUE(cut.truncated);
  EXPECT_EQ(test::byte_text(cut.ids), "AAAAbbCCdd");
  EXPECT_EQ(cut.weights, (std::vector<float>{0, 0, 0, 0, 1, 1, 0, 0, 0.5f, 0.5f}));
}

TEST(SftSequencesTest, GreedyKnapsackMatchesLlamaFactory) {
  using Bins = std::vector<std::vector<std::int64_t>>;
  EXPECT_EQ(greedy_knapsack({5, 3, 4, 2, 6}, 8), (Bins{{4, 3}, {0, 1}, {2}}));
  EXPECT_EQ(greedy_knapsack({3, 3, 3}, 6), (Bins{{2, 1}, {0}}));  // equal lengths: latest first
  EXPECT_EQ(greedy_knapsack({}, 6), Bins{});
  EXPECT_THROW(greedy_knapsack({7}, 6), std::invalid_argument);
}

TEST(SftSequencesTest, PackingKeepsSamplesWholeAndMarksSegments) {
  const std::vector<TokenizedExample> examples{example("ab", "cd"), example("ef", "g"),
                                               example("hij", "kl")};
  // Lengths 4, 3, 5 in capacity 8: {hijkl, efg}, {abcd}.
  for (const bool neat : {false, true}) {
    SCOPED_TRACE(neat ? "neat" : "plain");
    const PackedSequences seqs = build_sft_sequences(examples, 8, true, neat);
    ASSERT_EQ(seqs.num_sequences(), 2);
    const Batch b = all_of(seqs).batch({0, 1});
    EXPECT_DOUBLE_EQ(all_of(seqs).weight_sum({0, 1}), b.weights.to(at::kDouble).sum().item<double>());
    EXPECT_EQ(test::byte_text(ids_row(b, 0)), "hijklefg");
    EXPECT_EQ(test::byte_text(ids_row(b, 1)), "abcd<pad><pad><pad><pad>");
    // weights[t]: predicting token t+1; the first token of a sample is never trained.
    EXPECT_EQ(row<float>(b.weights, 0), (std::vector<float>{0, 0, 1, 1, 0, 0, 1}));
    EXPECT_EQ(row<float>(b.weights, 1), (std::vector<float>{0, 1, 1, 0, 0, 0, 0}));
    EXPECT_EQ(row<std::int32_t>(b.segment_ids, 0),
              neat ? (std::vector<std::int32_t>{1, 1, 1, 1, 1, 2, 2, 2})
                   : (std::vector<std::int32_t>{1, 1, 1, 1, 1, 1, 1, 1}));
    EXPECT_EQ(row<std::int64_t>(b.position_ids, 0),
              neat ? (std::vector<std::int64_t>{0, 1, 2, 3, 4, 0, 1, 2})
                   : (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(row<std::int32_t>(b.segment_ids, 1),
              (std::vector<std::int32_t>{1, 1, 1, 1, 0, 0, 0, 0}));
    EXPECT_EQ(row<std::int64_t>(b.position_ids, 1),
              (std::vector<std::int64_t>{0, 1, 2, 3, 0, 0, 0, 0}));
  }
}

TEST(SftSequencesTest, NoPackingTruncatesAndDropsUntrained) {
  const PackedSequences seqs = build_sft_sequences(
      {example("abc", "defghij"), example("x", "y", 0.0f), example("pq", "r", 2.0f)}, 6, false,
      false);
  EXPECT_EQ(seqs.stats.examples, 3);
  EXPECT_EQ(seqs.stats.truncated, 1);
  EXPECT_EQ(seqs.stats.dropped_untrained, 1);
  const SftDataset ds = all_of(seqs);
  ASSERT_EQ(ds.num_sequences(), 2);
  const Batch b = ds.batch({0, 1});
  EXPECT_EQ(b.input_ids.sizes(), (at::IntArrayRef{2, 6}));
  EXPECT_EQ(b.weights.sizes(), (at::IntArrayRef{2, 5}));
  EXPECT_EQ(b.input_ids.scalar_type(), at::kLong);
  EXPECT_EQ(b.weights.scalar_type(), at::kFloat);
  EXPECT_EQ(b.segment_ids.scalar_type(), at::kInt);
  EXPECT_EQ(test::byte_text(ids_row(b, 0)), "abcdef");
  EXPECT_EQ(row<float>(b.weights, 1), (std::vector<float>{0, 2, 0, 0, 0}));
  EXPECT_DOUBLE_EQ(ds.total_weight(), 3.0 + 2.0);
  EXPECT_EQ(ds.trained_tokens(), 4);
  const Batch short_batch = ds.batch({1}, /*pad_to_longest=*/true);
  EXPECT_EQ(short_batch.input_ids.sizes(), (at::IntArrayRef{1, 3}));
  EXPECT_THROW(ds.batch({2}), std::out_of_range);
}

SftOptions options(const std::string& tpl, std::int64_t cutoff) {
  SftOptions o;
  o.template_name = tpl;
  o.cutoff_len = cutoff;
  return o;
}

TEST(SftDatasetTest, AlpacaDemoWithAndWithoutPacking) {
  LFT_REQUIRE_SFT_DATA(dir);
  const ByteTokenizer tok;
  const std::vector<std::string> paths{dir + "/alpaca_en_demo.json"};
  SftOptions o = options("default", 512);
  const SftData plain = load_sft_data(paths, o, tok, kByteSpecial);
  ASSERT_EQ(plain.train.num_sequences(), 999);
  EXPECT_EQ(plain.eval.num_sequences(), 0);
  const Batch b = plain.train.batch({0});
  const std::vector<std::int32_t> ids = ids_row(b, 0);
  EXPECT_TRUE(test::byte_text(ids).rfind(
                  "Human: Describe a process of making crepes.</s>\nAssistant:Making crepes", 0) ==
              0);
  std::vector<float> token_weights{0.0f};  // weights as per-token label weights
  for (const float w : row<float>(b.weights, 0)) token_weights.push_back(w);
  EXPECT_EQ(test::trained_text(ids, token_weights).rfind("Making crepes is an easy", 0), 0u);
  EXPECT_CONTAINS(plain.summary, "alpaca_en_demo.json: alpaca, 999 records, 999 used");
  EXPECT_CONTAINS(plain.summary,
                  "sft: 999 examples -> 999 sequences (template default, no packing)");

  o.packing = true;
  const SftData packed = load_sft_data(paths, o, tok, kByteSpecial);
  EXPECT_EQ(packed.train.num_sequences(), 763);  // greedy_knapsack of the 999 lengths
  EXPECT_DOUBLE_EQ(packed.train.total_weight(), plain.train.total_weight());
  EXPECT_EQ(packed.train.num_tokens(), plain.train.num_tokens());
  o.neat_packing = true;
  const SftData neat = load_sft_data(paths, o, tok, kByteSpecial);
  EXPECT_EQ(neat.train.num_sequences(), packed.train.num_sequences());
  EXPECT_DOUBLE_EQ(neat.train.total_weight(), plain.train.total_weight());
  std::int64_t samples = 0;  // each sample is one segment of one sequence
  for (std::int64_t i = 0; i < neat.train.num_sequences(); ++i) {
    EXPECT_LE(neat.train.length(i), 512);
    const auto seg = row<std::int32_t>(neat.train.batch({i}).segment_ids, 0);
    samples += *std::max_element(seg.begin(), seg.end());
  }
  EXPECT_EQ(samples, 999);
}

TEST(SftDatasetTest, JoinedBatchIsThePaddedRowsEndToEnd) {
  // LlamaFactory v1's padding_free row: the samples one after another, each its own segment, its
  // positions from 0, its own weights, none on the boundary; padded to a multiple at the end.
  LFT_REQUIRE_SFT_DATA(dir);
  const ByteTokenizer tok;
  const SftData plain = load_sft_data({dir + "/alpaca_en_demo.json"}, options("default", 256), tok, kByteSpecial);
  const std::vector<std::int64_t> picks{3, 0, 7};
  const Batch rows = plain.train.batch(picks);
  const Batch joined = plain.train.joined_batch(picks, 8);
  std::int64_t total = 0;
  for (const std::int64_t i : picks) total += plain.train.length(i);
  ASSERT_EQ(joined.input_ids.size(0), 1);
  EXPECT_EQ(joined.input_ids.size(1), (total + 7) / 8 * 8);
  EXPECT_EQ(plain.train.joined_length(picks, 8), joined.input_ids.size(1));
  std::int64_t at = 0;
  for (std::size_t r = 0; r < picks.size(); ++r) {
    const std::int64_t n = plain.train.length(picks[r]);
    EXPECT_TRUE(at::equal(joined.input_ids[0].narrow(0, at, n), rows.input_ids[static_cast<std::int64_t>(r)].narrow(0, 0, n)));
    EXPECT_TRUE(at::equal(joined.position_ids[0].narrow(0, at, n), at::arange(n, at::kLong)));
    EXPECT_TRUE((joined.segment_ids[0].narrow(0, at, n) == static_cast<int>(r) + 1).all().item<bool>());
    EXPECT_TRUE(at::equal(joined.weights[0].narrow(0, at, n - 1), rows.weights[static_cast<std::int64_t>(r)].narrow(0, 0, n - 1)));
    if (r > 0) EXPECT_EQ(joined.weights[0][at - 1].item<float>(), 0.0f) << "the boundary before sample " << r;
    at += n;
  }
  EXPECT_TRUE((joined.segment_ids[0].narrow(0, total, joined.input_ids.size(1) - total) == 0).all().item<bool>());
  EXPECT_DOUBLE_EQ(joined.weights.sum().item<double>(), rows.weights.sum().item<double>());
}

TEST(SftDatasetTest, V1MessagesLossWeights) {
  LFT_REQUIRE_SFT_DATA(dir);
  const ByteTokenizer tok;
  const SftData d =
      load_sft_data({dir + "/v1_sft_demo.jsonl"}, options("llama3", 1024), tok, kByteSpecial);
  ASSERT_EQ(d.train.num_sequences(), 500);
  const std::string response =
      "Hello! I am {{name}}, an AI assistant developed by {{author}}. How can I assist you today?";
  const Batch b = d.train.batch({0});
  EXPECT_FLOAT_EQ(b.weights.sum().item<float>(), static_cast<float>(response.size() + 10));
  const std::vector<std::int64_t> some{3, 0, 17, 499};
  EXPECT_DOUBLE_EQ(d.train.weight_sum(some), d.train.batch(some).weights.to(at::kDouble).sum().item<double>());

  test::TempDir tmp;
  const std::string path = tmp.write(
      "w.jsonl",
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "abcd", "loss_weight": 0.5}]}
{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "zero", "loss_weight": 0.0}]}
)");
  const SftData w = load_sft_data({path}, options("qwen", 1024), tok, kByteSpecial);
  ASSERT_EQ(w.train.num_sequences(), 1);
  EXPECT_DOUBLE_EQ(w.train.total_weight(), 0.5 * static_cast<double>(4 + 11));  // abcd<|im_end|>\n
  EXPECT_CONTAINS(w.summary, "1 dropped (nothing to train)");

  // Issue 50, case 3: every answer weighted 0 trains nothing: refused before any step, packed or not.
  const std::string zeros = tmp.write(
      "z.jsonl",
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "loss_weight": 0}]}
{"messages": [{"role": "user", "content": "r"}, {"role": "assistant", "content": "b", "loss_weight": 0.0}]}
)");
  for (const bool packing : {false, true}) {
    SftOptions z = options("qwen", 1024);
    z.packing = packing;
    const std::string e = test::message_of<UsageError>([&] { load_sft_data({zeros}, z, tok, kByteSpecial); });
    EXPECT_TRUE(e.find("no training sequence") != std::string::npos || e.find("no trained token") != std::string::npos)
        << e;
  }
}

TEST(SftDatasetTest, PretrainMatchesPackedDataset) {
  LFT_REQUIRE_SFT_DATA(dir);
  const ByteTokenizer tok;
  SftOptions o = options("default", 256);
  o.stage = "pt";
  o.packing = true;
  const SftData d = load_sft_data({dir + "/wiki_demo.txt"}, o, tok, kByteSpecial);
  const PackedDataset reference(read_text_corpus(dir + "/wiki_demo.txt"), tok, 256);
  ASSERT_EQ(d.train.num_sequences(), reference.num_sequences());
  for (const std::int64_t i : {std::int64_t{0}, std::int64_t{17}, reference.num_sequences() - 1}) {
    const Batch b = d.train.batch({i});
    EXPECT_TRUE(b.input_ids[0].equal(reference.sequence(i)));
    EXPECT_EQ(b.weights.sum().item<float>(), 255.0f);  // every prediction trained
  }
}

TEST(SftDatasetTest, PretrainNeatAndUnpacked) {
  test::TempDir tmp;
  const std::string path = tmp.write("docs.txt", "ab\nc\n\ndefg\n");
  const ByteTokenizer tok;
  SftOptions o = options("default", 4);
  o.stage = "pt";
  o.packing = true;
  o.neat_packing = true;
  // Stream <s>ab</s> <s>c</s> <s>defg</s>: [<s> a b </s>] [<s> c </s> <s>] [d e f g], tail dropped.
  const SftData neat = load_sft_data({path}, o, tok, kByteSpecial);
  ASSERT_EQ(neat.train.num_sequences(), 3);
  const Batch b = neat.train.batch({1, 2});
  EXPECT_EQ(test::byte_text(ids_row(b, 0)), "<s>c</s><s>");
  EXPECT_EQ(row<std::int32_t>(b.segment_ids, 0), (std::vector<std::int32_t>{1, 1, 1, 2}));
  EXPECT_EQ(row<float>(b.weights, 0), (std::vector<float>{1, 1, 0}));  // not across documents
  EXPECT_EQ(row<float>(b.weights, 1), (std::vector<float>{1, 1, 1}));
  EXPECT_CONTAINS(neat.summary, "1 tail tokens dropped");

  o.packing = o.neat_packing = false;
  o.cutoff_len = 3;
  const SftData plain = load_sft_data({path}, o, tok, kByteSpecial);
  ASSERT_EQ(plain.train.num_sequences(), 3);
  const Batch p = plain.train.batch({0, 1});
  EXPECT_EQ(test::byte_text(ids_row(p, 0)), "<s>ab");  // truncated to cutoff_len
  EXPECT_EQ(test::byte_text(ids_row(p, 1)), "<s>c</s>");
  EXPECT_EQ(row<float>(p.weights, 0), (std::vector<float>{1, 1}));
}

TEST(SftDatasetTest, OptionErrors) {
  test::TempDir tmp;
  const std::string txt = tmp.write("docs.txt", "some text\n");
  const ByteTokenizer tok;
  const auto error = [&](const SftOptions& o) {
    return test::message_of<UsageError>([&] { load_sft_data({txt}, o, tok, kByteSpecial); });
  };
  EXPECT_CONTAINS(error(options("default", 64)), "holds text documents, which have no responses");
  SftOptions o = options("default", 64);
  o.stage = "kto";
  EXPECT_CONTAINS(error(o), "unknown stage \"kto\"");
  o.stage = "dpo";
  EXPECT_CONTAINS(error(o), "no responses to train on with stage = \"dpo\"");
  EXPECT_CONTAINS(error(options("vicuna", 64)), "unknown template \"vicuna\"");
  EXPECT_CONTAINS(error(options("default", 1)), "cutoff_len must be at least 2");
  o = options("default", 64);
  o.stage = "pt";
  o.packing = true;
  EXPECT_CONTAINS(error(o), "is too small for cutoff_len = 64");
}

TEST(SftDatasetTest, EvalSplitIsDeterministic) {
  const auto [train, eval] = split_train_eval(100, 0.1, 42);
  EXPECT_EQ(eval.size(), 10u);
  EXPECT_EQ(train.size(), 90u);
  EXPECT_TRUE(std::is_sorted(eval.begin(), eval.end()));
  std::vector<std::int64_t> all = train;
  all.insert(all.end(), eval.begin(), eval.end());
  std::sort(all.begin(), all.end());
  for (std::int64_t i = 0; i < 100; ++i) EXPECT_EQ(all[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(split_train_eval(100, 0.1, 42).second, eval);
  EXPECT_NE(split_train_eval(100, 0.1, 43).second, eval);
  EXPECT_EQ(split_train_eval(100, 25, 42).second.size(), 25u);    // a count
  EXPECT_EQ(split_train_eval(100, 0.001, 42).second.size(), 1u);  // ceil, as HF datasets
  EXPECT_TRUE(split_train_eval(100, 0, 42).second.empty());
  EXPECT_CONTAINS(test::message_of<UsageError>([] { split_train_eval(100, 100, 42); }),
                  "leaves none for training");
  EXPECT_CONTAINS(test::message_of<UsageError>([] { split_train_eval(100, 2.5, 42); }),
                  "whole number");
  EXPECT_THROW(split_train_eval(100, -0.5, 42), UsageError);

  LFT_REQUIRE_SFT_DATA(dir);
  SftOptions o = options("default", 256);
  o.val_size = 0.05;
  const ByteTokenizer tok;
  const SftData d = load_sft_data({dir + "/identity.json"}, o, tok, kByteSpecial);
  EXPECT_EQ(d.eval.num_sequences(), 5);  // ceil(0.05 * 91)
  EXPECT_EQ(d.train.num_sequences(), 86);
  EXPECT_EQ(d.eval.row(0), split_train_eval(91, 0.05, 42).second[0]);
  EXPECT_CONTAINS(d.summary, "\neval: 5 sequences");
}

TEST(SftCacheTest, ReusedWhileInputsMatchRebuiltOtherwise) {
  test::TempDir tmp;
  const std::string data = tmp.write("a.jsonl",
                                     "{\"instruction\": \"q1\", \"output\": \"a1\"}\n"
                                     "{\"instruction\": \"q2\", \"output\": \"a2\"}\n");
  const ByteTokenizer tok;
  std::vector<std::string> log;
  SftOptions o = options("llama3", 128);
  o.tokenized_path = tmp.path("cache.lftok");
  o.log = [&](const std::string& line) { log.push_back(line); };
  tmp.path("cache.lftok.tmp." + std::to_string(::getpid()));  // removed if a write failed

  const SftData first = load_sft_data({data}, o, tok, kByteSpecial);
  ASSERT_FALSE(log.empty());
  EXPECT_CONTAINS(log.front(), "no cache yet");
  EXPECT_CONTAINS(log.back(), "tokenized data saved to " + o.tokenized_path);
  EXPECT_TRUE(test::is_regular_file(o.tokenized_path));

  log.clear();
  const SftData again = load_sft_data({data}, o, tok, kByteSpecial);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0], "tokenized data reused from " + o.tokenized_path);
  ASSERT_EQ(again.train.num_sequences(), 2);
  EXPECT_TRUE(again.train.batch({0, 1}).input_ids.equal(first.train.batch({0, 1}).input_ids));
  EXPECT_TRUE(again.train.batch({0, 1}).weights.equal(first.train.batch({0, 1}).weights));

  log.clear();
  o.cutoff_len = 64;
  load_sft_data({data}, o, tok, kByteSpecial);
  EXPECT_CONTAINS(log.front(),
                  "made for other inputs (now \"cutoff_len=64\", cached "
                  "\"cutoff_len=128\"); tokenizing the dataset");

  log.clear();
  tmp.write("a.jsonl", "{\"instruction\": \"q\", \"output\": \"a\"}\n");  // the data changed
  const SftData changed = load_sft_data({data}, o, tok, kByteSpecial);
  EXPECT_CONTAINS(log.front(), "made for other inputs (now \"file=" + data + " size=");
  EXPECT_EQ(changed.train.num_sequences(), 1);

  log.clear();
  std::ostringstream bytes;
  bytes << std::ifstream(o.tokenized_path, std::ios::binary).rdbuf();
  tmp.write("cache.lftok", bytes.str().substr(0, bytes.str().size() - 5));  // cut short
  load_sft_data({data}, o, tok, kByteSpecial);
  EXPECT_CONTAINS(log.front(), "corrupt (size or checksum mismatch)");
  log.clear();
  EXPECT_EQ(load_sft_data({data}, o, tok, kByteSpecial).train.num_sequences(), 1);
  EXPECT_EQ(log.front(), "tokenized data reused from " + o.tokenized_path);
}

TEST(SftCacheTest, FolderPathAndReadOnlyRanks) {
  test::TempDir tmp;
  const std::string data = tmp.write("a.jsonl", "{\"instruction\": \"q\", \"output\": \"a\"}\n");
  const std::string file = tmp.path("tokenized.lftok");
  const ByteTokenizer tok;
  SftOptions o = options("default", 64);
  o.tokenized_path = tmp.dir();
  o.write_cache = false;
  load_sft_data({data}, o, tok, kByteSpecial);
  EXPECT_FALSE(test::is_regular_file(file));
  o.write_cache = true;
  load_sft_data({data}, o, tok, kByteSpecial);
  EXPECT_TRUE(test::is_regular_file(file));
  o.tokenized_path = tmp.dir() + "/no/such/folder/cache";
  EXPECT_CONTAINS(
      test::message_of<UsageError>([&] { load_sft_data({data}, o, tok, kByteSpecial); }),
      "cannot write the tokenized-data cache");
}

}  // namespace
}  // namespace lft::data
