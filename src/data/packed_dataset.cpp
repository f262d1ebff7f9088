#include "lft/data/packed_dataset.h"

#include <stdexcept>

#include "lft/runtime/error.h"

namespace lft::data {

PackedDataset::PackedDataset(const std::vector<std::string>& docs, const Tokenizer& tok,
                             std::int64_t seq_len, const std::string& source, const DocumentEncoder& encode)
    : seq_len_(seq_len), num_documents_(static_cast<std::int64_t>(docs.size())) {
  if (seq_len < 1) {
    throw std::invalid_argument("PackedDataset: seq_len must be >= 1, got " +
                                std::to_string(seq_len));
  }
  const std::int32_t bos = tok.bos_id();
  const std::int32_t eos = tok.eos_id();
  const std::int64_t vocab = tok.vocab_size();
  std::vector<std::vector<std::int32_t>> encoded;
  if (encode) encoded = encode(docs);
  for (std::size_t d = 0; d < docs.size(); ++d) {
    const std::vector<std::int32_t> ids = encode ? std::move(encoded[d]) : tok.encode(docs[d]);
    for (const std::int32_t id : ids) {
      if (id < 0 || id >= vocab) {
        throw std::out_of_range("PackedDataset: tokenizer '" + tok.name() + "' returned id " +
                                std::to_string(id) + " outside its vocabulary [0, " +
                                std::to_string(vocab) + ")");
      }
    }
    if (bos >= 0) tokens_.push_back(bos);
    tokens_.insert(tokens_.end(), ids.begin(), ids.end());
    if (eos >= 0) tokens_.push_back(eos);
  }
  stream_tokens_ = static_cast<std::int64_t>(tokens_.size());
  num_sequences_ = stream_tokens_ / seq_len_;
  if (num_sequences_ < 1) {
    throw UsageError((source.empty() ? std::string("the training data") : "'" + source + "'") +
                     " is too small for cutoff_len = " + std::to_string(seq_len_) + ": its " +
                     std::to_string(num_documents_) +
                     (num_documents_ == 1 ? " document makes " : " documents make ") +
                     std::to_string(stream_tokens_) + " tokens with the " + tok.name() +
                     " tokenizer (BOS/EOS included), fewer than one sequence; use more data or "
                     "a smaller cutoff_len");
  }
  tokens_.resize(static_cast<std::size_t>(num_sequences_ * seq_len_));
  tokens_.shrink_to_fit();
}

void PackedDataset::check_index(std::int64_t i) const {
  if (i < 0 || i >= num_sequences_) {
    throw std::out_of_range("PackedDataset: sequence index " + std::to_string(i) +
                            " is outside [0, " + std::to_string(num_sequences_) + ")");
  }
}

const std::int32_t* PackedDataset::sequence_data(std::int64_t i) const {
  check_index(i);
  return tokens_.data() + i * seq_len_;
}

at::Tensor PackedDataset::sequence(std::int64_t i) const {
  const std::int32_t* src = sequence_data(i);
  at::Tensor out = at::empty({seq_len_}, at::TensorOptions().dtype(at::kLong));
  std::int64_t* dst = out.data_ptr<std::int64_t>();
  for (std::int64_t t = 0; t < seq_len_; ++t) dst[t] = src[t];
  return out;
}

at::Tensor PackedDataset::batch(const std::vector<std::int64_t>& indices) const {
  const auto n = static_cast<std::int64_t>(indices.size());
  for (const std::int64_t i : indices) check_index(i);
  at::Tensor out = at::empty({n, seq_len_}, at::TensorOptions().dtype(at::kLong));
  std::int64_t* dst = out.data_ptr<std::int64_t>();
  for (std::int64_t row = 0; row < n; ++row) {
    const std::int32_t* src = tokens_.data() + indices[static_cast<std::size_t>(row)] * seq_len_;
    std::int64_t* drow = dst + row * seq_len_;
    for (std::int64_t t = 0; t < seq_len_; ++t) drow[t] = src[t];
  }
  return out;
}

}  // namespace lft::data
