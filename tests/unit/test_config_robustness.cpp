// The config reader under hostile input: huge files parse in linear time, and damaged files end in
// a ConfigError (never a crash or another exception).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "lft/config/config.h"
#include "test_util.h"

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

// Values of any length, nesting of any depth and bytes that are not text: a ConfigError or a
// value, never a crash (std::regex's recursion per character overflowed the stack on a YAML
// scalar of ~50,000 characters; toml11 recursed per nesting level).
TEST(ConfigRobustness, LongDeepAndBinaryValuesEndInAConfigError) {
  auto error = [](const std::string& text, const std::string& file) {
    return test::message_of<ConfigError>([&] { parse_config(text, file); });
  };
  const std::string digits(200000, '7');
  EXPECT_CONTAINS(error("seed: " + digits + "\n", "run.yaml"), "is outside the 64-bit range");
  EXPECT_CONTAINS(error("seed = " + digits + "\n", "run.toml"), "run.toml");
  EXPECT_CONTAINS(error("seed: 1." + digits + "e" + digits + "\n", "run.yaml"), "run.yaml");
  EXPECT_CONTAINS(error("output_dir: " + std::string(200000, 'x') + "\n", "run.yaml"), "run.yaml");
  EXPECT_CONTAINS(error("output_dir = \"" + std::string(200000, 'x') + "\"\n", "run.toml"), "run.toml");
  const int depth = 100000;
  std::string m = error("x = " + std::string(depth, '[') + std::string(depth, ']') + "\n", "run.toml");
  EXPECT_CONTAINS(m, "run.toml:1:133: values nested more than 128 levels deep");
  std::string inline_tables = "seed = 1\nx = ";
  for (int i = 0; i < depth; ++i) inline_tables += "{a = ";
  inline_tables += "1" + std::string(depth, '}') + "\n";
  EXPECT_CONTAINS(error(inline_tables, "run.toml"), "run.toml:2:");
  // Brackets inside strings and comments are not nesting.
  EXPECT_CONTAINS(error("# " + std::string(depth, '[') + "\nx = \"" + std::string(depth, '{') + "\"\n", "run.toml"),
                  "unknown key 'x'");
  EXPECT_CONTAINS(error("x: " + std::string(depth, '[') + std::string(depth, ']') + "\n", "run.yaml"), "run.yaml");
  std::string binary;
  for (int i = 0; i < 4096; ++i) binary += static_cast<char>(i % 256);
  EXPECT_CONTAINS(error("seed: " + binary + "\n", "run.yaml"), "run.yaml");
  EXPECT_CONTAINS(error("seed = " + binary + "\n", "run.toml"), "run.toml");
}

}  // namespace
}  // namespace lft::config
