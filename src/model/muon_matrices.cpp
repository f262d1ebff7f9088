#include "lft/model/muon_matrices.h"

namespace lft::model {
namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

bool muon_matrix(const std::string& name, const std::vector<std::int64_t>& shape, bool adapters) {
  return shape.size() == 2 && !contains(name, "embed") && !contains(name, "lm_head") && !contains(name, ".experts.") &&
         (adapters || !contains(name, "lora"));
}

double muon_matrix_elements(const CausalLM& model, bool adapters) {
  double n = 0;
  for (const auto& item : model.named_parameters())
    if (item.value().requires_grad() && muon_matrix(item.key(), item.value().sizes().vec(), adapters))
      n += static_cast<double>(item.value().numel());
  return n;
}

}  // namespace lft::model
