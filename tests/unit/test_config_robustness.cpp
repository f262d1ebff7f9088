// The config reader under hostile input: huge files parse in linear time, and damaged files end in
// a ConfigError (never a crash or another exception).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "lft/config/config.h"

namespace lft::config {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream all;
  all << in.rdbuf();
  return all.str();
}

// The bundled example, with its data path made absolute.
std::string example_config() {
  const std::string here = __FILE__;
  const std::string root = here.substr(0, here.rfind('/')) + "/../..";
  std::string text = read_text(root + "/inputs/run.toml");
  const std::string data = "\"inputs/data/";
  text.replace(text.find(data) + 1, 0, root + "/");
  return text;
}

// Seconds to parse a file of `keys` unknown top-level keys (an error naming the first).
double seconds_to_parse(int keys) {
  std::string text;
  for (int i = 0; i < keys; ++i) text += "k" + std::to_string(i) + " = " + std::to_string(i) + "\n";
  const auto start = std::chrono::steady_clock::now();
  try {
    parse_config(text, "big.toml");
    ADD_FAILURE() << "unknown keys were accepted";
  } catch (const ConfigError&) {
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(ConfigRobustness, ParsingTimeGrowsLinearlyWithTheKeys) {
  seconds_to_parse(5000);  // warm-up
  const double small = seconds_to_parse(20000), large = seconds_to_parse(80000);
  // Linear: about 4x; the quadratic line lookup of toml11 made it about 16x.
  EXPECT_LT(large / small, 9.0) << small << " s for 20k keys, " << large << " s for 80k";
}

TEST(ConfigRobustness, ByteFlipsEndInAConfigError) {
  const std::string good = example_config();
  ASSERT_NO_THROW(parse_config(good, "run.toml"));
  std::mt19937 gen(20261201);
  int errors = 0, accepted = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string text = good;
    const int flips = 1 + static_cast<int>(gen() % 3);
    for (int k = 0; k < flips; ++k) {
      const std::size_t at = gen() % text.size();
      text[at] = static_cast<char>(gen() % 256);
    }
    try {
      parse_config(text, "run.toml");
      ++accepted;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("run.toml"), std::string::npos) << e.what();
      ++errors;
    }
    // Any other exception escapes and fails the test.
  }
  EXPECT_GT(errors, 0);
  std::printf("config byte-flip fuzz: %d errors, %d still valid\n", errors, accepted);
}

}  // namespace
}  // namespace lft::config
