#include "lft/data/tokenizer.h"

#include <stdexcept>

namespace lft::data {

std::vector<std::int32_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<std::int32_t> ids;
  ids.reserve(text.size());
  for (const char c : text) ids.push_back(static_cast<std::int32_t>(static_cast<unsigned char>(c)));
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (const std::int32_t id : ids) {
    if (id >= 0 && id < 256) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
    } else if (id == kBos || id == kEos || id == kPad) {
      continue;
    } else {
      throw std::out_of_range("ByteTokenizer::decode: id " + std::to_string(id) +
                              " is outside the vocabulary [0, " + std::to_string(kVocabSize) +
                              ")");
    }
  }
  return text;
}

}  // namespace lft::data
