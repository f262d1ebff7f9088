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

namespace lft::test {

inline bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// $LFT_SHARED_DATA, else ../shared/data next to this checkout, else /work/shared/data; "" when
// none holds the demo files.
inline std::string sft_shared_data_dir() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("LFT_SHARED_DATA")) candidates.emplace_back(env);
  std::string here = __FILE__;  // <root>/tests/unit/sft_test_util.h
  for (int up = 0; up < 3; ++up) {
    const std::size_t slash = here.find_last_of('/');
    here = slash == std::string::npos ? "." : here.substr(0, slash);
  }
  candidates.push_back(here + "/../shared/data");
  candidates.emplace_back("../shared/data");
  candidates.emplace_back("/work/shared/data");
  for (const std::string& dir : candidates) {
    if (is_regular_file(dir + "/v1_sft_demo.jsonl")) return dir;
  }
  return "";
}

#define LFT_REQUIRE_SFT_DATA(dir)                                           \
  const std::string dir = ::lft::test::sft_shared_data_dir();               \
  if (dir.empty())                                                          \
  GTEST_SKIP() << "shared demo data not found (set LFT_SHARED_DATA to the " \
                  "folder holding v1_sft_demo.jsonl)"

// A private temporary folder, removed with its files at the end of the test.
class SftTempDir {
 public:
  SftTempDir() {
    std::string tmpl = "/tmp/lft_test_sft_XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
  }
  ~SftTempDir() {
    for (const std::string& f : files_) ::unlink(f.c_str());
    ::rmdir(dir_.c_str());
  }
  SftTempDir(const SftTempDir&) = delete;
  SftTempDir& operator=(const SftTempDir&) = delete;

  std::string write(const std::string& name, const std::string& content) {
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  // A path in the folder, removed at the end (whether or not the test creates it).
  std::string path(const std::string& name) {
    files_.push_back(dir_ + "/" + name);
    return files_.back();
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::string> files_;
};

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
