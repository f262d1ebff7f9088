// LlamaFactory v1's templates (v1/plugins/model_plugins/templates/{qwen3,qwen3_nothink}.py and
// chatml in v1/core/utils/rendering.py): each message is one text segment, encoded on its own,
// every token of it weighted by the message's loss_weight (by default 1 for the assistant, 0 for
// the others), the assistant's header and end-of-turn included.
#include "lft/data/v1_render.h"

#include <algorithm>
#include <stdexcept>

namespace lft::data {
namespace {

float weight_of(const Message& m) {
  if (m.weight_given) return m.loss_weight;
  return m.role == Role::Assistant ? 1.0f : 0.0f;
}

// v1's role names: the classic trainer's, with "tool" for an observation.
std::string role_word(Role role) { return role == Role::Observation ? "tool" : role_name(role); }

// The index of the last user message (v1's _get_last_query_index, with no wrapped tool responses
// since lftrain's user messages are plain text).
std::size_t last_query(const std::vector<Message>& m) {
  for (std::size_t i = m.size(); i-- > 0;)
    if (m[i].role == Role::User) return i;
  return m.size() - 1;
}

std::vector<V1Segment> chatml(const Conversation& conv) {
  std::vector<V1Segment> out;
  for (const Message& m : conv.messages)
    out.push_back({"<|im_start|>" + role_word(m.role) + "\n" + m.text + "<|im_end|>\n", weight_of(m)});
  return out;
}

// qwen3 and qwen3_nothink: tool responses merge into one user turn; with `think`, an assistant
// message after the last query that ends the conversation gets an empty <think> block (lftrain's
// records carry no reasoning text).
std::vector<V1Segment> qwen3(const Conversation& conv, bool think) {
  const std::vector<Message>& m = conv.messages;
  std::vector<V1Segment> out;
  const std::size_t query = last_query(m);
  for (std::size_t i = 0; i < m.size(); ++i) {
    const Message& msg = m[i];
    std::string text;
    if (msg.role == Role::System || msg.role == Role::User) {
      text = "<|im_start|>" + role_word(msg.role) + "\n" + msg.text + "<|im_end|>\n";
    } else if (msg.role == Role::Assistant) {
      std::string body = msg.text;
      if (think && i > query && i + 1 == m.size()) {
        body.erase(0, std::min(body.find_first_not_of('\n'), body.size()));
        body = "<think>\n\n</think>\n\n" + body;
      }
      text = "<|im_start|>assistant\n" + body + "<|im_end|>\n";
    } else {
      if (i == 0 || m[i - 1].role != Role::Observation) text = "<|im_start|>user";
      text += "\n<tool_response>\n" + msg.text + "\n</tool_response>";
      if (i + 1 == m.size() || m[i + 1].role != Role::Observation) text += "<|im_end|>\n";
    }
    out.push_back({std::move(text), weight_of(msg)});
  }
  return out;
}

}  // namespace

bool is_v1_template(const std::string& name) {
  return name == "qwen3_nothink" || name == "qwen3" || name == "chatml";
}

std::vector<V1Segment> v1_segments(const std::string& name, const Conversation& conv) {
  if (name == "chatml") return chatml(conv);
  if (name == "qwen3") return qwen3(conv, true);
  if (name == "qwen3_nothink") return qwen3(conv, false);
  throw std::invalid_argument("v1_segments: \"" + name + "\" is not a LlamaFactory v1 template");
}

TokenizedExample v1_encode(const std::string& name, const Conversation& conv, const Tokenizer& tok,
                           std::int64_t cutoff_len) {
  TokenizedExample ex;
  for (const V1Segment& segment : v1_segments(name, conv)) {
    const std::vector<std::int32_t> ids = tok.encode(segment.text);
    ex.ids.insert(ex.ids.end(), ids.begin(), ids.end());
    ex.weights.insert(ex.weights.end(), ids.size(), segment.weight);
  }
  // v1's pad_and_truncate keeps the first cutoff_len tokens.
  if (static_cast<std::int64_t>(ex.ids.size()) > cutoff_len) {
    ex.ids.resize(static_cast<std::size_t>(cutoff_len));
    ex.weights.resize(static_cast<std::size_t>(cutoff_len));
    ex.truncated = true;
  }
  return ex;
}

}  // namespace lft::data
