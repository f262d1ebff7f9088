// A training sequence as LlamaFactory prints its first example (example_print.h).
#include "lft/train/example_print.h"

#include <stdexcept>
#include <unordered_map>

#include "lft/data/hf_tokenizer.h"
#include "lft/train/training_data.h"

namespace lft::train {
namespace {

constexpr std::int64_t kIgnoreIndex = -100;  // LlamaFactory's IGNORE_INDEX

// Python's repr of a list of ints: "[1, 2, 3]".
std::string python_list(const std::vector<std::int64_t>& values) {
  std::string text = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(values[i]);
  }
  return text + "]";
}

std::string masked_placeholder(std::size_t count) {
  return "<masked: " + std::to_string(count) + (count == 1 ? " token>" : " tokens>");
}

// Tokenizer::decode with the special tokens kept (it skips them). A token is special when
// decode skips it: alone it decodes to nothing, and twice too (a lone "▁" under a Strip decoder
// decodes to nothing once but not twice).
class Decoder {
 public:
  explicit Decoder(const data::Tokenizer& tokenizer)
      : tok_(tokenizer), hf_(dynamic_cast<const data::HfTokenizer*>(&tokenizer)) {}

  std::string decode(const std::vector<std::int64_t>& ids) const {
    std::string text;
    std::vector<std::int32_t> run;  // ordinary tokens, decoded together
    auto flush = [&] {
      if (run.empty()) return;
      text += tok_.decode(run);
      run.clear();
    };
    for (const std::int64_t wide : ids) {
      const std::int32_t id = checked(wide);
      if (is_special(id)) {
        flush();
        text += name(id);
      } else {
        run.push_back(id);
      }
    }
    flush();
    return text;
  }

 private:
  std::int32_t checked(std::int64_t id) const {
    if (id < 0 || id >= tok_.vocab_size())
      throw std::out_of_range("format_example: id " + std::to_string(id) + " is outside the " + tok_.name() +
                              " tokenizer's vocabulary [0, " + std::to_string(tok_.vocab_size()) + ")");
    return static_cast<std::int32_t>(id);
  }

  bool is_special(std::int32_t id) const {
    const auto found = special_.find(id);
    if (found != special_.end()) return found->second;
    const bool special = tok_.decode(std::vector<std::int32_t>{id}).empty() &&
                         tok_.decode(std::vector<std::int32_t>{id, id}).empty();
    special_.emplace(id, special);
    return special;
  }

  std::string name(std::int32_t id) const {
    if (hf_ != nullptr) {
      std::string token = hf_->id_to_token(id);
      if (!token.empty()) return token;
    }
    if (id == tok_.bos_id()) return "<bos>";
    if (id == tok_.eos_id()) return "<eos>";
    if (id == tok_.pad_id()) return "<pad>";
    return "<id " + std::to_string(id) + ">";
  }

  const data::Tokenizer& tok_;
  const data::HfTokenizer* hf_;
  mutable std::unordered_map<std::int32_t, bool> special_;
};

}  // namespace

std::string format_example(const data::Tokenizer& tokenizer, const std::vector<std::int64_t>& ids,
                           const std::vector<float>& weights) {
  if (!weights.empty() && weights.size() + 1 != ids.size())
    throw std::invalid_argument("format_example: " + std::to_string(weights.size()) + " weights for " +
                                std::to_string(ids.size()) + " ids (one per predicted token: ids - 1)");
  const Decoder decoder(tokenizer);
  std::string out = "input_ids:\n" + python_list(ids) + "\ninputs:\n" + decoder.decode(ids);
  if (weights.empty()) return out;  // pre-training: every next token is a target, as printed
  std::vector<std::int64_t> labels(ids.size(), kIgnoreIndex);
  for (std::size_t t = 1; t < ids.size(); ++t)
    if (weights[t - 1] > 0) labels[t] = ids[t];
  out += "\nlabel_ids:\n" + python_list(labels) + "\nlabels:\n";
  for (std::size_t begin = 0; begin < labels.size();) {
    const bool masked = labels[begin] == kIgnoreIndex;
    std::size_t end = begin;
    while (end < labels.size() && (labels[end] == kIgnoreIndex) == masked) ++end;
    if (masked) {
      out += masked_placeholder(end - begin);
    } else {
      using Diff = std::vector<std::int64_t>::difference_type;
      out += decoder.decode(std::vector<std::int64_t>(labels.begin() + static_cast<Diff>(begin),
                                                      labels.begin() + static_cast<Diff>(end)));
    }
    begin = end;
  }
  return out;
}

std::string format_training_example(const TrainingData& data, std::int64_t index, const std::string& heading,
                                    bool pretraining) {
  const TrainingExample example = data.example(index);
  return heading + "\n" +
         format_example(data.tokenizer(), example.ids, pretraining ? std::vector<float>() : example.weights);
}

}  // namespace lft::train
