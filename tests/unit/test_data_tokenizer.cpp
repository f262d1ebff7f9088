// ByteTokenizer: ids, special tokens, exact round trip of arbitrary bytes and UTF-8.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "lft/data/tokenizer.h"

namespace lft::data {
namespace {

TEST(TokenizerTest, ByteTokenizerSpecialIds) {
  const ByteTokenizer tok;
  const Tokenizer& base = tok;
  EXPECT_EQ(base.vocab_size(), 259);
  EXPECT_EQ(base.bos_id(), 256);
  EXPECT_EQ(base.eos_id(), 257);
  EXPECT_EQ(base.pad_id(), 258);
  EXPECT_EQ(base.name(), "byte");
}

TEST(TokenizerTest, ByteTokenizerEncodesBytes) {
  const ByteTokenizer tok;
  EXPECT_EQ(tok.encode("Hi!"), (std::vector<std::int32_t>{72, 105, 33}));
  EXPECT_TRUE(tok.encode("").empty());
  // No BOS/EOS is added by encode.
  EXPECT_EQ(tok.encode("a").size(), 1u);
}

TEST(TokenizerTest, ByteTokenizerRoundTripsUtf8) {
  const ByteTokenizer tok;
  const std::string text = "na\xC3\xAFve caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87";
  const std::vector<std::int32_t> ids = tok.encode(text);
  EXPECT_EQ(ids.size(), text.size());  // one id per byte, not per code point
  // "é" = C3 A9: bytes >= 0x80 map to ids 128..255, never negative.
  EXPECT_EQ(ids[2], 0xC3);
  EXPECT_EQ(ids[3], 0xAF);
  for (const std::int32_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 256);
  }
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(TokenizerTest, ByteTokenizerRoundTripsEveryByte) {
  const ByteTokenizer tok;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::vector<std::int32_t> ids = tok.encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[static_cast<std::size_t>(b)], b);
  EXPECT_EQ(tok.decode(ids), all);
}

TEST(TokenizerTest, ByteTokenizerDecodeSkipsSpecialsAndRejectsUnknownIds) {
  const ByteTokenizer tok;
  EXPECT_EQ(tok.decode({256, 'o', 'k', 257, 258, 258}), "ok");
  EXPECT_THROW(tok.decode({259}), std::out_of_range);
  EXPECT_THROW(tok.decode({-1}), std::out_of_range);
}

TEST(TokenizerTest, UsableThroughTheInterface) {
  const std::unique_ptr<Tokenizer> tok = std::make_unique<ByteTokenizer>();
  EXPECT_EQ(tok->decode(tok->encode("interface")), "interface");
}

}  // namespace
}  // namespace lft::data
