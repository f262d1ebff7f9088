// read_text_corpus on the real demo datasets (../shared/data) and on small files made here:
// formats, skipped lines, and the error messages (path:line, what is wrong, what to do).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "lft/data/corpus.h"
#include "lft/data/packed_dataset.h"
#include "lft/data/tokenizer.h"
#include "lft/runtime/error.h"
#include "test_util.h"

namespace lft::data {
namespace {

std::string shared_data_dir() { return test::shared_data_dir("wiki_demo.txt"); }

#define REQUIRE_SHARED_DATA(dir)                                                          \
  const std::string dir = shared_data_dir();                                              \
  if (dir.empty()) GTEST_SKIP() << "shared demo data not found (set LFT_SHARED_DATA to the " \
                                   "folder holding wiki_demo.txt)"

using test::TempDir;

// The UsageError message of reading `path` ("" and a test failure when it does not throw one).
std::string error_of(const std::string& path) {
  return test::message_of<UsageError>([&] { read_text_corpus(path); });
}

TEST(CorpusTest, ReadsWikiDemoTxt) {
  REQUIRE_SHARED_DATA(dir);
  const std::vector<std::string> docs = read_text_corpus(dir + "/wiki_demo.txt");
  ASSERT_EQ(docs.size(), 30u);
  EXPECT_EQ(docs.front().rfind("Anarchism is a political philosophy", 0), 0u);
  EXPECT_EQ(docs.front().size(), 43804u);
  std::size_t bytes = 0;
  for (const std::string& d : docs) {
    EXPECT_EQ(d.find('\n'), std::string::npos);
    bytes += d.size();
  }
  EXPECT_EQ(bytes, 1028296u);  // every byte but the 30 newlines
}

TEST(CorpusTest, ReadsC4DemoJsonl) {
  REQUIRE_SHARED_DATA(dir);
  const std::vector<std::string> docs = read_text_corpus(dir + "/c4_demo.jsonl");
  ASSERT_EQ(docs.size(), 300u);
  // JSON escapes decoded to UTF-8: U+2019 is E2 80 99.
  EXPECT_EQ(docs.front().rfind("Don\xE2\x80\x99t think you need all the bells", 0), 0u);
  std::size_t bytes = 0;
  for (const std::string& d : docs) bytes += d.size();
  EXPECT_EQ(bytes, 740630u);
}

TEST(CorpusTest, AlpacaFileGivesTheSftFormatMessage) {
  REQUIRE_SHARED_DATA(dir);
  const std::string path = dir + "/alpaca_en_demo.json";
  const std::string msg = error_of(path);
  EXPECT_CONTAINS(msg, path + ":2: record 1:");
  EXPECT_CONTAINS(msg, "no \"text\" field");
  EXPECT_CONTAINS(msg, "alpaca");
  EXPECT_CONTAINS(msg, "\"input\", \"instruction\", \"output\"");
  EXPECT_CONTAINS(msg, "SFT formats");
  EXPECT_CONTAINS(msg, "dataset work");
  EXPECT_CONTAINS(msg, ".txt file (one document per line)");
}

TEST(CorpusTest, ChatMessagesJsonlGivesTheSftFormatMessage) {
  REQUIRE_SHARED_DATA(dir);
  const std::string path = dir + "/v1_sft_demo.jsonl";
  const std::string msg = error_of(path);
  EXPECT_CONTAINS(msg, path + ":1: ");
  EXPECT_CONTAINS(msg, "\"messages\"");
  EXPECT_CONTAINS(msg, "SFT formats");
}

TEST(PackedDatasetTest, PacksWikiDemo) {
  REQUIRE_SHARED_DATA(dir);
  const ByteTokenizer tok;
  const std::vector<std::string> docs = read_text_corpus(dir + "/wiki_demo.txt");
  const PackedDataset ds(docs, tok, 1024);
  EXPECT_EQ(ds.stream_tokens(), 1028296 + 2 * 30);
  EXPECT_EQ(ds.num_sequences(), (1028296 + 2 * 30) / 1024);
  const at::Tensor first = ds.sequence(0);
  EXPECT_EQ(first[0].item<std::int64_t>(), ByteTokenizer::kBos);
  EXPECT_EQ(first[1].item<std::int64_t>(), 'A');
}

TEST(CorpusTest, TxtSkipsEmptyLinesAndStripsCr) {
  TempDir tmp;
  const std::string path =
      tmp.write("docs.txt", "\xEF\xBB\xBF" "first doc\r\n\r\n   \n second  doc \nlast without newline");
  EXPECT_EQ(read_text_corpus(path),
            (std::vector<std::string>{"first doc", " second  doc ", "last without newline"}));
}

TEST(CorpusTest, JsonlAndJsonFormats) {
  TempDir tmp;
  const std::string jsonl = tmp.write(
      "a.jsonl", "{\"text\": \"one\", \"meta\": 1}\n\n{\"text\": \"\"}\r\n{\"text\": \"two\\nlines\"}\n");
  EXPECT_EQ(read_text_corpus(jsonl), (std::vector<std::string>{"one", "two\nlines"}));
  const std::string json =
      tmp.write("b.JSON", "[\n  {\"text\": \"x\"},\n  {\"text\": \"y\", \"id\": [1, \"]\"]}\n]\n");
  EXPECT_EQ(read_text_corpus(json), (std::vector<std::string>{"x", "y"}));
  // JSON lines in a .json file are read as JSON lines.
  const std::string lines = tmp.write("c.json", "{\"text\": \"p\"}\n{\"text\": \"q\"}\n");
  EXPECT_EQ(read_text_corpus(lines), (std::vector<std::string>{"p", "q"}));
}

TEST(CorpusTest, JsonlErrorsNamePathAndLine) {
  TempDir tmp;
  const std::string bad_json = tmp.write("bad.jsonl", "{\"text\": \"ok\"}\n\n{\"text\": \"unterminated}\n");
  std::string msg = error_of(bad_json);
  EXPECT_CONTAINS(msg, bad_json + ":3:");
  EXPECT_CONTAINS(msg, "invalid JSON");
  EXPECT_CONTAINS(msg, "each line of a .jsonl file must be one complete JSON object");

  const std::string missing = tmp.write("missing.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"x\", \"id\": 2}\n");
  msg = error_of(missing);
  EXPECT_CONTAINS(msg, missing + ":2: ");
  EXPECT_CONTAINS(msg, "no \"text\" field (fields: \"body\", \"id\")");
  EXPECT_CONTAINS(msg, "rename");

  const std::string not_string = tmp.write("num.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"ok\"}\n{\"text\": 5}\n");
  msg = error_of(not_string);
  EXPECT_CONTAINS(msg, not_string + ":3: ");
  EXPECT_CONTAINS(msg, "field \"text\" is a number, not a string");

  const std::string not_object = tmp.write("arr.jsonl", "[\"text\"]\n");
  msg = error_of(not_object);
  EXPECT_CONTAINS(msg, not_object + ":1: ");
  EXPECT_CONTAINS(msg, "expected a JSON object with a \"text\" field, found an array");

  const std::string sharegpt =
      tmp.write("sg.jsonl", "{\"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}]}\n");
  msg = error_of(sharegpt);
  EXPECT_CONTAINS(msg, sharegpt + ":1: ");
  EXPECT_CONTAINS(msg, "sharegpt");
  EXPECT_CONTAINS(msg, "(fields: \"conversations\")");
}

TEST(CorpusTest, JsonErrorsNamePathAndLine) {
  TempDir tmp;
  const std::string bad = tmp.write("bad.json", "[\n  {\"text\": \"a\"},\n  {\"text\": }\n]\n");
  std::string msg = error_of(bad);
  EXPECT_CONTAINS(msg, bad + ":3:");
  EXPECT_CONTAINS(msg, "invalid JSON");

  const std::string third = tmp.write("third.json", "[{\"text\": \"a\"},\n {\"text\": \"b\"},\n\n {\"txt\": \"c\"}]");
  msg = error_of(third);
  EXPECT_CONTAINS(msg, third + ":4: record 3: ");
  EXPECT_CONTAINS(msg, "no \"text\" field (fields: \"txt\")");

  const std::string object = tmp.write("obj.json", "{\n \"data\": [1]\n}\n");
  msg = error_of(object);
  EXPECT_CONTAINS(msg, object + ":1: ");
  EXPECT_CONTAINS(msg, "expected a JSON array");
}

TEST(CorpusTest, FileLevelErrors) {
  TempDir tmp;
  const std::string absent = tmp.path("absent.txt");
  std::string msg = error_of(absent);
  EXPECT_CONTAINS(msg, absent + ": cannot read the training data");
  EXPECT_CONTAINS(msg, "No such file");

  const std::string csv = tmp.write("data.csv", "text\nhello\n");
  msg = error_of(csv);
  EXPECT_CONTAINS(msg, "unsupported file type '.csv'");
  EXPECT_CONTAINS(msg, ".jsonl");

  const std::string empty = tmp.write("empty.txt", "");
  msg = error_of(empty);
  EXPECT_CONTAINS(msg, empty + ": the training data file is empty");

  const std::string blank = tmp.write("blank.jsonl", "\n{\"text\": \"\"}\n  \n");
  msg = error_of(blank);
  EXPECT_CONTAINS(msg, blank + ": the training data holds no documents");

  const std::string folder = tmp.write("folder.txt", "");
  ::unlink(folder.c_str());
  ASSERT_EQ(::mkdir(folder.c_str(), 0700), 0);
  msg = error_of(folder);
  ::rmdir(folder.c_str());
  EXPECT_CONTAINS(msg, "is a directory");
}

}  // namespace
}  // namespace lft::data
