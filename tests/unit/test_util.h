// Helpers shared by the unit tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lft/model/model_config.h"

// Passes when `needle` occurs in `haystack`; prints both when it does not.
#define EXPECT_CONTAINS(haystack, needle)                                                   \
  do {                                                                                      \
    const std::string lft_h_ = (haystack);                                                  \
    const std::string lft_n_ = (needle);                                                    \
    EXPECT_NE(lft_h_.find(lft_n_), std::string::npos) << "missing: " << lft_n_ << "\nin:\n" \
                                                      << lft_h_;                            \
  } while (0)

namespace lft::test {

inline bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The shared demo data folder holding `probe_file`: $LFT_SHARED_DATA, else ../shared/data next
// to this checkout, else ../shared/data from the working directory, else /work/shared/data; ""
// when none holds it.
inline std::string shared_data_dir(const std::string& probe_file) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("LFT_SHARED_DATA")) candidates.emplace_back(env);
  std::string here = __FILE__;  // <root>/tests/unit/test_util.h
  for (int up = 0; up < 3; ++up) {
    const std::size_t slash = here.find_last_of('/');
    here = slash == std::string::npos ? "." : here.substr(0, slash);
  }
  candidates.push_back(here + "/../shared/data");
  candidates.emplace_back("../shared/data");
  candidates.emplace_back("/work/shared/data");
  for (const std::string& dir : candidates)
    if (is_regular_file(dir + "/" + probe_file)) return dir;
  return "";
}

// A private temporary folder, removed with its files at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/lft_test_XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);  // the files written, and any the test made in it
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string write(const std::string& name, const std::string& content) const {
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  // A path in the folder (removed with it at the end, whether or not the test creates it).
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};


// The message of the `Error` that `action` throws, or "" and a test failure.
template <class Error, class Action>
std::string message_of(Action&& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected another exception type, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected an exception; none was thrown";
  return "";
}

}  // namespace lft::test

namespace lft::test {

// The tiny Llama of the model unit tests: vocab 37, hidden 32, MLP 40, 4 heads over 2 kv heads.
inline model::ModelConfig tiny_llama(std::int64_t layers = 2) {
  model::ModelConfig c;
  c.vocab_size = 37;
  c.hidden_size = 32;
  c.intermediate_size = 40;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 64;
  return c;
}

}  // namespace lft::test
