// HfTokenizer on the fixture tokenizers (tools/make-tokenizers.py) and on small inline ones. The
// expected ids come from Hugging Face `tokenizers` 0.23.3; tests/e2e/tokenizer_parity.py checks
// every dataset text against the library itself.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "lft/data/hf_tokenizer.h"
#include "lft/runtime/error.h"
#include "test_util.h"

namespace {

using lft::data::HfTokenizer;
using Ids = std::vector<std::int32_t>;

std::string fixture(const std::string& name) {
  const std::string here = __FILE__;
  return here.substr(0, here.rfind('/')) + "/../fixtures/tokenizers/" + name;
}

std::unique_ptr<HfTokenizer> load(const std::string& name) {
  return HfTokenizer::load(fixture(name));
}

std::vector<std::string> tokens_of(const HfTokenizer& t, const Ids& ids) {
  std::vector<std::string> out;
  for (const auto id : ids) out.push_back(t.id_to_token(id));
  return out;
}

// A temporary folder with a tokenizer.json of the given text; removed with the object.
class TempTokenizer {
 public:
  explicit TempTokenizer(const std::string& json) {
    char pattern[] = "/tmp/lft-hf-tok-XXXXXX";
    dir_ = mkdtemp(pattern);
    std::ofstream(dir_ + "/tokenizer.json") << json;
  }
  ~TempTokenizer() {
    std::remove((dir_ + "/tokenizer.json").c_str());
    std::remove((dir_ + "/tokenizer_config.json").c_str());
    rmdir(dir_.c_str());
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// A minimal BPE tokenizer.json: vocab a b c ab bc abc <unk>, merges (b c) then (a b).
std::string tiny_bpe(const std::string& model_extra, const std::string& pre_tokenizer = "null") {
  return R"({"version":"1.0","added_tokens":[],"normalizer":null,"pre_tokenizer":)" +
         pre_tokenizer + R"(,"post_processor":null,"decoder":null,"model":{"type":"BPE",)" +
         model_extra + R"("vocab":{"a":0,"b":1,"c":2,"ab":3,"bc":4,"abc":5,"<unk>":6},)" +
         R"("merges":[["b","c"],["a","b"]]}})";
}

TEST(HfTokenizer, SpecialIdsComeFromTokenizerConfig) {
  const auto l3 = load("llama3");
  EXPECT_EQ(l3->vocab_size(), 8192);
  EXPECT_EQ(l3->bos_id(), l3->token_id("<|begin_of_text|>"));
  EXPECT_EQ(l3->eos_id(), l3->token_id("<|end_of_text|>"));
  EXPECT_EQ(l3->pad_id(), -1);
  EXPECT_EQ(l3->name(), "hf:llama3");
  const auto qwen = load("qwen2");
  EXPECT_EQ(qwen->bos_id(), -1);
  EXPECT_EQ(qwen->eos_id(), qwen->token_id("<|endoftext|>"));
  EXPECT_EQ(qwen->pad_id(), qwen->eos_id());
  const auto gpt2 = load("gpt2");
  EXPECT_EQ(gpt2->bos_id(), 8191);
  EXPECT_EQ(gpt2->eos_id(), 8191);
  const auto sp = load("sentencepiece");  // {"content": ...} objects
  EXPECT_EQ(sp->bos_id(), 1);
  EXPECT_EQ(sp->eos_id(), 2);
  EXPECT_EQ(sp->pad_id(), -1);
  EXPECT_EQ(sp->token_id("<0x0A>"), 3 + 0x0A);
  // A tokenizer.json file alone has no special ids.
  const auto file = HfTokenizer::load(fixture("llama3/tokenizer.json"));
  EXPECT_EQ(file->bos_id(), -1);
  EXPECT_EQ(file->encode("Hello world"), l3->encode("Hello world"));
}

TEST(HfTokenizer, ByteLevelIdsMatchTheLibrary) {
  const auto l3 = load("llama3");
  EXPECT_EQ(l3->encode("Hello world"), (Ids{39, 337, 306, 862}));
  EXPECT_EQ(tokens_of(*l3, l3->encode("Hello world")),
            (std::vector<std::string>{"H", "el", "lo", "\xC4\xA0world"}));  // Ġworld
  // Llama 3 groups digits by three; Qwen2 splits every digit; GPT-2 keeps a run with its space.
  EXPECT_EQ(l3->encode(" 12345 e\xCC\x81"), (Ids{220, 1167, 18, 3795, 297, 136, 223}));
  EXPECT_EQ(load("qwen2")->encode(" 12345 e\xCC\x81"), (Ids{220, 16, 17, 18, 19, 20, 220, 1725}));
  EXPECT_EQ(load("gpt2")->encode(" 12345 e\xCC\x81"), (Ids{1667, 18, 3605, 297, 136, 223}));
  EXPECT_EQ(l3->encode("   "), (Ids{885}));
  EXPECT_TRUE(l3->encode("").empty());
}

TEST(HfTokenizer, AddedTokensAreKeptWhole) {
  const auto l3 = load("llama3");
  const auto eot = l3->token_id("<|eot_id|>");
  ASSERT_EQ(eot, 8191);
  EXPECT_EQ(l3->encode("<|eot_id|>hi<|im_start|>x"),
            (Ids{eot, 71, 72, 27, 91, 308, 62, 320, 439, 91, 29, 87}));
  const Ids near = l3->encode("<|eot_id|");  // a look-alike is ordinary text
  EXPECT_EQ(std::count(near.begin(), near.end(), eot), 0);
  const auto qwen = load("qwen2");
  const Ids chat = qwen->encode("<|im_start|>user\nhi<|im_end|>\n");
  EXPECT_EQ(chat.front(), qwen->token_id("<|im_start|>"));
  EXPECT_EQ(std::count(chat.begin(), chat.end(), qwen->token_id("<|im_end|>")), 1);
  // SentencePiece legacy: each piece around an added token gets its own "▁" prefix.
  const auto sp = load("sentencepiece");
  EXPECT_EQ(sp->encode("a <s> b"), (Ids{560, 451, 1, 451, 585}));
  EXPECT_EQ(tokens_of(*sp, sp->encode("a <s> b")),
            (std::vector<std::string>{"\xE2\x96\x81"
                                      "a",
                                      "\xE2\x96\x81", "<s>", "\xE2\x96\x81",
                                      "\xE2\x96\x81"
                                      "b"}));
}

TEST(HfTokenizer, ByteFallbackEncodesUnknownCharsAsBytes) {
  const auto sp = load("sentencepiece");
  const Ids ids = sp->encode("\xE3\x81\x93\xE3\x82\x93");  // こん: not in the 300-char alphabet
  EXPECT_EQ(tokens_of(*sp, ids),
            (std::vector<std::string>{"\xE2\x96\x81", "<0xE3>", "<0x81>", "<0x93>", "<0xE3>",
                                      "<0x82>", "<0x93>"}));
  EXPECT_EQ(sp->decode(ids), "\xE3\x81\x93\xE3\x82\x93");
  EXPECT_EQ(sp->decode(sp->encode("Hello world")), "Hello world");  // Strip removes the lead space
  // Bytes that are not UTF-8 decode to one U+FFFD each (ByteFallback), unlike ByteLevel's one per
  // maximal invalid sequence.
  EXPECT_EQ(sp->decode({sp->token_id("<0xE6>"), sp->token_id("<0x97>")}),
            "\xEF\xBF\xBD\xEF\xBF\xBD");
  const auto l3 = load("llama3");
  const Ids e6 = l3->encode("\xE6\x97\xA5");  // 日 = E6 97 A5, three byte tokens here
  ASSERT_EQ(e6.size(), 3u);
  EXPECT_EQ(l3->decode({e6[0], e6[1]}), "\xEF\xBF\xBD");
}

TEST(HfTokenizer, IgnoreMergesTakesWholeVocabWords) {
  // Merges alone give a + bc; with ignore_merges a word found in the vocab is one token.
  TempTokenizer with(tiny_bpe(R"("ignore_merges":true,)"));
  TempTokenizer without(tiny_bpe(R"("ignore_merges":false,)"));
  EXPECT_EQ(HfTokenizer::load(with.dir())->encode("abc"), (Ids{5}));
  EXPECT_EQ(HfTokenizer::load(without.dir())->encode("abc"), (Ids{0, 4}));
  EXPECT_EQ(HfTokenizer::load(with.dir())->encode("abcab"), (Ids{0, 4, 3}));
}

TEST(HfTokenizer, UnknownCharsFuseOrDrop) {
  TempTokenizer fused(tiny_bpe(R"("unk_token":"<unk>","fuse_unk":true,)"));
  TempTokenizer unfused(tiny_bpe(R"("unk_token":"<unk>","fuse_unk":false,)"));
  TempTokenizer no_unk(tiny_bpe(""));
  EXPECT_EQ(HfTokenizer::load(fused.dir())->encode("axxbxc"), (Ids{0, 6, 1, 6, 2}));
  EXPECT_EQ(HfTokenizer::load(unfused.dir())->encode("axxbxc"), (Ids{0, 6, 6, 1, 6, 2}));
  // Without unk_token the library drops them silently; b and c then meet and merge.
  EXPECT_EQ(HfTokenizer::load(no_unk.dir())->encode("axxbxc"), (Ids{0, 4}));
  // No decoder: tokens joined by spaces.
  EXPECT_EQ(HfTokenizer::load(fused.dir())->decode({0, 6, 1}), "a <unk> b");
  TempTokenizer legacy(R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"c":2,"ab":3,"bc":4},
                         "merges":["#version: 0.2","b c","a b"]}})");
  EXPECT_EQ(HfTokenizer::load(legacy.dir())->encode("abc"), (Ids{0, 4}));
}

TEST(HfTokenizer, ByteLevelRoundTrips) {
  const std::vector<std::string> texts = {
      "Hello, world!",
      "  leading and trailing  ",
      "tabs\tand\r\nCRLF\r\n\r\n\n",
      "1234567890123",
      "caf\xC3\xA9 na\xC3\xAFve \xE4\xBD\xA0\xE5\xA5\xBD \xD0\xBF\xD1\x80\xD0\xB8",
      "\xF0\x9F\x98\x80 \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",
      "<|eot_id|",
      "x<s>y",
      "\xC2\xA0\xE3\x80\x80 odd spaces",
      ""};
  for (const char* name : {"llama3", "qwen2", "gpt2"}) {
    const auto t = load(name);
    for (const auto& text : texts)
      EXPECT_EQ(t->decode(t->encode(text)), text) << name << ": " << text;
  }
}

TEST(HfTokenizer, NfcNormalizesBeforeSplitting) {
  const auto qwen = load("qwen2");
  EXPECT_EQ(qwen->encode("cafe\xCC\x81"), qwen->encode("caf\xC3\xA9"));  // e + U+0301 -> é
  EXPECT_EQ(qwen->decode(qwen->encode("cafe\xCC\x81")), "caf\xC3\xA9");
  const auto l3 = load("llama3");  // no normalizer: the combining mark stays separate
  EXPECT_NE(l3->encode("cafe\xCC\x81"), l3->encode("caf\xC3\xA9"));
}

TEST(HfTokenizer, InvalidUtf8BecomesReplacementCharacters) {
  // Each maximal invalid subsequence is one U+FFFD, as bytes.decode("utf-8", errors="replace").
  const std::string fffd = "\xEF\xBF\xBD";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a\xFF"
       "b",
       "a" + fffd + "b"},
      {"x\xE6\x97y", "x" + fffd + "y"},                 // a truncated 3-byte sequence: one
      {"\xED\xA0\x80", fffd + fffd + fffd},             // an encoded surrogate: three
      {"\xF0\x9F\x98!", fffd + "!"},                    // a truncated emoji
      {"\xC0\xAF", fffd + fffd},                        // overlong
      {"\xF4\x90\x80\x80", fffd + fffd + fffd + fffd},  // above U+10FFFF
      {"ok\x80", "ok" + fffd}};
  for (const char* name : {"llama3", "qwen2", "gpt2", "sentencepiece"}) {
    const auto t = load(name);
    for (const auto& [bad, repaired] : cases) {
      EXPECT_EQ(t->encode(bad), t->encode(repaired)) << name;
      EXPECT_EQ(t->decode(t->encode(bad)), repaired) << name;
    }
  }
}

TEST(HfTokenizer, DecodeSkipsSpecialTokens) {
  const auto l3 = load("llama3");
  Ids ids = {l3->bos_id()};
  for (const auto id : l3->encode("hi there")) ids.push_back(id);
  ids.push_back(l3->token_id("<|eot_id|>"));
  EXPECT_EQ(l3->decode(ids), "hi there");
  EXPECT_THROW(l3->decode({8192}), std::out_of_range);
  EXPECT_THROW(l3->decode({-1}), std::out_of_range);
  EXPECT_THROW(l3->id_to_token(8192), std::out_of_range);
  EXPECT_EQ(l3->id_to_token(8191), "<|eot_id|>");
  EXPECT_EQ(l3->token_id("no such token"), -1);
}

TEST(HfTokenizer, EncodeIsThreadSafe) {
  const auto qwen = load("qwen2");
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i)
    texts.push_back("text " + std::to_string(i * 7919) + " words w" + std::to_string(i));
  std::vector<Ids> expected;
  const auto reference = load("qwen2");  // its own cache
  for (const auto& t : texts) expected.push_back(reference->encode(t));
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int r = 0; r < 5; ++r) {
        for (std::size_t i = 0; i < texts.size(); ++i)
          wrong[k] += qwen->encode(texts[i]) != expected[i];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

// An absurd id is refused, naming the file and the token, before any table is sized by it (2^31-1
// was an uncaught length_error; ~5e8 made every rank allocate gigabytes). Deep, long and binary
// JSON values end in a located error or load, never a crash.
TEST(HfTokenizer, HostileVocabularyIdsAndValues) {
  using lft::UsageError;
  using lft::test::message_of;
  for (const std::string id : {"2147483647", "500000000", "-1", "1.5", "\"7\""}) {
    std::string json = tiny_bpe("");
    json.replace(json.find("\"<unk>\":6"), 9, "\"<unk>\":" + id);
    TempTokenizer t(json);
    const std::string m = message_of<UsageError>([&] { HfTokenizer::load(t.dir()); });
    EXPECT_CONTAINS(m, t.dir() + "/tokenizer.json: model.vocab: token \"<unk>\" has id " + id);
  }
  std::string deep = tiny_bpe("");
  deep.replace(deep.find("\"decoder\":null"), 14, "\"decoder\":" + std::string(200000, '[') + std::string(200000, ']'));
  TempTokenizer nested(deep);
  EXPECT_CONTAINS(message_of<UsageError>([&] { HfTokenizer::load(nested.dir()); }), nested.dir() + "/tokenizer.json");
  std::string long_token = tiny_bpe("");
  long_token.replace(long_token.find("\"abc\":5"), 7, "\"" + std::string(200000, 'a') + "\":5");
  TempTokenizer long_one(long_token);
  EXPECT_NO_THROW(HfTokenizer::load(long_one.dir()));
  std::string binary = "{\"model\": \"";
  for (int i = 1; i < 256; ++i) binary += static_cast<char>(i);
  TempTokenizer bytes(binary + "\"}");
  EXPECT_CONTAINS(message_of<UsageError>([&] { HfTokenizer::load(bytes.dir()); }), bytes.dir() + "/tokenizer.json");
}

TEST(HfTokenizer, ErrorsNameTheFileAndTheComponent) {
  using lft::UsageError;
  using lft::test::message_of;
  EXPECT_CONTAINS(message_of<UsageError>([] { HfTokenizer::load("/nonexistent/tok"); }),
                  "tokenizer '/nonexistent/tok' does not exist");
  TempTokenizer empty("");
  std::remove((empty.dir() + "/tokenizer.json").c_str());
  EXPECT_CONTAINS(message_of<UsageError>([&] { HfTokenizer::load(empty.dir()); }),
                  empty.dir() + "/tokenizer.json' does not exist");
  TempTokenizer bad_json("{\"model\": ");
  EXPECT_CONTAINS(message_of<UsageError>([&] { HfTokenizer::load(bad_json.dir()); }),
                  bad_json.dir() + "/tokenizer.json: JSON error");
  TempTokenizer wordpiece(R"({"model":{"type":"WordPiece","vocab":{}}})");
  EXPECT_CONTAINS(message_of<UsageError>([&] { HfTokenizer::load(wordpiece.dir()); }),
                  "unsupported model type 'WordPiece'");
  TempTokenizer whitespace(tiny_bpe("", R"({"type":"Whitespace"})"));
  const std::string m = message_of<UsageError>([&] { HfTokenizer::load(whitespace.dir()); });
  EXPECT_CONTAINS(m, whitespace.dir() + "/tokenizer.json");
  EXPECT_CONTAINS(m, "unsupported pre_tokenizer type 'Whitespace'");
  std::string lower = tiny_bpe("");
  lower.replace(lower.find("\"normalizer\":null"), 17, R"("normalizer":{"type":"Lowercase"})");
  TempTokenizer lowercase(lower);
  EXPECT_CONTAINS(message_of<UsageError>([&] { HfTokenizer::load(lowercase.dir()); }),
                  "unsupported normalizer type 'Lowercase'");
  std::string wp = tiny_bpe("");
  wp.replace(wp.find("\"decoder\":null"), 14, R"("decoder":{"type":"WordPiece"})");
  TempTokenizer wp_decoder(wp);
  EXPECT_CONTAINS(message_of<UsageError>([&] { HfTokenizer::load(wp_decoder.dir()); }),
                  "unsupported decoder type 'WordPiece'");
  TempTokenizer bad_merge(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[["a","z"]]}})");
  EXPECT_CONTAINS(message_of<UsageError>([&] { HfTokenizer::load(bad_merge.dir()); }),
                  "token 'z' is not in the vocab");
  TempTokenizer bad_config(tiny_bpe(""));
  std::ofstream(bad_config.dir() + "/tokenizer_config.json") << R"({"bos_token": "<s>"})";
  EXPECT_CONTAINS(message_of<UsageError>([&] { HfTokenizer::load(bad_config.dir()); }),
                  "tokenizer_config.json: bos_token '<s>' is not in tokenizer.json");
}

}  // namespace
