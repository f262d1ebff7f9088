// resolve_datasets (LlamaFactory's dataset_info.json) and the records read through its sources:
// columns and tags as LlamaFactory reads them, stage pt, max_samples, the refused entries, and
// the repository's inputs/dataset_info.json on the shared demo data.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lft/data/dataset_registry.h"
#include "lft/data/sft_records.h"
#include "lft/runtime/error.h"
#include "test_util.h"

namespace lft::data {
namespace {


const char kDatasetInfo[] = R"json({
  "plain": {"file_name": "plain.json"},
  "with_system": {"file_name": "plain.json",
                  "columns": {"prompt": "instruction", "query": "input", "response": "output",
                              "system": "system", "history": "history"}},
  "qa": {"file_name": "qa.jsonl", "columns": {"prompt": "q", "response": "a"}},
  "chat": {"file_name": "chat.json", "formatting": "sharegpt",
           "columns": {"messages": "messages"},
           "tags": {"role_tag": "role", "content_tag": "content",
                    "user_tag": "user", "assistant_tag": "assistant"}},
  "chat_default": {"file_name": "chat_default.jsonl", "formatting": "sharegpt"},
  "glaive": {"file_name": "tools.jsonl", "formatting": "sharegpt",
             "columns": {"messages": "conversations", "tools": "tools"}},
  "glaive_no_tools": {"file_name": "tools.jsonl", "formatting": "sharegpt"},
  "docs": {"file_name": "docs.jsonl", "columns": {"prompt": "text"}},
  "docs_body": {"file_name": "body.jsonl", "columns": {"prompt": "body"}},
  "remote": {"hf_hub_url": "org/some-data"},
  "pairs": {"file_name": "plain.json", "ranking": true},
  "openai": {"file_name": "plain.json", "formatting": "openai"},
  "odd": {"file_name": "plain.json", "formatting": "alpacca"},
  "absent": {"file_name": "nope.json"},
  "folder": {"file_name": "sub"},
  "no_file": {"formatting": "alpaca"},
  "media": {"file_name": "plain.json", "columns": {"prompt": "instruction", "images": "images"}},
  "typo_column": {"file_name": "plain.json", "columns": {"promt": "instruction"}},
  "misspelt_field": {"file_name": "plain.json", "columns": {"query": "inptu"}}
})json";

// Alpaca with every default column, plus a system and a history that LlamaFactory reads only when
// `columns` names them.
const char kPlain[] = R"json([
  {"instruction": "Add the numbers", "input": "2 and 3", "output": "5",
   "system": "You are a calculator.", "history": [["hi", "hello"]]},
  {"instruction": "Say hi", "input": "", "output": "hi"},
  {"instruction": "Count", "output": "1 2 3"}
])json";

// LlamaFactory's glaive_toolcall shape: a function_call turn, its result, and a tools string.
const char kTools[] =
    R"({"conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": "{\"name\": \"f\", )"
    R"(\"arguments\": {}}"}, {"from": "observation", "value": "r"}, {"from": "gpt", "value": "a"}], "tools": "[{\"name\": \"f\"}]"})"
    "\n";

const char kQa[] =
    "{\"q\": \"What is 1+1?\", \"a\": \"2\", \"instruction\": \"not read\", \"input\": \"no\"}\n"
    "{\"q\": \"Capital of France?\", \"a\": \"Paris\"}\n"
    "{\"q\": \"Third?\", \"a\": \"yes\"}\n";

// The third record starts with a system message, which a `tags` object without system_tag does
// not recognise: LlamaFactory drops the record, and so does lftrain.
const char kChat[] = R"json([
  {"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"},
                {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Goodbye"}]},
  {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]},
  {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x"},
                {"role": "assistant", "content": "y"}]}
])json";

const char kChatDefault[] =
    "{\"conversations\": [{\"from\": \"system\", \"value\": \"Be kind.\"}, {\"from\": \"human\", "
    "\"value\": \"a\"}, {\"from\": \"gpt\", \"value\": \"b\"}], \"system\": \"not read\"}\n"
    "{\"conversations\": [{\"from\": \"human\", \"value\": \"c\"}, {\"from\": \"gpt\", \"value\": "
    "\"d\"}], \"system\": \"not read either\"}\n";

const char kDocs[] =
    "{\"text\": \"The first document.\"}\n"
    "{\"text\": \"The second document.\"}\n"
    "{\"text\": \"The third document.\"}\n";

const char kBody[] =
    "{\"body\": \"Body one.\", \"text\": \"not this\"}\n"
    "{\"body\": \"Body two.\", \"text\": \"nor this\"}\n";

class DatasetRegistry : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_.write("dataset_info.json", kDatasetInfo);
    folder_.write("plain.json", kPlain);
    folder_.write("qa.jsonl", kQa);
    folder_.write("chat.json", kChat);
    folder_.write("chat_default.jsonl", kChatDefault);
    folder_.write("tools.jsonl", kTools);
    folder_.write("docs.jsonl", kDocs);
    folder_.write("body.jsonl", kBody);
    std::filesystem::create_directory(dir() + "/sub");
    folder_.write("sub/part.json", kPlain);
  }

  const std::string& dir() const { return folder_.dir(); }

  std::vector<DatasetSource> resolve(const std::vector<std::string>& names,
                                     const std::string& stage = "sft",
                                     std::int64_t max_samples = -1) const {
    return resolve_datasets(names, dir(), stage, max_samples);
  }

  SftRecords read(const std::vector<std::string>& names, const std::string& stage = "sft",
                  std::int64_t max_samples = -1) const {
    return read_sft_records(resolve(names, stage, max_samples));
  }

  std::string error_of(const std::vector<std::string>& names,
                       const std::string& stage = "sft") const {
    return test::message_of<UsageError>([&] { resolve(names, stage); });
  }

  test::TempDir folder_;
};

void expect_message(const Message& m, Role role, const std::string& text, float weight) {
  EXPECT_EQ(m.role, role) << role_name(m.role) << " " << m.text;
  EXPECT_EQ(m.text, text);
  EXPECT_FLOAT_EQ(m.loss_weight, weight);
}

// A field that `columns` names and no record has would drop that part of every record: an error
// naming the entry, the column, the field and the fields the records have.
TEST_F(DatasetRegistry, AMisspeltFieldIsAnError) {
  const std::string m = test::message_of<UsageError>([&] { read({"misspelt_field"}); });
  EXPECT_CONTAINS(m, "dataset_info.json: \"misspelt_field\": column \"query\" names the field \"inptu\", which no record of");
  EXPECT_CONTAINS(m, "(its records have: history, input, instruction, output, system)");
  EXPECT_NO_THROW(read({"with_system", "qa", "chat"}));  // every named field occurs
}

TEST_F(DatasetRegistry, AlpacaWithDefaultColumns) {
  const std::vector<DatasetSource> sources = resolve({"plain"});
  ASSERT_EQ(sources.size(), 1u);
  EXPECT_EQ(sources[0].name, "plain");
  EXPECT_EQ(sources[0].path, dir() + "/plain.json");
  EXPECT_EQ(sources[0].options.format, "alpaca");
  EXPECT_EQ(sources[0].max_samples, -1);
  EXPECT_EQ(sources[0].options.columns.prompt, "instruction");
  EXPECT_EQ(sources[0].options.columns.query, "input");
  EXPECT_EQ(sources[0].options.columns.response, "output");
  EXPECT_EQ(sources[0].options.columns.system, "");
  EXPECT_EQ(sources[0].options.columns.history, "");

  const SftRecords r = read_sft_records(sources);
  ASSERT_EQ(r.conversations.size(), 3u);
  // instruction + "\n" + input; no system message and no history: columns does not name them.
  const auto& first = r.conversations[0].messages;
  ASSERT_EQ(first.size(), 2u);
  expect_message(first[0], Role::User, "Add the numbers\n2 and 3", 0.0f);
  expect_message(first[1], Role::Assistant, "5", 1.0f);
  // An empty or missing input adds nothing.
  expect_message(r.conversations[1].messages[0], Role::User, "Say hi", 0.0f);
  expect_message(r.conversations[2].messages[0], Role::User, "Count", 0.0f);
  expect_message(r.conversations[2].messages[1], Role::Assistant, "1 2 3", 1.0f);
  ASSERT_EQ(r.files.size(), 1u);
  EXPECT_EQ(r.files[0].format, "alpaca");
  EXPECT_EQ(r.files[0].used, 3);
  EXPECT_CONTAINS(r.summary(), "plain (" + dir() + "/plain.json): alpaca, 3 records, 3 used");
}

TEST_F(DatasetRegistry, SystemAndHistoryWhenColumnsNameThem) {
  const SftRecords r = read({"with_system"});
  ASSERT_EQ(r.conversations.size(), 3u);
  const auto& m = r.conversations[0].messages;
  ASSERT_EQ(m.size(), 5u);
  expect_message(m[0], Role::System, "You are a calculator.", 0.0f);
  expect_message(m[1], Role::User, "hi", 0.0f);
  expect_message(m[2], Role::Assistant, "hello", 1.0f);
  expect_message(m[3], Role::User, "Add the numbers\n2 and 3", 0.0f);
  expect_message(m[4], Role::Assistant, "5", 1.0f);
  EXPECT_EQ(r.conversations[1].messages.size(), 2u);
}

TEST_F(DatasetRegistry, AlpacaWithOwnColumns) {
  const std::vector<DatasetSource> sources = resolve({"qa"});
  ASSERT_EQ(sources.size(), 1u);
  EXPECT_EQ(sources[0].options.columns.prompt, "q");
  EXPECT_EQ(sources[0].options.columns.response, "a");
  EXPECT_EQ(sources[0].options.columns.query, "");  // columns replaces the defaults
  const SftRecords r = read_sft_records(sources);
  ASSERT_EQ(r.conversations.size(), 3u);
  const auto& m = r.conversations[0].messages;
  ASSERT_EQ(m.size(), 2u);
  // "instruction" and "input" are not the columns any more.
  expect_message(m[0], Role::User, "What is 1+1?", 0.0f);
  expect_message(m[1], Role::Assistant, "2", 1.0f);
  expect_message(r.conversations[1].messages[1], Role::Assistant, "Paris", 1.0f);
}

TEST_F(DatasetRegistry, SharegptWithOwnTags) {
  const std::vector<DatasetSource> sources = resolve({"chat"});
  ASSERT_EQ(sources.size(), 1u);
  EXPECT_EQ(sources[0].options.format, "sharegpt");
  EXPECT_EQ(sources[0].options.columns.messages, "messages");
  EXPECT_EQ(sources[0].options.columns.role_tag, "role");
  EXPECT_EQ(sources[0].options.columns.user_tag, "user");
  EXPECT_EQ(sources[0].options.columns.system_tag, "");  // tags replaces the defaults
  const SftRecords r = read_sft_records(sources);
  ASSERT_EQ(r.conversations.size(), 2u);
  const auto& m = r.conversations[0].messages;
  ASSERT_EQ(m.size(), 4u);
  expect_message(m[0], Role::User, "Hello", 0.0f);
  expect_message(m[1], Role::Assistant, "Hi there", 1.0f);
  expect_message(m[2], Role::User, "Bye", 0.0f);
  expect_message(m[3], Role::Assistant, "Goodbye", 1.0f);
  expect_message(r.conversations[1].messages[1], Role::Assistant, "4", 1.0f);
  ASSERT_EQ(r.files.size(), 1u);
  EXPECT_EQ(r.files[0].records, 3);
  EXPECT_EQ(r.files[0].used, 2);
  EXPECT_EQ(r.files[0].bad, 1);
  ASSERT_EQ(r.files[0].first_bad.size(), 1u);
  EXPECT_CONTAINS(r.files[0].first_bad[0], "chat.json: record 3: message 1 has role \"system\"");
}

TEST_F(DatasetRegistry, SharegptWithDefaultTags) {
  const SftRecords r = read({"chat_default"});
  ASSERT_EQ(r.conversations.size(), 2u);
  // A leading system message is read (system_tag "system" is a default); the system column
  // is not (columns does not name it).
  const auto& m = r.conversations[0].messages;
  ASSERT_EQ(m.size(), 3u);
  expect_message(m[0], Role::System, "Be kind.", 0.0f);
  expect_message(m[1], Role::User, "a", 0.0f);
  expect_message(m[2], Role::Assistant, "b", 1.0f);
  ASSERT_EQ(r.conversations[1].messages.size(), 2u);
  expect_message(r.conversations[1].messages[0], Role::User, "c", 0.0f);
}

// The tools column is read only when columns names it (as LlamaFactory's classic loader reads it);
// function_call turns are tool calls either way.
TEST_F(DatasetRegistry, ToolsColumnWhenColumnsNameIt) {
  const SftRecords with = read({"glaive"});
  ASSERT_EQ(with.conversations.size(), 1u);
  EXPECT_EQ(with.conversations[0].tools, R"([{"name":"f"}])");
  EXPECT_EQ(with.conversations[0].messages[1].tool_calls, std::vector<std::string>{R"({"name":"f","arguments":{}})"});
  const SftRecords without = read({"glaive_no_tools"});
  ASSERT_EQ(without.conversations.size(), 1u);
  EXPECT_EQ(without.conversations[0].tools, "");
  EXPECT_EQ(without.conversations[0].messages[1].tool_calls.size(), 1u);
}

TEST_F(DatasetRegistry, StagePtReadsThePromptColumnAsDocuments) {
  const std::vector<DatasetSource> sources = resolve({"docs", "docs_body"}, "pt");
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_EQ(sources[0].options.format, "text");
  EXPECT_EQ(sources[0].options.columns.text, "text");
  EXPECT_EQ(sources[1].options.format, "text");
  EXPECT_EQ(sources[1].options.columns.text, "body");
  const SftRecords r = read_sft_records(sources);
  EXPECT_TRUE(r.text_only());
  ASSERT_EQ(r.conversations.size(), 5u);
  ASSERT_EQ(r.conversations[0].messages.size(), 1u);
  expect_message(r.conversations[0].messages[0], Role::User, "The first document.", 0.0f);
  expect_message(r.conversations[2].messages[0], Role::User, "The third document.", 0.0f);
  expect_message(r.conversations[3].messages[0], Role::User, "Body one.", 0.0f);
  // With stage sft the same entry is alpaca.
  EXPECT_EQ(resolve({"docs"}, "sft")[0].options.format, "alpaca");
  // Pre-training reads documents from alpaca entries only.
  EXPECT_CONTAINS(
      error_of({"chat"}, "pt"),
      "\"chat\": stage pt reads documents from an alpaca-formatted entry's prompt column");
}

TEST_F(DatasetRegistry, MaxSamplesKeepsTheFirstRecordsOfEachFile) {
  const std::vector<DatasetSource> sources = resolve({"plain", "qa"}, "sft", 2);
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_EQ(sources[0].max_samples, 2);
  EXPECT_EQ(sources[1].max_samples, 2);
  const SftRecords r = read_sft_records(sources);
  ASSERT_EQ(r.files.size(), 2u);
  EXPECT_EQ(r.files[0].records, 2);
  EXPECT_EQ(r.files[1].records, 2);
  ASSERT_EQ(r.conversations.size(), 4u);
  EXPECT_EQ(r.conversations[0].messages[0].text, "Add the numbers\n2 and 3");
  EXPECT_EQ(r.conversations[1].messages[0].text, "Say hi");
  EXPECT_EQ(r.conversations[2].messages[0].text, "What is 1+1?");
  EXPECT_EQ(r.conversations[3].messages[0].text, "Capital of France?");
  // Larger than a file: all of it.
  EXPECT_EQ(read({"plain"}, "sft", 100).conversations.size(), 3u);
}

TEST_F(DatasetRegistry, NamesInTheOrderGiven) {
  const std::vector<DatasetSource> sources = resolve({"qa", "plain", "qa"});
  ASSERT_EQ(sources.size(), 3u);
  EXPECT_EQ(sources[0].name, "qa");
  EXPECT_EQ(sources[1].name, "plain");
  EXPECT_EQ(sources[2].name, "qa");
  EXPECT_EQ(read_sft_records(sources).conversations.size(), 9u);
}

TEST_F(DatasetRegistry, RegistryFileErrors) {
  test::TempDir empty;
  std::string m =
      test::message_of<UsageError>([&] { resolve_datasets({"plain"}, empty.dir(), "sft", -1); });
  EXPECT_CONTAINS(m, empty.dir() + "/dataset_info.json not found");
  EXPECT_CONTAINS(m, "dataset_dir");
  empty.write("dataset_info.json", "[1, 2]");
  m = test::message_of<UsageError>([&] { resolve_datasets({"plain"}, empty.dir(), "sft", -1); });
  EXPECT_CONTAINS(m, empty.dir() + "/dataset_info.json is not a JSON object of dataset entries");
  empty.write("dataset_info.json", "{\"plain\": ");
  m = test::message_of<UsageError>([&] { resolve_datasets({"plain"}, empty.dir(), "sft", -1); });
  EXPECT_CONTAINS(m, "is not a JSON object of dataset entries (invalid JSON?)");
}

TEST_F(DatasetRegistry, UnknownNameSuggestsTheNearest) {
  const std::string registry = dir() + "/dataset_info.json";
  std::string m = error_of({"plian"});
  EXPECT_CONTAINS(m, "dataset \"plian\" is not in " + registry + "; did you mean \"plain\"?");
  m = error_of({"plain", "zzzzzzzzzz"});  // the second name, after a good one
  EXPECT_CONTAINS(m, "dataset \"zzzzzzzzzz\" is not in " + registry);
  EXPECT_EQ(m.find("did you mean"), std::string::npos) << m;
}

TEST_F(DatasetRegistry, RefusedEntries) {
  const std::string at = dir() + "/dataset_info.json: ";
  EXPECT_CONTAINS(
      error_of({"remote"}),
      at + "\"remote\" is a remote dataset (hf_hub_url): lftrain reads local files only");
  EXPECT_CONTAINS(error_of({"pairs"}), at + "\"pairs\" is ranking data (ranking: true): preference pairs train with "
                                           "stage = \"dpo\" or \"rm\", not sft");
  EXPECT_CONTAINS(error_of({"plain"}, "dpo"), at + "\"plain\" is not ranking data");
  const std::vector<DatasetSource> pairs = resolve({"pairs"}, "dpo");
  EXPECT_TRUE(pairs[0].options.columns.ranking);
  EXPECT_EQ(pairs[0].options.columns.chosen, "chosen");
  EXPECT_CONTAINS(
      error_of({"openai"}),
      at + "\"openai\": formatting \"openai\" is not supported; use alpaca or sharegpt");
  EXPECT_CONTAINS(error_of({"odd"}), at + "\"odd\": formatting \"alpacca\" is not supported");
  EXPECT_CONTAINS(error_of({"absent"}), at + "\"absent\": file " + dir() + "/nope.json not found");
  EXPECT_CONTAINS(error_of({"folder"}), at + "\"folder\": " + dir() + "/sub is a folder");
  EXPECT_CONTAINS(error_of({"no_file"}), at + "\"no_file\" has no file_name");
  EXPECT_CONTAINS(error_of({"media"}),
                  "columns \"images\" (media) is not supported by lftrain");
  EXPECT_CONTAINS(error_of({"typo_column"}), at + "\"typo_column\": unknown columns key \"promt\"");
}

// ---- the repository's inputs/dataset_info.json on ../shared/data ----

std::string repo_root() {
  const std::string here = __FILE__;  // <root>/tests/unit/test_dataset_registry.cpp
  return here.substr(0, here.rfind('/')) + "/../..";
}

TEST(DatasetRegistryRepo, IdentityAndAlpacaEnDemoThroughInputs) {
  const std::string inputs = repo_root() + "/inputs";
  // inputs/dataset_info.json names its files as ../../shared/data/... from inputs/.
  if (!test::is_regular_file(inputs + "/../../shared/data/identity.json") ||
      !test::is_regular_file(inputs + "/../../shared/data/alpaca_en_demo.json"))
    GTEST_SKIP() << "shared demo data not found next to this checkout (../shared/data)";
  const std::vector<DatasetSource> sources =
      resolve_datasets({"identity", "alpaca_en_demo"}, inputs, "sft", 64);
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_EQ(sources[0].name, "identity");
  EXPECT_EQ(sources[1].name, "alpaca_en_demo");
  EXPECT_EQ(sources[0].options.format, "alpaca");
  const SftRecords r = read_sft_records(sources);
  ASSERT_EQ(r.files.size(), 2u);
  EXPECT_EQ(r.files[0].records, 64);
  EXPECT_EQ(r.files[0].used, 64);
  EXPECT_EQ(r.files[1].records, 64);
  EXPECT_EQ(r.files[1].used, 64);
  ASSERT_EQ(r.conversations.size(), 128u);
  EXPECT_EQ(r.conversations[0].messages[0].text, "hi");
  EXPECT_EQ(r.conversations[64].messages[0].text, "Describe a process of making crepes.");
  EXPECT_CONTAINS(r.summary(), "identity (");
  EXPECT_CONTAINS(r.summary(), "identity.json): alpaca, 64 records, 64 used");
  EXPECT_CONTAINS(r.summary(), "alpaca_en_demo.json): alpaca, 64 records, 64 used");
  // Without max_samples: the whole files (91 and 999 records).
  EXPECT_EQ(read_sft_records(resolve_datasets({"identity", "alpaca_en_demo"}, inputs, "sft", -1))
                .conversations.size(),
            91u + 999u);
}

TEST(DatasetRegistryRepo, C4DemoAsPretrainingDocuments) {
  const std::string inputs = repo_root() + "/inputs";
  if (!test::is_regular_file(inputs + "/../../shared/data/c4_demo.jsonl"))
    GTEST_SKIP() << "shared demo data not found next to this checkout (../shared/data)";
  const SftRecords r = read_sft_records(resolve_datasets({"c4_demo"}, inputs, "pt", 10));
  EXPECT_TRUE(r.text_only());
  ASSERT_EQ(r.conversations.size(), 10u);
  ASSERT_EQ(r.conversations[0].messages.size(), 1u);
  EXPECT_EQ(r.conversations[0].messages[0].text.rfind("Don", 0), 0u);
}

}  // namespace
}  // namespace lft::data
