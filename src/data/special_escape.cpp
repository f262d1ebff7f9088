#include "lft/data/special_escape.h"

#include <algorithm>

#include "lft/runtime/error.h"

namespace lft::data {
namespace {

// Characters (code points) of UTF-8 text: the bytes that do not continue one.
std::size_t characters(const std::string& s) {
  return static_cast<std::size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// The bytes of the first character.
std::size_t first_character_bytes(const std::string& s) {
  std::size_t n = 1;
  while (n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) ++n;
  return n;
}

const char* const kZeroWidthSpace = "\xE2\x80\x8B";  // U+200B

}  // namespace

SpecialTokenEscaper::SpecialTokenEscaper(const Tokenizer& tok) : tok_(tok) {
  for (const auto& [text, id] : tok.special_tokens()) {
    special_ids_.push_back(id);
    if (characters(text) >= 2) specials_.push_back(text);
  }
  // Python's sorted(key=len, reverse=True) over the id order: stable, longest first.
  std::stable_sort(specials_.begin(), specials_.end(),
                   [](const std::string& a, const std::string& b) { return characters(a) > characters(b); });
  std::sort(special_ids_.begin(), special_ids_.end());
}

std::string SpecialTokenEscaper::escape(const std::string& text) const {
  const bool any = std::any_of(specials_.begin(), specials_.end(),
                               [&](const std::string& sp) { return text.find(sp) != std::string::npos; });
  if (!any) return text;
  std::string out = text;
  for (const std::string& sp : specials_) {
    // Every occurrence, left to right, as str.replace.
    const std::size_t first = first_character_bytes(sp);
    const std::string broken = sp.substr(0, first) + kZeroWidthSpace + sp.substr(first);
    std::string replaced;
    std::size_t from = 0;
    for (std::size_t at = out.find(sp); at != std::string::npos; at = out.find(sp, from)) {
      replaced.append(out, from, at - from).append(broken);
      from = at + sp.size();
    }
    out = replaced.append(out, from, std::string::npos);
  }
  for (const std::int32_t id : tok_.encode(out))
    if (std::binary_search(special_ids_.begin(), special_ids_.end(), id))
      throw UsageError("a message's text spells a special token of tokenizer '" + tok_.name() +
                       "' that escaping cannot break (its normalizer removes the zero-width space inserted after "
                       "the first character), so the text would inject a control token\n  hint: remove the "
                       "literal control token from the data (LlamaFactory v1 refuses such text too)");
  return out;
}

}  // namespace lft::data
