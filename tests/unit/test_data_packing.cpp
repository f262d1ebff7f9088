// PackedDataset: BOS + tokens + EOS per document, one stream, cut into seq_len sequences with the
// tail dropped; tensors out; tokenizers without BOS; the too-small error.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "lft/data/packed_dataset.h"
#include "lft/data/tokenizer.h"
#include "lft/runtime/error.h"

namespace lft::data {
namespace {

constexpr std::int64_t B = ByteTokenizer::kBos;
constexpr std::int64_t E = ByteTokenizer::kEos;

std::vector<std::int64_t> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::vector<std::int64_t>(c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel());
}

TEST(PackedDatasetTest, HandExample) {
  const ByteTokenizer tok;
  // Stream: B a b E | B c E | B d e f g E  = 13 tokens -> 3 sequences of 4, the last E dropped.
  const PackedDataset ds({"ab", "c", "defg"}, tok, 4);
  EXPECT_EQ(ds.seq_len(), 4);
  EXPECT_EQ(ds.num_documents(), 3);
  EXPECT_EQ(ds.stream_tokens(), 13);
  EXPECT_EQ(ds.num_sequences(), 3);
  EXPECT_EQ(ds.num_tokens(), 12);
  EXPECT_EQ(ds.dropped_tokens(), 1);
  EXPECT_EQ(to_vector(ds.sequence(0)), (std::vector<std::int64_t>{B, 'a', 'b', E}));
  EXPECT_EQ(to_vector(ds.sequence(1)), (std::vector<std::int64_t>{B, 'c', E, B}));
  EXPECT_EQ(to_vector(ds.sequence(2)), (std::vector<std::int64_t>{'d', 'e', 'f', 'g'}));
  const std::int32_t* raw = ds.sequence_data(1);
  EXPECT_EQ(raw[2], E);
}

TEST(PackedDatasetTest, ExactFitDropsNothing) {
  const ByteTokenizer tok;
  const PackedDataset ds({"xy", "z"}, tok, 7);  // B x y E B z E
  EXPECT_EQ(ds.num_sequences(), 1);
  EXPECT_EQ(ds.dropped_tokens(), 0);
  EXPECT_EQ(to_vector(ds.sequence(0)), (std::vector<std::int64_t>{B, 'x', 'y', E, B, 'z', E}));
}

TEST(PackedDatasetTest, TensorsHaveShapeAndDtype) {
  const ByteTokenizer tok;
  const PackedDataset ds({"hello world", "packing is simple", "third"}, tok, 5);
  ASSERT_EQ(ds.num_sequences(), (11 + 17 + 5 + 6) / 5);
  const at::Tensor s = ds.sequence(2);
  EXPECT_EQ(s.scalar_type(), at::kLong);
  EXPECT_EQ(s.dim(), 1);
  EXPECT_EQ(s.size(0), 5);
  EXPECT_TRUE(s.device().is_cpu());

  const at::Tensor b = ds.batch({3, 0, 3});
  EXPECT_EQ(b.scalar_type(), at::kLong);
  ASSERT_EQ(b.dim(), 2);
  EXPECT_EQ(b.size(0), 3);
  EXPECT_EQ(b.size(1), 5);
  EXPECT_TRUE(at::equal(b[0], ds.sequence(3)));
  EXPECT_TRUE(at::equal(b[1], ds.sequence(0)));
  EXPECT_TRUE(at::equal(b[2], ds.sequence(3)));
  EXPECT_EQ(ds.batch({}).size(0), 0);

  // The sequences, joined, are the start of the stream.
  const at::Tensor all = ds.batch({0, 1, 2, 3, 4, 5, 6}).reshape({-1});
  std::string text;
  for (const std::int64_t id : to_vector(all)) text += id == B ? '<' : id == E ? '>' : static_cast<char>(id);
  EXPECT_EQ(text, "<hello world><packing is simple><th");
}

TEST(PackedDatasetTest, BadIndicesThrow) {
  const ByteTokenizer tok;
  const PackedDataset ds({"abcdefgh"}, tok, 3);  // 10 tokens -> 3 sequences
  EXPECT_THROW(ds.sequence(3), std::out_of_range);
  EXPECT_THROW(ds.sequence(-1), std::out_of_range);
  EXPECT_THROW(ds.batch({0, 3}), std::out_of_range);
  EXPECT_THROW(PackedDataset({"abc"}, tok, 0), std::invalid_argument);
}

TEST(PackedDatasetTest, TooSmallForCutoffLenIsAUsageError) {
  const ByteTokenizer tok;
  try {
    PackedDataset ds({"tiny", "data"}, tok, 64, "demo.txt");
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'demo.txt' is too small for cutoff_len = 64"), std::string::npos) << msg;
    EXPECT_NE(msg.find("12 tokens"), std::string::npos) << msg;
  }
  EXPECT_THROW(PackedDataset({}, tok, 1), UsageError);
}

// A tokenizer with no BOS (as some Hugging Face tokenizers have) and a multi-byte vocabulary: the
// packing only uses the interface.
class PairTokenizer final : public Tokenizer {
 public:
  std::int64_t vocab_size() const override { return 1000; }
  std::int32_t bos_id() const override { return -1; }
  std::int32_t eos_id() const override { return 999; }
  std::int32_t pad_id() const override { return -1; }
  std::vector<std::int32_t> encode(const std::string& text) const override {
    std::vector<std::int32_t> ids;
    for (std::size_t i = 0; i < text.size(); i += 2) ids.push_back(static_cast<std::int32_t>(i));
    return ids;
  }
  std::string decode(const std::vector<std::int32_t>&) const override { return ""; }
  std::string name() const override { return "pairs"; }
};

TEST(PackedDatasetTest, TokenizerWithoutBos) {
  const PairTokenizer tok;
  const PackedDataset ds({"abcd", "efghij"}, tok, 3);  // 0 2 EOS 0 2 4 EOS -> 2 sequences
  EXPECT_EQ(ds.stream_tokens(), 7);
  EXPECT_EQ(to_vector(ds.sequence(0)), (std::vector<std::int64_t>{0, 2, 999}));
  EXPECT_EQ(to_vector(ds.sequence(1)), (std::vector<std::int64_t>{0, 2, 4}));
}

class BrokenTokenizer final : public Tokenizer {
 public:
  std::int64_t vocab_size() const override { return 10; }
  std::int32_t bos_id() const override { return 0; }
  std::int32_t eos_id() const override { return 1; }
  std::int32_t pad_id() const override { return 2; }
  std::vector<std::int32_t> encode(const std::string&) const override { return {10}; }
  std::string decode(const std::vector<std::int32_t>&) const override { return ""; }
  std::string name() const override { return "broken"; }
};

TEST(PackedDatasetTest, RejectsIdsOutsideTheVocabulary) {
  const BrokenTokenizer tok;
  EXPECT_THROW(PackedDataset({"x"}, tok, 1), std::out_of_range);
}

}  // namespace
}  // namespace lft::data
