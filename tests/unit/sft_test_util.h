// Helpers for the SFT data tests: the shared demo data folder, temporary files, and the bytes a
// ByteTokenizer example trains on.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lft/data/tokenizer.h"
#include "test_util.h"

namespace lft::test {

inline std::string sft_shared_data_dir() { return shared_data_dir("v1_sft_demo.jsonl"); }

#define LFT_REQUIRE_SFT_DATA(dir)                                           \
  const std::string dir = ::lft::test::sft_shared_data_dir();               \
  if (dir.empty())                                                          \
  GTEST_SKIP() << "shared demo data not found (set LFT_SHARED_DATA to the " \
                  "folder holding v1_sft_demo.jsonl)"

// The ByteTokenizer ids as text: bytes as themselves, BOS/EOS/PAD as <s>, </s>, <pad>.
inline std::string byte_text(const std::vector<std::int32_t>& ids) {
  std::string out;
  for (const std::int32_t id : ids) {
    if (id == data::ByteTokenizer::kBos) {
      out += "<s>";
    } else if (id == data::ByteTokenizer::kEos) {
      out += "</s>";
    } else if (id == data::ByteTokenizer::kPad) {
      out += "<pad>";
    } else {
      out += static_cast<char>(id);
    }
  }
  return out;
}

// The ids whose weight is > 0, as byte_text.
inline std::string trained_text(const std::vector<std::int32_t>& ids,
                                const std::vector<float>& weights) {
  std::vector<std::int32_t> kept;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (weights[i] > 0.0f) kept.push_back(ids[i]);
  }
  return byte_text(kept);
}

}  // namespace lft::test
