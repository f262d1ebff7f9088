// The names a list key gives (lora_target, dataset, ...): each element of the list also split at
// commas, as LlamaFactory's "q_proj,v_proj" and "identity,alpaca_en_demo", blanks trimmed, empty
// names dropped. The decoders of such keys share it.
#pragma once

#include <string>
#include <vector>

namespace lft::config {

inline std::vector<std::string> list_names(const std::vector<std::string>& elements) {
  std::vector<std::string> out;
  for (const std::string& value : elements) {
    std::size_t start = 0;
    while (start <= value.size()) {
      std::size_t end = value.find(',', start);
      if (end == std::string::npos) end = value.size();
      std::string name = value.substr(start, end - start);
      name.erase(0, name.find_first_not_of(" \t"));
      name.erase(name.find_last_not_of(" \t") + 1);
      if (!name.empty()) out.push_back(name);
      start = end + 1;
    }
  }
  return out;
}

}  // namespace lft::config
