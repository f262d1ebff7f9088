// The first-example print (LlamaFactory's print_data_example): the exact text for the byte
// tokenizer with masked and trained positions, pre-training data, a Hugging Face tokenizer's
// special tokens, and bad input.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "lft/data/hf_tokenizer.h"
#include "lft/data/tokenizer.h"
#include "lft/train/example_print.h"
#include "test_util.h"

namespace lft::train {
namespace {

using data::ByteTokenizer;

TEST(ExamplePrint, SftShowsLabelsWithTheMaskedRun) {
  // BOS "Q:" as the prompt (untrained), "AB" EOS as the response (trained). weights[t] is the
  // weight of predicting ids[t + 1]; labels are aligned with the ids, label_ids[0] = -100.
  const ByteTokenizer tok;
  const std::vector<std::int64_t> ids = {256, 'Q', ':', 'A', 'B', 257};
  const std::vector<float> weights = {0, 0, 1, 1, 1};
  EXPECT_EQ(format_example(tok, ids, weights),
            "input_ids:\n"
            "[256, 81, 58, 65, 66, 257]\n"
            "inputs:\n"
            "<bos>Q:AB<eos>\n"
            "label_ids:\n"
            "[-100, -100, -100, 65, 66, 257]\n"
            "labels:\n"
            "<masked: 3 tokens>AB<eos>");
}

TEST(ExamplePrint, EveryMaskedRunIsShownWhereItIs) {
  const ByteTokenizer tok;
  const std::vector<std::int64_t> ids = {'H', 'i', '!', '\n'};
  EXPECT_EQ(format_example(tok, ids, {1, 0, 1}),
            "input_ids:\n[72, 105, 33, 10]\ninputs:\nHi!\n\n"
            "label_ids:\n[-100, 105, -100, 10]\nlabels:\n<masked: 1 token>i<masked: 1 token>\n");
  EXPECT_EQ(format_example(tok, ids, {0, 0, 0}),
            "input_ids:\n[72, 105, 33, 10]\ninputs:\nHi!\n\n"
            "label_ids:\n[-100, -100, -100, -100]\nlabels:\n<masked: 4 tokens>");
}

TEST(ExamplePrint, PretrainingPrintsInputsOnly) {
  const ByteTokenizer tok;
  EXPECT_EQ(format_example(tok, {256, 'a', 257, 258}, {}),
            "input_ids:\n[256, 97, 257, 258]\ninputs:\n<bos>a<eos><pad>");
  EXPECT_EQ(format_example(tok, {}, {}), "input_ids:\n[]\ninputs:\n");
}

TEST(ExamplePrint, BadInputIsRefused) {
  const ByteTokenizer tok;
  EXPECT_THROW(format_example(tok, {'a', 'b', 'c'}, {1, 1, 1}), std::invalid_argument);
  EXPECT_THROW(format_example(tok, {'a', 'b', 'c'}, {1}), std::invalid_argument);
  EXPECT_THROW(format_example(tok, {'a', 259}, {}), std::out_of_range);
  EXPECT_THROW(format_example(tok, {-100, 'a'}, {1}), std::out_of_range);
}

TEST(ExamplePrint, HuggingFaceSpecialTokensAreSpelledAsInTokenizerJson) {
  const std::string here = __FILE__;
  const auto tok = data::HfTokenizer::load(here.substr(0, here.rfind('/')) + "/../fixtures/tokenizers/llama3");
  const std::int32_t eot = tok->token_id("<|eot_id|>");
  ASSERT_GE(eot, 0);
  ASSERT_GE(tok->bos_id(), 0);
  // BOS, the prompt "Hello" (untrained), the response " world" and <|eot_id|> (trained).
  const std::vector<std::int32_t> prompt = tok->encode("Hello"), response = tok->encode(" world");
  ASSERT_FALSE(prompt.empty());
  std::vector<std::int64_t> ids = {tok->bos_id()};
  ids.insert(ids.end(), prompt.begin(), prompt.end());
  ids.insert(ids.end(), response.begin(), response.end());
  ids.push_back(eot);
  std::vector<float> weights(ids.size() - 1, 1.0f);
  for (std::size_t t = 0; t < prompt.size(); ++t) weights[t] = 0;  // predicting a prompt token
  const std::string text = format_example(*tok, ids, weights);
  EXPECT_CONTAINS(text, "\ninputs:\n<|begin_of_text|>Hello world<|eot_id|>\nlabel_ids:\n[-100, -100, ");
  EXPECT_CONTAINS(text, "\nlabels:\n<masked: " + std::to_string(1 + prompt.size()) + " tokens> world<|eot_id|>");
  EXPECT_EQ(text.substr(text.size() - 10), "<|eot_id|>");
}

}  // namespace
}  // namespace lft::train
