// The chat templates on hand-checked examples: with ByteTokenizer every byte is a token, so the
// trained tokens of an encoded conversation are exactly the bytes shown between [[ and ]].
// The renderings of LlamaFactory's test conversation match tests/data/test_template.py there.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "lft/data/chat_template.h"
#include "lft/runtime/error.h"
#include "sft_test_util.h"
#include "test_util.h"

namespace lft::data {
namespace {

const SpecialTokens kByteSpecial{ByteTokenizer::kBos, ByteTokenizer::kEos, ByteTokenizer::kPad};

// LlamaFactory's MESSAGES of tests/data/test_template.py.
Conversation lf_messages(const std::string& system = "") {
  Conversation c;
  if (!system.empty()) c.messages.push_back({Role::System, system, 0.0f});
  c.messages.push_back({Role::User, "How are you", 0.0f});
  c.messages.push_back({Role::Assistant, "I am fine!", 1.0f});
  c.messages.push_back({Role::User, "\xE4\xBD\xA0\xE5\xA5\xBD", 0.0f});  // 你好
  c.messages.push_back({Role::Assistant,
                        "\xE5\xBE\x88\xE9\xAB\x98\xE5\x85\xB4\xE8\xAE\xA4\xE8\xAF\x86\xE4\xBD\xA0"
                        "\xEF\xBC\x81",  // 很高兴认识你！
                        1.0f});
  return c;
}
const std::string kHello = "\xE4\xBD\xA0\xE5\xA5\xBD";
const std::string kGlad =
    "\xE5\xBE\x88\xE9\xAB\x98\xE5\x85\xB4\xE8\xAE\xA4\xE8\xAF\x86\xE4\xBD\xA0\xEF\xBC\x81";

// The encoded conversation as text, trained runs in [[ ]]; checks every trained token has the
// weight of its turn.
std::string masked(const std::string& name, const Conversation& c,
                   const SpecialTokens& sp = kByteSpecial) {
  const ByteTokenizer tok;
  std::string out;
  for (const EncodedTurn& turn : ChatTemplate(name).encode(c, tok, sp)) {
    out += test::byte_text(turn.source);
    if (turn.weight > 0.0f) {
      out += "[[" + test::byte_text(turn.target) + "]]";
    } else {
      out += test::byte_text(turn.target);
    }
  }
  return out;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  if (s.rfind(prefix, 0) == 0) return true;
  ADD_FAILURE() << "\"" << s << "\" does not start with \"" << prefix << "\"";
  return false;
}

TEST(ChatTemplateTest, Llama3MasksEachAssistantTurnWithItsEot) {
  EXPECT_EQ(masked("llama3", lf_messages()),
            "<s><|start_header_id|>user<|end_header_id|>\n\nHow are you<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n[[I am fine!<|eot_id|>]]"
            "<|start_header_id|>user<|end_header_id|>\n\n" +
                kHello +
                "<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n[[" +
                kGlad + "<|eot_id|>]]");
  EXPECT_TRUE(starts_with(masked("llama3", lf_messages("S")),
                          "<s><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
                          "<|start_header_id|>user<|end_header_id|>\n\nHow are you"));
}

TEST(ChatTemplateTest, QwenUsesItsDefaultSystemAndTrainsTheTrailingNewline) {
  const std::string sys =
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
      "assistant.<|im_end|>\n";
  const std::string rest =
      "<|im_start|>user\nHow are you<|im_end|>\n<|im_start|>assistant\n[[I am fine!<|im_end|>\n]]"
      "<|im_start|>user\n" +
      kHello + "<|im_end|>\n<|im_start|>assistant\n[[" + kGlad + "<|im_end|>\n]]";
  EXPECT_EQ(masked("qwen", lf_messages()), sys + rest);
  EXPECT_EQ(masked("qwen", lf_messages("Mine.")), "<|im_start|>system\nMine.<|im_end|>\n" + rest);
}

TEST(ChatTemplateTest, MistralPutsTheSystemInTheFirstUserTurn) {
  EXPECT_EQ(masked("mistral", lf_messages("S")),
            "<s>[INST] S\n\nHow are you[/INST][[ I am fine!</s>]][INST] " + kHello + "[/INST][[ " +
                kGlad + "</s>]]");
  EXPECT_TRUE(starts_with(masked("mistral", lf_messages()), "<s>[INST] How are you[/INST][["));
}

TEST(ChatTemplateTest, DefaultTemplate) {
  EXPECT_EQ(masked("default", lf_messages("S")),
            "System: S</s>\nHuman: How are you</s>\nAssistant:[[I am fine!</s>\n]]Human: " +
                kHello + "</s>\nAssistant:[[" + kGlad + "</s>\n]]");
}

TEST(ChatTemplateTest, RenderMatchesLlamaFactoryStrings) {
  const std::string llama3 =
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHow are you<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nI am fine!<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\n" +
      kHello +
      "<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n" +
      kGlad + "<|eot_id|>";
  EXPECT_EQ(ChatTemplate("llama3").render(lf_messages(), "<|begin_of_text|>", "<|eot_id|>"),
            llama3);
  EXPECT_EQ(
      ChatTemplate("mistral").render(lf_messages()),
      "<s>[INST] How are you[/INST] I am fine!</s>[INST] " + kHello + "[/INST] " + kGlad + "</s>");
}

TEST(ChatTemplateTest, LossWeightPerAssistantTurn) {
  Conversation c = lf_messages();
  c.messages[1].loss_weight = 0.0f;
  c.messages[3].loss_weight = 0.25f;
  const ByteTokenizer tok;
  const auto turns = ChatTemplate("llama3").encode(c, tok, kByteSpecial);
  ASSERT_EQ(turns.size(), 2u);
  EXPECT_FLOAT_EQ(turns[0].weight, 0.0f);
  EXPECT_FLOAT_EQ(turns[1].weight, 0.25f);
  EXPECT_EQ(test::byte_text(turns[1].target), kGlad + "<|eot_id|>");
}

TEST(ChatTemplateTest, ObservationTurns) {
  Conversation c;
  c.messages = {{Role::User, "q", 0.0f},
                {Role::Assistant, "a", 1.0f},
                {Role::Observation, "r", 0.0f},
                {Role::Assistant, "b", 1.0f}};
  EXPECT_EQ(masked("llama3", c).substr(masked("llama3", c).find("[[a")),
            "[[a<|eot_id|>]]<|start_header_id|>ipython<|end_header_id|>\n\nr<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n[[b<|eot_id|>]]");
  EXPECT_EQ(masked("default", c),
            "Human: q</s>\nAssistant:[[a</s>\n]]Human: r</s>\nAssistant:[[b</s>\n]]");
}

TEST(ChatTemplateTest, MissingBosIsSkippedMissingEosIsAnError) {
  const SpecialTokens no_bos{-1, ByteTokenizer::kEos, ByteTokenizer::kPad};
  EXPECT_TRUE(starts_with(masked("llama3", lf_messages(), no_bos), "<|start_header_id|>user"));
  const SpecialTokens no_eos{ByteTokenizer::kBos, -1, ByteTokenizer::kPad};
  EXPECT_CONTAINS(test::message_of<UsageError>([&] { masked("mistral", lf_messages(), no_eos); }),
                  "template \"mistral\" ends turns with EOS");
}

// Records every encode call: each text slot is encoded on its own, as LlamaFactory does.
class RecordingTokenizer final : public Tokenizer {
 public:
  std::int64_t vocab_size() const override { return 400; }
  std::int32_t bos_id() const override { return 256; }
  std::int32_t eos_id() const override { return 257; }
  std::int32_t pad_id() const override { return -1; }
  std::vector<std::int32_t> encode(const std::string& text) const override {
    calls.push_back(text);
    return ByteTokenizer().encode(text);
  }
  std::string decode(const std::vector<std::int32_t>& ids) const override {
    return ByteTokenizer().decode(ids);
  }
  std::string name() const override { return "recording"; }
  mutable std::vector<std::string> calls;
};

TEST(ChatTemplateTest, EachTextSlotIsEncodedSeparately) {
  RecordingTokenizer tok;
  Conversation c;
  c.messages = {{Role::User, "q", 0.0f}, {Role::Assistant, "a", 1.0f}};
  ChatTemplate("default").encode(c, tok, kByteSpecial);
  EXPECT_EQ(tok.calls, (std::vector<std::string>{"Human: q", "\nAssistant:", "a", "\n"}));
  tok.calls.clear();
  ChatTemplate("llama3").encode(c, tok, kByteSpecial);
  EXPECT_EQ(tok.calls,
            (std::vector<std::string>{"<|start_header_id|>user<|end_header_id|>\n\nq<|eot_id|>"
                                      "<|start_header_id|>assistant<|end_header_id|>\n\n",
                                      "a<|eot_id|>"}));
}

TEST(ChatTemplateTest, ResolveSpecialTokens) {
  const RecordingTokenizer tok;  // no PAD
  const std::map<std::string, std::int32_t> vocab{
      {"<|start_header_id|>", 300}, {"<|end_header_id|>", 301}, {"<|eot_id|>", 302}};
  const TokenIdFn token_id = [&](const std::string& s) {
    const auto it = vocab.find(s);
    return it == vocab.end() ? -1 : it->second;
  };
  const SpecialTokens l3 = ChatTemplate("llama3").resolve_special_tokens(tok, token_id);
  EXPECT_EQ(l3.bos, 256);
  EXPECT_EQ(l3.eos, 302);  // replace_eos: the first stop word
  EXPECT_EQ(l3.pad, 302);  // no PAD: pad with EOS
  const SpecialTokens m = ChatTemplate("mistral").resolve_special_tokens(tok, token_id);
  EXPECT_EQ(m.eos, 257);
  EXPECT_EQ(m.pad, 257);
  const std::string msg = test::message_of<UsageError>(
      [&] { ChatTemplate("qwen").resolve_special_tokens(tok, token_id); });
  EXPECT_CONTAINS(msg, "template \"qwen\" with the recording tokenizer");
  EXPECT_CONTAINS(msg, "no token \"<|im_start|>\"");
  const SpecialTokens bytes = ChatTemplate("llama3").resolve_special_tokens(ByteTokenizer(), {});
  EXPECT_EQ(bytes.bos, ByteTokenizer::kBos);
  EXPECT_EQ(bytes.eos, ByteTokenizer::kEos);
  EXPECT_EQ(bytes.pad, ByteTokenizer::kPad);
}

TEST(ChatTemplateTest, UnknownNameAndBadConversations) {
  EXPECT_CONTAINS(test::message_of<UsageError>([] { ChatTemplate("llama2"); }),
                  "unknown template \"llama2\"; this build has llama3, qwen, mistral, default");
  const ByteTokenizer tok;
  const ChatTemplate t("default");
  Conversation c;
  EXPECT_THROW(t.encode(c, tok, kByteSpecial), std::invalid_argument);
  c.messages = {{Role::Assistant, "a", 1.0f}, {Role::User, "q", 0.0f}};
  EXPECT_THROW(t.encode(c, tok, kByteSpecial), std::invalid_argument);
  c.messages = {{Role::System, "s", 0.0f}, {Role::User, "q", 0.0f}};
  EXPECT_THROW(t.encode(c, tok, kByteSpecial), std::invalid_argument);
}

}  // namespace
}  // namespace lft::data
