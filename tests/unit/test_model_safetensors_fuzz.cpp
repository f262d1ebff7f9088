// A randomized fuzz of the safetensors reader: a valid file's header is mutated (bytes flipped,
// digits changed, structural characters inserted or deleted, the length prefix changed, the
// file truncated) thousands of times with a fixed seed. Every mutant must either load, with
// every tensor inside the file and of its declared size, or fail with SafetensorsError. Any
// other exception, a crash or a sanitizer report is a bug.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include <ATen/ATen.h>

#include "lft/model/safetensors.h"

namespace lft::model {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "lft_fuzz_" + std::to_string(::getpid()) + "_" + name;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string mutate(std::string file, std::mt19937& rng) {
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(static_cast<unsigned char>(file[i])) << (8 * i);
  auto pick = [&](std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
  };
  const std::string structural = "{}[]\":,0123456789-.e ";
  const int edits = static_cast<int>(pick(1, 4));
  for (int e = 0; e < edits; ++e) {
    if (file.size() < 10) break;
    const std::size_t header_end = std::min(file.size(), 8 + static_cast<std::size_t>(n));
    const std::size_t at = pick(8, header_end - 1);
    switch (pick(0, 6)) {
      case 0: file[at] = static_cast<char>(pick(0, 255)); break;
      case 1: file[at] = structural[pick(0, structural.size() - 1)]; break;
      case 2: file.erase(at, 1); file.insert(header_end - 1, " "); break;  // keep the length
      case 3: if (std::isdigit(static_cast<unsigned char>(file[at]))) file[at] = static_cast<char>('0' + pick(0, 9)); break;
      case 4: {  // a new length prefix
        const std::uint64_t len = pick(0, 3) == 0 ? pick(0, 1u << 30) : n + pick(0, 16) - 8;
        for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((len >> (8 * i)) & 0xff);
        break;
      }
      case 5: file.resize(pick(0, file.size())); break;  // truncated
      default: file.append(pick(1, 64), 'x'); break;     // trailing bytes
    }
  }
  return file;
}

TEST(SafetensorsFuzz, MutatedHeadersLoadOrFailCleanly) {
  const std::string valid = temp_path("valid.safetensors");
  write_safetensors(valid,
                    {{"a.weight", at::arange(24, at::kFloat).view({4, 6})},
                     {"b.bias", at::arange(5, at::kBFloat16)},
                     {"c.ids", at::arange(3, at::kLong)},
                     {"d.empty", at::empty({0, 7}, at::kHalf)}},
                    {{"format", "pt"}});
  const std::string original = bytes_of(valid);
  std::mt19937 rng(20261129);
  const std::string path = temp_path("mutant.safetensors");
  int loaded = 0, rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::string mutant = mutate(original, rng);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << mutant;
    try {
      const SafetensorsHeader h = read_safetensors_header(path);
      for (const auto& t : h.tensors) {
        ASSERT_LE(h.data_start + t.end, h.file_size) << "mutant " << i;
        const at::Tensor x = read_safetensors_tensor(path, h, t.name);
        ASSERT_EQ(static_cast<std::uint64_t>(x.numel() * x.element_size()), t.end - t.begin) << "mutant " << i;
      }
      ++loaded;
    } catch (const SafetensorsError&) {
      ++rejected;
    } catch (const std::exception& e) {
      FAIL() << "mutant " << i << " threw a non-SafetensorsError: " << e.what();
    }
  }
  EXPECT_GT(rejected, 1300) << "most mutants are invalid";
  EXPECT_GT(loaded, 0) << "some mutants (e.g. digits of equal meaning, metadata edits) stay valid";
  std::remove(path.c_str());
  std::remove(valid.c_str());
}

}  // namespace
}  // namespace lft::model
