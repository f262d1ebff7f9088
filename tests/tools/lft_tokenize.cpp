// lft_tokenize TOKENIZER_DIR STRINGS.jsonl [--repeat N]
// Encodes each line of STRINGS.jsonl (a JSON string) with HfTokenizer and prints one JSON line per
// input: {"ids": [...], "decoded": "..."}. On stderr, the encoding time: the first pass over all
// strings (cold cache) and, with --repeat, the best of N further passes
// (tests/e2e/tokenizer_parity.py compares both with the `tokenizers` library).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lft/data/hf_tokenizer.h"
#include "lft/runtime/error.h"

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 5 && std::string(argv[3]) == "--repeat")) {
    std::cerr << "usage: lft_tokenize TOKENIZER_DIR STRINGS.jsonl [--repeat N]\n";
    return 2;
  }
  const int repeat = argc == 5 ? std::stoi(argv[4]) : 0;
  try {
    const auto tokenizer = lft::data::HfTokenizer::load(argv[1]);
    std::ifstream in(argv[2]);
    if (!in) throw lft::UsageError(std::string("cannot read ") + argv[2]);
    std::vector<std::string> texts;
    std::size_t bytes = 0;
    for (std::string line; std::getline(in, line);) {
      texts.push_back(nlohmann::json::parse(line).get<std::string>());
      bytes += texts.back().size();
    }
    using Clock = std::chrono::steady_clock;
    std::vector<std::vector<std::int32_t>> ids(texts.size());
    auto t0 = Clock::now();
    for (std::size_t i = 0; i < texts.size(); ++i) ids[i] = tokenizer->encode(texts[i]);
    const double first = std::chrono::duration<double>(Clock::now() - t0).count();
    double best = 0;
    for (int r = 0; r < repeat; ++r) {
      t0 = Clock::now();
      for (std::size_t i = 0; i < texts.size(); ++i) ids[i] = tokenizer->encode(texts[i]);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      best = r == 0 ? s : std::min(best, s);
    }
    std::size_t tokens = 0;
    std::string out;
    for (std::size_t i = 0; i < texts.size(); ++i) {
      tokens += ids[i].size();
      nlohmann::json record = {{"ids", ids[i]}, {"decoded", tokenizer->decode(ids[i])}};
      out += record.dump();
      out += '\n';
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fprintf(stderr, "lft_tokenize: %zu texts, %zu bytes, %zu tokens; first pass %.4f s",
                 texts.size(), bytes, tokens, first);
    if (repeat > 0) std::fprintf(stderr, ", best of %d warm passes %.4f s", repeat, best);
    std::fprintf(stderr, "\n");
  } catch (const std::exception& e) {
    std::cerr << "lft_tokenize: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
