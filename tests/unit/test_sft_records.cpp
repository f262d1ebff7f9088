// read_sft_records on the real demo datasets (../shared/data) and on small files made here:
// format detection, the conversations made, and the bad records counted with where they are.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lft/data/sft_records.h"
#include "lft/runtime/error.h"
#include "sft_test_util.h"
#include "test_util.h"

namespace lft::data {
namespace {

using test::TempDir;

SftRecords read(const std::string& path, const std::string& format = "auto") {
  RecordOptions o;
  o.format = format;
  return read_sft_records({path}, o);
}

std::string error_of(const std::string& path, const std::string& format = "auto") {
  return test::message_of<UsageError>([&] { read(path, format); });
}

void expect_message(const Message& m, Role role, const std::string& text, float weight) {
  EXPECT_EQ(m.role, role) << role_name(m.role);
  EXPECT_EQ(m.text, text);
  EXPECT_FLOAT_EQ(m.loss_weight, weight);
}

TEST(SftRecordsTest, AlpacaEnDemo) {
  LFT_REQUIRE_SFT_DATA(dir);
  const SftRecords r = read(dir + "/alpaca_en_demo.json");
  ASSERT_EQ(r.files.size(), 1u);
  EXPECT_EQ(r.files[0].format, "alpaca");
  EXPECT_EQ(r.files[0].records, 999);
  EXPECT_EQ(r.files[0].used, 999);
  EXPECT_EQ(r.files[0].bad, 0);
  ASSERT_EQ(r.conversations.size(), 999u);
  const auto& m = r.conversations[0].messages;
  ASSERT_EQ(m.size(), 2u);
  expect_message(m[0], Role::User, "Describe a process of making crepes.", 0.0f);
  EXPECT_EQ(m[1].text.rfind("Making crepes is an easy and delicious process!", 0), 0u);
  EXPECT_FLOAT_EQ(m[1].loss_weight, 1.0f);
  EXPECT_FALSE(r.text_only());
  EXPECT_CONTAINS(r.summary(), "alpaca_en_demo.json: alpaca, 999 records, 999 used");
}

TEST(SftRecordsTest, IdentityAndListOfPaths) {
  LFT_REQUIRE_SFT_DATA(dir);
  const SftRecords one = read(dir + "/identity.json");
  EXPECT_EQ(one.conversations.size(), 91u);
  expect_message(one.conversations[0].messages[0], Role::User, "hi", 0.0f);
  const SftRecords both =
      read_sft_records({dir + "/identity.json", dir + "/alpaca_en_demo.json"}, RecordOptions{});
  ASSERT_EQ(both.files.size(), 2u);
  EXPECT_EQ(both.conversations.size(), 91u + 999u);
  EXPECT_EQ(both.conversations[91].messages[0].text, "Describe a process of making crepes.");
}

TEST(SftRecordsTest, V1MessagesDemo) {
  LFT_REQUIRE_SFT_DATA(dir);
  const SftRecords r = read(dir + "/v1_sft_demo.jsonl");
  EXPECT_EQ(r.files[0].format, "messages");
  ASSERT_EQ(r.conversations.size(), 500u);
  const auto& m = r.conversations[0].messages;
  ASSERT_EQ(m.size(), 2u);
  expect_message(m[0], Role::User, "hi", 0.0f);
  expect_message(m[1], Role::Assistant,
                 "Hello! I am {{name}}, an AI assistant developed by {{author}}. How can I assist "
                 "you today?",
                 1.0f);
}

TEST(SftRecordsTest, TextFormats) {
  LFT_REQUIRE_SFT_DATA(dir);
  const SftRecords c4 = read(dir + "/c4_demo.jsonl");
  EXPECT_EQ(c4.files[0].format, "text");
  EXPECT_EQ(c4.conversations.size(), 300u);
  const SftRecords wiki = read(dir + "/wiki_demo.txt");
  EXPECT_EQ(wiki.files[0].format, "text");
  ASSERT_EQ(wiki.conversations.size(), 30u);
  EXPECT_EQ(wiki.conversations[0].messages[0].text.size(), 43804u);
  EXPECT_TRUE(wiki.text_only());
  EXPECT_CONTAINS(error_of(dir + "/wiki_demo.txt", "alpaca"), "a .txt file holds text documents");
}

// Deep, long and binary values in a dataset file: a located error or a bad record, never a crash
// (copying a value nested 100,000 deep recursed per level).
TEST(SftRecordsTest, DeepLongAndBinaryValues) {
  TempDir tmp;
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_CONTAINS(error_of(tmp.write("deep.json", "[" + deep + "]")), "values nested more than 256 levels deep");
  const std::string good = R"({"instruction": "Add", "output": "3"})";
  const SftRecords lines = read(tmp.write("deep.jsonl", good + "\n{\"instruction\": " + deep + "}\n" + good + "\n"));
  EXPECT_EQ(lines.files[0].used, 2);
  EXPECT_EQ(lines.files[0].bad, 1);
  EXPECT_CONTAINS(lines.files[0].first_bad[0], "deep.jsonl:2: values nested more than 256 levels deep");
  const SftRecords long_one = read(tmp.write("long.jsonl", R"({"instruction": ")" + std::string(300000, 'x') +
                                                               R"(", "output": "3"})" "\n"));
  EXPECT_EQ(long_one.files[0].used, 1);
  std::string binary = R"({"instruction": ")";
  for (int i = 1; i < 256; ++i) binary += static_cast<char>(i);
  EXPECT_CONTAINS(error_of(tmp.write("binary.jsonl", binary + R"(", "output": "3"})" "\n")), "binary.jsonl");
}

TEST(SftRecordsTest, AlpacaFieldsSystemAndHistory) {
  TempDir tmp;
  const std::string path =
      tmp.write("a.json",
                R"([{"instruction": "Add", "input": "1 2", "output": "3", "system": "Be brief.",
           "history": [["hi", "hello"], ["and you?", "fine"]]},
          {"instruction": "", "input": "only input", "output": "ok"},
          {"instruction": "no input", "output": "ok", "input": null}])");
  const SftRecords r = read(path);
  ASSERT_EQ(r.conversations.size(), 3u);
  const auto& m = r.conversations[0].messages;
  ASSERT_EQ(m.size(), 7u);
  expect_message(m[0], Role::System, "Be brief.", 0.0f);
  expect_message(m[1], Role::User, "hi", 0.0f);
  expect_message(m[2], Role::Assistant, "hello", 1.0f);
  expect_message(m[5], Role::User, "Add\n1 2", 0.0f);  // LlamaFactory joins with "\n"
  expect_message(m[6], Role::Assistant, "3", 1.0f);
  EXPECT_EQ(r.conversations[1].messages[0].text, "only input");
  EXPECT_EQ(r.conversations[2].messages[0].text, "no input");
}

TEST(SftRecordsTest, AlpacaBadRecordsNamedByRecordIndex) {
  TempDir tmp;
  const std::string path = tmp.write("bad.json",
                                     R"([{"instruction": "ok", "output": "fine"},
          {"instruction": "no output"},
          {"instruction": "empty", "output": ""},
          {"instruction": 5, "output": "x"},
          {"instruction": "", "input": "", "output": "x"},
          {"instruction": "h", "output": "x", "history": [["only one"]]},
          "not an object"])");
  const SftRecords r = read(path);
  const FileReport& f = r.files[0];
  EXPECT_EQ(f.records, 7);
  EXPECT_EQ(f.used, 1);
  EXPECT_EQ(f.bad, 6);
  ASSERT_EQ(f.first_bad.size(), 5u);  // max_reported
  EXPECT_EQ(f.first_bad[0], path + ": record 2: no \"output\" field");
  EXPECT_EQ(f.first_bad[1], path + ": record 3: empty response (message 2, assistant)");
  EXPECT_EQ(f.first_bad[2], path + ": record 4: field \"instruction\" is a number, not a string");
  EXPECT_EQ(f.first_bad[3], path + ": record 5: empty prompt (\"instruction\" and \"input\")");
  EXPECT_CONTAINS(f.first_bad[4], path + ": record 6: field \"history\" is not a list of");
  EXPECT_CONTAINS(f.summary(), "7 records, 1 used, 6 skipped");
  EXPECT_CONTAINS(f.summary(), "\n  ...");
}

TEST(SftRecordsTest, ShareGptTagsSystemAndObservation) {
  TempDir tmp;
  const std::string path = tmp.write(
      "s.jsonl",
      R"({"conversations": [{"from": "system", "value": "S"}, {"from": "human", "value": "q1"},)"
      R"( {"from": "gpt", "value": "a1"}, {"from": "observation", "value": "42"},)"
      R"( {"from": "gpt", "value": "a2"}]}
{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}], "system": "T"}
)");
  const SftRecords r = read(path);
  EXPECT_EQ(r.files[0].format, "sharegpt");
  ASSERT_EQ(r.conversations.size(), 2u);
  const auto& m = r.conversations[0].messages;
  ASSERT_EQ(m.size(), 5u);
  expect_message(m[0], Role::System, "S", 0.0f);
  expect_message(m[3], Role::Observation, "42", 0.0f);
  expect_message(m[4], Role::Assistant, "a2", 1.0f);
  expect_message(r.conversations[1].messages[0], Role::System, "T", 0.0f);

  // Other tags, as a dataset_info "tags" entry sets them.
  const std::string custom = tmp.write(
      "c.json",
      R"([{"chat": [{"role": "user", "content": "q"}, {"role": "bot", "content": "a"}]}])");
  RecordOptions o;
  o.format = "sharegpt";
  o.columns.messages = "chat";
  o.columns.role_tag = "role";
  o.columns.content_tag = "content";
  o.columns.user_tag = "user";
  o.columns.assistant_tag = "bot";
  const SftRecords c = read_sft_records({custom}, o);
  ASSERT_EQ(c.conversations.size(), 1u);
  expect_message(c.conversations[0].messages[1], Role::Assistant, "a", 1.0f);
}

TEST(SftRecordsTest, ShareGptBadRecordsNamedByLine) {
  TempDir tmp;
  const std::string path = tmp.write(
      "bad.jsonl",
      R"({"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}

{"conversations": [{"from": "human", "value": "q"}]}
{"conversations": [{"from": "gpt", "value": "a"}, {"from": "human", "value": "q"}]}
{"conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": "{}"}]}
{"conversations": [{"from": "human", "value": "q"}, {"from": "robot", "value": "a"}]}
{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt"}]}
{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}
)");
  RecordOptions o;
  o.max_reported = 10;
  const SftRecords r = read_sft_records({path}, o);
  const FileReport& f = r.files[0];
  EXPECT_EQ(f.records, 7);  // the blank line 2 is no record
  EXPECT_EQ(f.used, 1);
  ASSERT_EQ(f.first_bad.size(), 6u);
  EXPECT_EQ(f.first_bad[0], path + ":3: the conversation does not end with an assistant response");
  EXPECT_CONTAINS(f.first_bad[1], path + ":4: roles out of order: message 1 is assistant");
  EXPECT_EQ(f.first_bad[2],
            path + ":5: message 2 is a \"function_call\" turn: a tool call is a JSON object with \"name\" and \"arguments\"");
  EXPECT_CONTAINS(f.first_bad[3], path + ":6: message 2 has role \"robot\"");
  EXPECT_EQ(f.first_bad[4], path + ":7: message 2 has no string \"value\"");
  EXPECT_EQ(f.first_bad[5], path + ":8: invalid JSON");
}

TEST(SftRecordsTest, MessagesContentPartsWeightsAndTools) {
  TempDir tmp;
  const std::string path = tmp.write(
      "m.jsonl",
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "q"},)"
      R"( {"role": "assistant", "content": [{"type": "text", "value": "a"},)"
      R"( {"type": "text", "text": "b"}], "loss_weight": 0.5}, {"role": "tool", "content": "r"},)"
      R"( {"role": "assistant", "content": "c"}]}
{"messages": [{"role": "user", "content": [{"type": "image", "value": "x.png"}]}, {"role": "assistant", "content": "a"}]}
{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "loss_weight": -1}]}
{"messages": [{"role": "user", "content": "q"}, {"role": "system", "content": "late"}]}
{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": 7}]}
{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "loss_weight": 1e300}]}
)");
  const SftRecords r = read(path);
  EXPECT_EQ(r.files[0].format, "messages");
  ASSERT_EQ(r.conversations.size(), 1u);
  const auto& m = r.conversations[0].messages;
  ASSERT_EQ(m.size(), 5u);
  expect_message(m[0], Role::System, "S", 0.0f);
  expect_message(m[2], Role::Assistant, "ab", 0.5f);  // text parts joined without separator
  expect_message(m[3], Role::Observation, "r", 0.0f);
  expect_message(m[4], Role::Assistant, "c", 1.0f);
  const FileReport& f = r.files[0];
  ASSERT_EQ(f.bad, 5);
  EXPECT_EQ(f.first_bad[0], path +
                                ":2: message 1: content of type \"image\" is not supported "
                                "(text, reasoning and tool_call only)");
  EXPECT_EQ(f.first_bad[1], path + ":3: message 2 has a \"loss_weight\" that is not a number >= 0");
  EXPECT_EQ(f.first_bad[2], path + ":4: message 2 is a system message after the first turn");
  EXPECT_EQ(f.first_bad[3],
            path + ":5: message 2: \"content\" is a number, not a string or a list");
  // Issue 50, case 3: a weight a 32-bit float cannot hold would be inf, the loss NaN.
  EXPECT_EQ(f.first_bad[4], path + ":6: message 2 has a \"loss_weight\" of 1e+300, more than a 32-bit float holds (3.4e38)");
}

// Tool calls and definitions as LlamaFactory main's converters read them: a sharegpt function_call
// turn (one call or a list) and the record's tools string; v1 messages' tool_call parts. Each call
// and the tools keep their JSON's key order; what main's renderer would reject is skipped, named.
TEST(SftRecordsTest, ToolCallsAndDefinitions) {
  TempDir tmp;
  const std::string glaive = tmp.write(
      "g.jsonl",
      R"({"conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": )"
      R"("{\"name\": \"f\", \"arguments\": {\"z\": 1, \"a\": \"x\"}}"}, {"from": "observation", "value": "r"},)"
      R"( {"from": "gpt", "value": "a"}], "tools": "[{\"name\": \"f\", \"parameters\": {\"z\": {}, \"a\": {}}}]"}
{"conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": )"
      R"("[{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"arguments\": \"{}\"}]"},)"
      R"( {"from": "observation", "value": "r"}, {"from": "gpt", "value": "a"}]}
{"conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": "call f with 1"}]}
{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}], "tools": [1]}
{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}], "tools": "[{"}
)");
  const SftRecords g = read(glaive);
  ASSERT_EQ(g.conversations.size(), 2u);
  const Conversation& one = g.conversations[0];
  ASSERT_EQ(one.messages.size(), 4u);
  expect_message(one.messages[1], Role::Assistant, "", 1.0f);
  EXPECT_EQ(one.messages[1].tool_calls, std::vector<std::string>{R"({"name":"f","arguments":{"z":1,"a":"x"}})"});
  expect_message(one.messages[2], Role::Observation, "r", 0.0f);
  EXPECT_EQ(one.tools, R"([{"name":"f","parameters":{"z":{},"a":{}}}])");
  EXPECT_EQ(g.conversations[1].messages[1].tool_calls,
            (std::vector<std::string>{R"({"name":"f","arguments":{}})", R"({"name":"g","arguments":"{}"})"}));
  EXPECT_EQ(g.conversations[1].tools, "");
  ASSERT_EQ(g.files[0].bad, 3);
  EXPECT_EQ(g.files[0].first_bad[0], glaive + ":3: message 2 is a \"function_call\" turn: its tool call is not valid JSON");
  EXPECT_EQ(g.files[0].first_bad[1], glaive + ":4: field \"tools\" is an array, not a JSON string of tool definitions");
  EXPECT_EQ(g.files[0].first_bad[2], glaive + ":5: field \"tools\" is not valid JSON");

  const std::string v1 = tmp.write(
      "m.jsonl",
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": [{"type": "text", "value": "t"},)"
      R"( {"type": "tool_call", "value": "{\"name\": \"f\", \"arguments\": {\"b\": 2}}"}]},)"
      R"( {"role": "tool", "content": "r"}, {"role": "assistant", "content": "a"}], "tools": "{\"name\": \"f\"}"}
{"messages": [{"role": "user", "content": [{"type": "tool_call", "value": "{\"name\": \"f\", \"arguments\": {}}"}]},)"
      R"( {"role": "assistant", "content": "a"}]}
{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": [{"type": "tool_call", "value": "[]"}]}]}
)");
  const SftRecords m = read(v1);
  ASSERT_EQ(m.conversations.size(), 1u);
  expect_message(m.conversations[0].messages[1], Role::Assistant, "t", 1.0f);
  EXPECT_EQ(m.conversations[0].messages[1].tool_calls, std::vector<std::string>{R"({"name":"f","arguments":{"b":2}})"});
  EXPECT_EQ(m.conversations[0].tools, R"({"name":"f"})");
  ASSERT_EQ(m.files[0].bad, 2);
  EXPECT_EQ(m.files[0].first_bad[0], v1 + ":2: message 1 has tool calls, which only answers make");
  EXPECT_EQ(m.files[0].first_bad[1],
            v1 + ":3: message 2: a tool_call part: a tool call is a JSON object with \"name\" and \"arguments\"");
}

TEST(SftRecordsTest, FileLevelErrors) {
  TempDir tmp;
  const std::string all_bad = tmp.write("all_bad.jsonl", "{\"instruction\": \"q\"}\n[1]\n");
  std::string msg = error_of(all_bad);
  EXPECT_CONTAINS(msg, all_bad + ": none of its 2 records is usable as alpaca:");
  EXPECT_CONTAINS(msg, all_bad + ":1: no \"output\" field");
  EXPECT_CONTAINS(msg, all_bad + ":2: the record is an array, not a JSON object");

  const std::string unknown = tmp.write("u.jsonl", "{\"prompt\": \"q\", \"answer\": \"a\"}\n");
  msg = error_of(unknown);
  EXPECT_CONTAINS(msg, unknown +
                           ":1: cannot tell the dataset format from the first record "
                           "(fields \"answer\", \"prompt\")");
  EXPECT_CONTAINS(error_of(unknown, "yaml"), "unknown dataset_format \"yaml\"");
  EXPECT_CONTAINS(error_of(tmp.write("e.json", "")), "the dataset file holds no records");
  const std::string broken = tmp.write("b.json", "[{\"a\": 1},\n {\"b\": }]");
  EXPECT_CONTAINS(error_of(broken), broken + ":2: invalid JSON");
  EXPECT_CONTAINS(error_of(tmp.write("x.csv", "a,b")), "unsupported file type '.csv'");
  EXPECT_CONTAINS(error_of(tmp.dir() + "/missing.json"), "cannot read the dataset");
  EXPECT_CONTAINS(test::message_of<UsageError>([] { read_sft_records({}, RecordOptions{}); }),
                  "no dataset file");
  // A forced format applies to every record: alpaca records read as sharegpt are all bad.
  const std::string alpaca = tmp.write("a.jsonl", "{\"instruction\": \"q\", \"output\": \"a\"}\n");
  EXPECT_CONTAINS(error_of(alpaca, "sharegpt"), "no \"conversations\" list of messages");
}

}  // namespace
}  // namespace lft::data
