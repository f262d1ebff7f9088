// lft_chat_encode MODEL_DIR DATA.jsonl CUTOFF_LEN [CUSTOM_TEMPLATE_FILE]
// The supervised examples lftrain makes of a file of conversations with the model folder's own Jinja
// chat template (template = "model", data/jinja_sft.h): one JSON line per example, {"ids": [...],
// "weights": [...]} (tests/e2e/chat_template_sft.py compares them with transformers'
// apply_chat_template under LlamaFactory main's rule).
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "lft/data/hf_tokenizer.h"
#include "lft/data/jinja_sft.h"
#include "lft/data/model_chat_template.h"
#include "lft/data/sft_records.h"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::cerr << "usage: lft_chat_encode MODEL_DIR DATA.jsonl CUTOFF_LEN [CUSTOM_TEMPLATE_FILE]\n";
    return 2;
  }
  try {
    std::string custom;
    if (argc == 5) {
      std::ifstream in(argv[4]);
      std::ostringstream s;
      s << in.rdbuf();
      custom = s.str();
    }
    const auto tokenizer = lft::data::HfTokenizer::load(argv[1]);
    const lft::data::JinjaChatEncoder encoder(lft::data::read_model_chat_template(argv[1], custom));
    lft::data::RecordOptions options;
    const lft::data::SftRecords records = lft::data::read_sft_records({argv[2]}, options);
    for (const lft::data::Conversation& conv : records.conversations)
      for (const lft::data::Conversation& prefix : lft::data::JinjaChatEncoder::supervised_prefixes(conv)) {
        const lft::data::TokenizedExample ex = encoder.encode(prefix, *tokenizer, std::stoll(argv[3]));
        std::cout << nlohmann::json{{"ids", ex.ids}, {"weights", ex.weights}}.dump() << "\n";
      }
  } catch (const std::exception& e) {
    std::cerr << "lft_chat_encode: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
