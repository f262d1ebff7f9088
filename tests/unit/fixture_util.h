// What the tests against transformers' fixtures share: where a fixture lies, how far two tensors
// are apart, and the check that a model's parameters are a checkpoint's tensors, name for name.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include <ATen/ATen.h>

#include "lft/model/causal_lm.h"

namespace lft::model {

// tests/fixtures/<name> (made by tools/make-model-fixture.py or make-moe-fixture.py).
inline std::string fixture_dir(const std::string& name) {
  const std::string here = __FILE__;
  return here.substr(0, here.rfind('/')) + "/../fixtures/" + name;
}

inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// Every tensor of `weights` is a parameter of `model` of the same shape, and every parameter one
// of them.
inline void expect_same_names_and_shapes(const std::map<std::string, at::Tensor>& weights, const CausalLM& model) {
  const auto params = model.named_parameters();
  std::set<std::string> hf_names, cpp_names;
  for (const auto& [n, t] : weights) {
    hf_names.insert(n);
    const at::Tensor* p = params.find(n);
    ASSERT_NE(p, nullptr) << "HF tensor " << n << " has no C++ parameter";
    EXPECT_EQ(p->sizes(), t.sizes()) << n;
  }
  for (const auto& p : params) cpp_names.insert(p.key());
  EXPECT_EQ(hf_names, cpp_names);
}

}  // namespace lft::model
