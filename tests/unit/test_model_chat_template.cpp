// A model's own chat template (template = "model"): where it is read from, and the examples
// LlamaFactory main's v1 makes with it (tests/e2e/chat_template_sft.py compares those with
// transformers on real templates and tokenizers).
#include <gtest/gtest.h>

#include "lft/data/jinja_sft.h"
#include "lft/data/model_chat_template.h"
#include "lft/data/sft_dataset.h"
#include "lft/runtime/error.h"
#include "test_util.h"

namespace lft::data {
namespace {

Message message(Role role, const std::string& text, float weight = 1.0f, const std::string& reasoning = "") {
  Message m;
  m.role = role;
  m.text = text;
  m.loss_weight = weight;
  m.reasoning = reasoning;
  return m;
}

std::string text_of(const ByteTokenizer& tok, const std::vector<std::int32_t>& ids, std::size_t from = 0) {
  return tok.decode(std::vector<std::int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end()));
}

TEST(ModelChatTemplate, CustomThenTheFolderFileThenTokenizerConfigThenChatml) {
  test::TempDir dir;
  dir.write("tokenizer_config.json",
            R"({"bos_token": {"content": "<s>", "special": true}, "eos_token": "</s>", "chat_template": "CONFIG"})");
  ModelChatTemplate t = read_model_chat_template(dir.path(""), "");
  EXPECT_EQ(t.text, "CONFIG");
  EXPECT_EQ(t.special_tokens["bos_token"], "<s>");
  EXPECT_EQ(t.special_tokens["eos_token"], "</s>");
  dir.write("chat_template.jinja", "FILE");
  EXPECT_EQ(read_model_chat_template(dir.path(""), "").text, "FILE");
  EXPECT_EQ(read_model_chat_template(dir.path(""), "CUSTOM").text, "CUSTOM");
  EXPECT_EQ(read_model_chat_template(dir.path(""), "CUSTOM").source, "custom_chat_template");

  test::TempDir listed;
  listed.write("tokenizer_config.json",
               R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  EXPECT_EQ(read_model_chat_template(listed.path(""), "").text, "D");
  test::TempDir none;
  none.write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  EXPECT_EQ(read_model_chat_template(none.path(""), "").text, chatml_fallback_template());
  test::TempDir bad;
  bad.write("tokenizer_config.json", R"({"chat_template": 3})");
  EXPECT_CONTAINS(test::message_of<UsageError>([&] { read_model_chat_template(bad.path(""), ""); }),
                  "chat_template is neither a string nor a list");
}

// One example per answer that trains, the earlier answers prompt; everything after the generation
// prompt trained with the answer's weight; cut at cutoff_len.
TEST(JinjaChatEncoder, OneExamplePerTrainedAnswerEverythingAfterThePromptTrained) {
  ModelChatTemplate chatml;
  chatml.text = chatml_fallback_template();
  chatml.source = "chatml";
  const JinjaChatEncoder enc(chatml);
  const ByteTokenizer tok;
  Conversation conv;
  conv.messages = {message(Role::System, "S", 0), message(Role::User, "q1", 0), message(Role::Assistant, "a1", 0.5f),
                   message(Role::User, "q2", 0), message(Role::Assistant, "a2", 0.0f), message(Role::User, "q3", 0),
                   message(Role::Assistant, "a3")};
  const std::vector<Conversation> prefixes = JinjaChatEncoder::supervised_prefixes(conv);
  ASSERT_EQ(prefixes.size(), 2u);  // a2 weighs 0: no example of its own
  EXPECT_EQ(prefixes[0].messages.size(), 3u);
  EXPECT_EQ(prefixes[1].messages.size(), 7u);
  const TokenizedExample first = enc.encode(prefixes[0], tok, 1024);
  const std::string prompt = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(text_of(tok, first.ids), prompt + "a1<|im_end|>\n");
  for (std::size_t i = 0; i < first.ids.size(); ++i) EXPECT_FLOAT_EQ(first.weights[i], i < prompt.size() ? 0.0f : 0.5f);
  const TokenizedExample last = enc.encode(prefixes[1], tok, 1024);
  const auto trained = static_cast<std::size_t>(std::count(last.weights.begin(), last.weights.end(), 1.0f));
  EXPECT_EQ(text_of(tok, last.ids, last.ids.size() - trained), "a3<|im_end|>\n");
  const TokenizedExample cut = enc.encode(prefixes[1], tok, 20);
  EXPECT_EQ(cut.ids.size(), 20u);
  EXPECT_TRUE(cut.truncated);
}

// enable_thinking follows the answer's reasoning; a prompt that is no prefix is refused.
TEST(JinjaChatEncoder, ThinkingFollowsTheReasoningAndAnUnstablePromptIsRefused) {
  ModelChatTemplate t;
  t.source = "think.jinja";
  t.text = "{% for m in messages %}[{{ m.role }}:{{ m.content }}{% if m.reasoning_content %}|{{ m.reasoning_content }}"
           "{% endif %}]{% endfor %}{% if add_generation_prompt %}<{{ enable_thinking }}>{% endif %}";
  const ByteTokenizer tok;
  Conversation conv;
  conv.messages = {message(Role::User, "q", 0), message(Role::Assistant, "a", 1.0f, "r")};
  EXPECT_CONTAINS(test::message_of<UsageError>([&] { JinjaChatEncoder(t).encode(conv, tok, 1024); }),
                  "think.jinja is not prefix-stable");
  t.text = "{% for m in messages %}[{{ m.role }}:{{ m.content }}{% if m.reasoning_content %}|{{ m.reasoning_content }}"
           "{% endif %}]{% endfor %}{% if add_generation_prompt %}[{% endif %}{{ enable_thinking }}";
  EXPECT_CONTAINS(test::message_of<UsageError>([&] { JinjaChatEncoder(t).encode(conv, tok, 1024); }),
                  "not prefix-stable");  // True after the prompt, True after the answer: no prefix
  t.text = "{% if enable_thinking %}T{% endif %}{% for m in messages %}[{{ m.role }}:{{ m.content }}"
           "{% if m.reasoning_content %}|{{ m.reasoning_content }}{% endif %}]{% endfor %}";
  const TokenizedExample ex = JinjaChatEncoder(t).encode(conv, tok, 1024);
  EXPECT_EQ(text_of(tok, ex.ids), "T[user:q][assistant:a|r]");
  conv.messages.back().reasoning.clear();
  EXPECT_EQ(text_of(tok, JinjaChatEncoder(t).encode(conv, tok, 1024).ids), "[user:q][assistant:a]");
  t.text = "{% for m in messages %}{{ raise_exception('no ' + m.role) }}{% endfor %}";
  EXPECT_CONTAINS(test::message_of<UsageError>([&] { JinjaChatEncoder(t).encode(conv, tok, 1024); }), "no user");
}

// What loading `path` with the built-in template qwen refuses it with.
std::string refusal_of_builtin_template(const std::string& path) {
  SftOptions o;
  o.template_name = "qwen";
  const ByteTokenizer tok;
  const SpecialTokens special{ByteTokenizer::kBos, ByteTokenizer::kEos, ByteTokenizer::kPad};
  return test::message_of<UsageError>([&] { load_sft_data({path}, o, tok, special); });
}

// Reasoning has a place only in a model's own template: a built-in one refuses it by name.
TEST(JinjaChatEncoder, BuiltInTemplatesRefuseReasoning) {
  test::TempDir dir;
  const std::string path = dir.write(
      "r.jsonl", R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": )"
                 R"([{"type": "reasoning", "value": "think"}, {"type": "text", "value": "a"}]}]})"
                 "\n");
  EXPECT_CONTAINS(refusal_of_builtin_template(path), "has an answer with reasoning, which template qwen has no place for");
  SftOptions o;
  const ByteTokenizer tok;
  const SpecialTokens special{ByteTokenizer::kBos, ByteTokenizer::kEos, ByteTokenizer::kPad};
  ModelChatTemplate chatml;
  chatml.text = chatml_fallback_template();
  chatml.source = "chatml";
  o.template_name = kModelTemplate;
  o.jinja = std::make_shared<const JinjaChatEncoder>(chatml);
  const SftData d = load_sft_data({path}, o, tok, special);
  EXPECT_EQ(d.train.num_sequences(), 1);
}

// Tool calls and definitions have a place only in a model's own template, which renders them as
// transformers' apply_chat_template does (tests/e2e/chat_template_sft.py compares real templates).
TEST(JinjaChatEncoder, ToolCallsAndToolsReachTheModelsTemplateOnly) {
  test::TempDir dir;
  const std::string path = dir.write(
      "t.jsonl", R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": )"
                 R"([{"type": "tool_call", "value": "{\"name\": \"f\", \"arguments\": {\"x\": \"<s>\", \"n\": 1}}"}]},)"
                 R"( {"role": "tool", "content": "r"}, {"role": "assistant", "content": "a"}],)"
                 R"( "tools": "[{\"name\": \"f\", \"description\": \"é\"}]"})"
                 "\n");
  EXPECT_CONTAINS(refusal_of_builtin_template(path),
                  "has tool calls or tool definitions, which template qwen has no place for");
  const ByteTokenizer tok;
  ModelChatTemplate t;
  t.source = "tools.jinja";
  t.text = "{{ tools | tojson }}{% for m in messages %}[{{ m.role }}:{{ m.content }}{% for c in m.tool_calls %}"
           "<{{ c.type }} {{ c.function.name }} {{ c.function.arguments | tojson }}>{% endfor %}]{% endfor %}";
  const Conversation conv = read_sft_records({path}, RecordOptions{}).conversations[0];
  const std::vector<Conversation> prefixes = JinjaChatEncoder::supervised_prefixes(conv);
  ASSERT_EQ(prefixes.size(), 2u);
  EXPECT_EQ(text_of(tok, JinjaChatEncoder(t).encode(prefixes[1], tok, 1024).ids),
            R"([{"name": "f", "description": "é"}][user:q][assistant:<function f {"x": "<s>", "n": 1}>][tool:r][assistant:a])");
}

}  // namespace
}  // namespace lft::data
