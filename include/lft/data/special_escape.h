// LlamaFactory main's special-token escaping in message text (v1 rendering, escape.py: a crafted
// dataset must not inject role markers through text that merely spells a control token): before
// the model's own chat template renders a conversation, every special token's text (a token marked
// special, two characters or longer, the longest first) that appears in a message's text or
// reasoning gets U+200B (a zero-width space) after its first character, so it is encoded as plain
// text. A no-op for text without such strings. If the tokenizer still finds a special token in the
// result (a normalizer that removes the zero-width space), the example is refused, as v1 refuses it.
#pragma once

#include <string>
#include <vector>

#include "lft/data/tokenizer.h"

namespace lft::data {

class SpecialTokenEscaper {
 public:
  explicit SpecialTokenEscaper(const Tokenizer& tok);
  // `text` with every special token's text broken; throws lft::UsageError when the tokenizer still
  // encodes a special token in it.
  std::string escape(const std::string& text) const;

 private:
  const Tokenizer& tok_;
  std::vector<std::string> specials_;  // longest first (in characters), then by id
  std::vector<std::int32_t> special_ids_;
};

}  // namespace lft::data
