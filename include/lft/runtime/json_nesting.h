// nlohmann::json parses and destroys values of any depth without recursion, but copying or
// printing one recurses per level: a file of arrays nested 100,000 deep overflowed the stack.
// Every reader of a user's JSON file checks the nesting first, in one pass over the text.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace lft {

constexpr std::size_t kMaxJsonNesting = 256;

// "" when `text` nests arrays and objects at most kMaxJsonNesting deep (outside strings); else why,
// with the byte offset where it goes deeper.
std::string json_too_deep(std::string_view text);

}  // namespace lft
