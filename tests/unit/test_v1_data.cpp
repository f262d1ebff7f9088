// LlamaFactory v1's data path: its templates' segments and weights, its truncation, its dataset
// files, Python's random for `size` / `weight`, and torch's DistributedSampler order.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "lft/data/python_random.h"
#include "lft/data/sampler.h"
#include "lft/data/sft_dataset.h"
#include "lft/data/tokenizer.h"
#include "lft/data/v1_dataset_file.h"
#include "lft/data/v1_render.h"
#include "lft/runtime/error.h"
#include "test_util.h"

namespace lft::data {
namespace {

Conversation qa(const std::string& q, const std::string& a) {
  Conversation c;
  c.messages = {{Role::User, q, 1.0f, false}, {Role::Assistant, a, 1.0f, false}};
  return c;
}

TEST(V1Render, Qwen3NothinkTrainsTheWholeAssistantSegment) {
  Conversation c = qa("hi", "Hello!");
  c.messages.insert(c.messages.begin(), Message{Role::System, "Be brief.", 1.0f, false});
  const auto s = v1_segments("qwen3_nothink", c);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].text, "<|im_start|>system\nBe brief.<|im_end|>\n");
  EXPECT_EQ(s[1].text, "<|im_start|>user\nhi<|im_end|>\n");
  EXPECT_EQ(s[2].text, "<|im_start|>assistant\nHello!<|im_end|>\n");
  EXPECT_EQ(s[0].weight, 0.0f);
  EXPECT_EQ(s[1].weight, 0.0f);
  EXPECT_EQ(s[2].weight, 1.0f);
}

TEST(V1Render, Qwen3WritesAnEmptyThinkBlockBeforeTheLastAnswer) {
  Conversation c = qa("a", "\n\nb");
  c.messages.push_back({Role::User, "c", 1.0f, false});
  c.messages.push_back({Role::Assistant, "d", 1.0f, false});
  const auto s = v1_segments("qwen3", c);
  EXPECT_EQ(s[1].text, "<|im_start|>assistant\n\n\nb<|im_end|>\n");  // before the last query: as written
  EXPECT_EQ(s[3].text, "<|im_start|>assistant\n<think>\n\n</think>\n\nd<|im_end|>\n");
}

TEST(V1Render, GivenWeightsWinAndToolResponsesMerge) {
  Conversation c;
  c.messages = {{Role::User, "q", 1.0f, true}, {Role::Assistant, "a", 0.5f, true},
                {Role::Observation, "r1", 1.0f, false}, {Role::Assistant, "b", 1.0f, false}};
  const auto s = v1_segments("chatml", c);
  EXPECT_EQ(s[0].weight, 1.0f);  // a user message with loss_weight 1 trains, as in v1
  EXPECT_EQ(s[1].weight, 0.5f);
  EXPECT_EQ(s[2].text, "<|im_start|>tool\nr1<|im_end|>\n");
  const auto q = v1_segments("qwen3_nothink", c);
  EXPECT_EQ(q[2].text, "<|im_start|>user\n<tool_response>\nr1\n</tool_response><|im_end|>\n");
}

TEST(V1Render, CutAtCutoffLenFromTheEnd) {
  const ByteTokenizer tok;
  const TokenizedExample full = v1_encode("chatml", qa("hello", "world"), tok, 1000);
  const TokenizedExample cut = v1_encode("chatml", qa("hello", "world"), tok, 20);
  ASSERT_EQ(cut.ids.size(), 20u);
  EXPECT_TRUE(cut.truncated);
  EXPECT_FALSE(full.truncated);
  EXPECT_EQ(std::vector<std::int32_t>(full.ids.begin(), full.ids.begin() + 20), cut.ids);
}

TEST(PythonRandom, MatchesCPython) {
  // python3 -c "import random; random.seed(42); print([random.random() for _ in range(3)])"
  PythonRandom r(42);
  EXPECT_DOUBLE_EQ(r.random(), 0.6394267984578837);
  EXPECT_DOUBLE_EQ(r.random(), 0.025010755222666936);
  EXPECT_DOUBLE_EQ(r.random(), 0.27502931836911926);
  // random.seed(42); random.choices(range(91), k=8)
  EXPECT_EQ(PythonRandom(42).choices(91, 8), (std::vector<std::int64_t>{58, 2, 25, 20, 67, 61, 81, 7}));
}

TEST(GlobalSampler, PerRankOrderIsTorchsDistributedSampler) {
  // torch.randperm(10, generator=torch.Generator().manual_seed(42)) = [2, 6, 1, 8, 4, 5, 0, 9, 3, 7];
  // rank 0 takes 2, 1, 4, 0, ..., rank 1 takes 6, 8, 5, 9, ...; two samples per rank per step.
  EXPECT_EQ(GlobalSampler::per_rank_order(10, 42, 0, 2, 4), (std::vector<std::int64_t>{2, 1, 6, 8, 4, 0, 5, 9}));
  GlobalSampler s(10, 4, 42, 2);
  EXPECT_EQ(s.global_batch_indices(), (std::vector<std::int64_t>{2, 1, 6, 8}));
  EXPECT_EQ(local_micro_batch(s.global_batch_indices(), 1, 2, 1, 2, 1), (std::vector<std::int64_t>{8}));
  SamplerState other = s.state();
  other.order_dp = 0;
  EXPECT_THROW(GlobalSampler(10, 4, 42, 2).restore(other), UsageError);
}

// LlamaFactory main's BatchGenerator drops samples from each rank's stream after the shuffle
// (those cut at cutoff_len with nothing left to train): the streams of torch's DistributedSampler
// (checked with torch: 9 samples over 2 ranks pad rank 1's stream with the permutation's first,
// [6, 0, 5, 3, 1] and [4, 7, 8, 2, 6]) pass over them, and an epoch has the steps its emptiest
// rank fills.
TEST(GlobalSampler, SkippedSamplesLeaveEachRanksStream) {
  // randperm(10) = [2, 6, 1, 8, 4, 5, 0, 9, 3, 7]: rank 0 2 1 4 0 3, rank 1 6 8 5 9 7.
  EXPECT_EQ(GlobalSampler::per_rank_order(10, 42, 0, 2, 4, {false, true, false, false, false, false, false, false, false, true}),
            (std::vector<std::int64_t>{2, 4, 6, 8, 0, 3, 5, 7}));
  // Skipping 1 and 4 leaves rank 0 one step's samples.
  EXPECT_EQ(GlobalSampler::per_rank_order(10, 42, 0, 2, 4, {false, true, false, false, true, false, false, false, false, false}),
            (std::vector<std::int64_t>{2, 0, 6, 8}));
  EXPECT_EQ(GlobalSampler::per_rank_order(10, 42, 0, 1, 4, {false, false, false, false, false, false, true, false, false, false}),
            (std::vector<std::int64_t>{2, 1, 8, 4, 5, 0, 9, 3}));
  // randperm(9) = [6, 4, 0, 7, 5, 8, 3, 2, 1]; skipping 0: rank 0 6 5 3 1, rank 1 4 7 8 2 6 (padded).
  EXPECT_EQ(GlobalSampler::per_rank_order(9, 42, 0, 2, 4, {true, false, false, false, false, false, false, false, false}),
            (std::vector<std::int64_t>{6, 5, 4, 7, 3, 1, 8, 2}));
  GlobalSampler s(10, 4, 42, 2);
  s.skip_samples({false, true, false, false, true, false, false, false, false, false});
  EXPECT_EQ(s.steps_per_epoch(), 1);
  EXPECT_EQ(s.global_batch_indices(), (std::vector<std::int64_t>{2, 0, 6, 8}));
  EXPECT_THROW(s.skip_samples(std::vector<bool>(10, true)), UsageError);
  EXPECT_THROW(GlobalSampler(10, 4, 42).skip_samples(std::vector<bool>(10, false)), std::logic_error);
}

TEST(V1DatasetFile, EntriesBecomeSources) {
  const std::string dir = ::testing::TempDir();
  std::ofstream(dir + "v1_a.json") << "[]";
  const std::string file = dir + "v1_data.yaml";
  std::ofstream(file) << "identity:\n  path: " << dir << "v1_a.json\n  source: local\n  converter: alpaca\n  size: 5\n"
                      << "chat:\n  path: " << dir << "v1_a.json\n  source: local\n";
  const auto sources = read_v1_dataset_file(file);
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_EQ(sources[0].name, "identity");
  EXPECT_EQ(sources[0].options.format, "alpaca");
  EXPECT_EQ(sources[0].options.columns.query_separator, "");
  EXPECT_EQ(sources[0].v1_size, 5);
  EXPECT_EQ(sources[1].options.format, "messages");
  const auto error = [&](const std::string& text) {
    std::ofstream(file) << text;
    return test::message_of<UsageError>([&] { read_v1_dataset_file(file); });
  };
  EXPECT_NE(error("d:\n  path: HuggingFaceH4/orca\n").find("Hugging Face Hub"), std::string::npos);
  std::ofstream(file) << "d:\n  path: " << dir << "v1_a.json\n  source: local\n  converter: pair\n";
  const auto pairs = read_v1_dataset_file(file);  // preference pairs, for stage dpo
  EXPECT_EQ(pairs[0].options.format, "pair");
  EXPECT_TRUE(pairs[0].options.columns.ranking);
  EXPECT_NE(error("d:\n  path: " + dir + "v1_a.json\n  source: local\n  shuffle: true\n").find("unknown key 'shuffle'"),
            std::string::npos);
  EXPECT_NE(error("d:\n  path: /nonexistent.json\n  source: local\n").find("does not exist"), std::string::npos);
}

// Issue 50, cases 2 and 6: an entry named twice, and a size or weight that would draw more records
// than a process holds, are refused naming the file (and line) and the entry, not a bad_alloc.
TEST(V1DatasetFile, AnEntryTwiceAndImpossibleDrawsAreRefused) {
  const std::string dir = ::testing::TempDir();
  std::ofstream(dir + "v1_b.json") << R"([{"instruction": "q", "input": "", "output": "a"}])";
  const std::string file = dir + "v1_hostile.yaml";
  const std::string entry = "  path: " + dir + "v1_b.json\n  source: local\n  converter: alpaca\n";
  const auto error = [&](const std::string& text) {
    std::ofstream(file) << text;
    return test::message_of<UsageError>([&] { read_v1_dataset_file(file); });
  };
  const std::string twice = error("d:\n" + entry + "e:\n" + entry + "d:\n" + entry);
  EXPECT_NE(twice.find(file + ":9: dataset \"d\": named twice (also at line 1)"), std::string::npos) << twice;
  // Nesting past yaml-cpp's limit: said so at the line, not yaml-cpp's "bad file" (issue 50).
  const std::string deep = error("d:\n  converter: " + std::string(3000, '[') + std::string(3000, ']') + "\n");
  EXPECT_NE(deep.find(file + ":2: values nested more than "), std::string::npos) << deep;
  EXPECT_EQ(deep.find("bad file"), std::string::npos) << deep;
  const std::string huge = error("d:\n" + entry + "  size: 1000000000000\n");
  EXPECT_NE(huge.find("size: 1000000000000 would draw more records than one process holds"), std::string::npos) << huge;

  std::ofstream(file) << "d:\n" << entry << "  weight: 1.0e+300\n";
  const std::vector<DatasetSource> sources = read_v1_dataset_file(file);
  SftOptions o;
  o.template_name = "default";
  o.cutoff_len = 64;
  const ByteTokenizer tok;
  const std::string weight = test::message_of<UsageError>([&] { load_sft_data(sources, o, tok, SpecialTokens{ByteTokenizer::kBos, ByteTokenizer::kEos, ByteTokenizer::kPad}); });
  EXPECT_NE(weight.find("dataset \"d\""), std::string::npos) << weight;
  EXPECT_NE(weight.find("more than one process holds"), std::string::npos) << weight;
}

}  // namespace
}  // namespace lft::data
