// Pre-training packing: every document becomes BOS + tokens + EOS, all documents are concatenated
// in order into one token stream, and the stream is cut into sequences of exactly seq_len tokens
// (the incomplete tail is dropped). Sequences cross document boundaries; no attention mask is
// reset at a document boundary (as LlamaFactory's `stage = "pt"` packing does).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lft/data/tokenizer.h"

namespace lft::data {

// Encodes every document, in order (e.g. split across ranks and gathered).
using DocumentEncoder = std::function<std::vector<std::vector<std::int32_t>>(const std::vector<std::string>&)>;

class PackedDataset {
 public:
  // Tokenises `docs` once with `tok` into one contiguous int32 buffer. A tokenizer without BOS
  // (bos_id() < 0) or EOS (eos_id() < 0) simply omits that token. `source` names the data in
  // error messages (e.g. the file path); it may be empty.
  // Throws std::invalid_argument if seq_len < 1, lft::UsageError if the stream is shorter than one
  // sequence (the data is too small for cutoff_len), std::out_of_range if the tokenizer returns an
  // id outside [0, vocab_size()). `encode`, when given, encodes the documents in place of
  // tok.encode one by one.
  PackedDataset(const std::vector<std::string>& docs, const Tokenizer& tok, std::int64_t seq_len,
                const std::string& source = "", const DocumentEncoder& encode = {});

  std::int64_t seq_len() const { return seq_len_; }
  // floor(stream_tokens() / seq_len()).
  std::int64_t num_sequences() const { return num_sequences_; }
  // Tokens in the sequences: num_sequences() * seq_len().
  std::int64_t num_tokens() const { return num_sequences_ * seq_len_; }
  // Tokens in the whole stream, BOS/EOS included, before the tail was dropped.
  std::int64_t stream_tokens() const { return stream_tokens_; }
  // stream_tokens() - num_tokens().
  std::int64_t dropped_tokens() const { return stream_tokens_ - num_tokens(); }
  std::int64_t num_documents() const { return num_documents_; }

  // Sequence i as an int64 CPU tensor [seq_len]. Throws std::out_of_range for a bad index.
  at::Tensor sequence(std::int64_t i) const;
  // The sequences `indices` stacked as an int64 CPU tensor [indices.size(), seq_len].
  at::Tensor batch(const std::vector<std::int64_t>& indices) const;
  // The raw int32 tokens of sequence i (seq_len() of them), without a copy.
  const std::int32_t* sequence_data(std::int64_t i) const;

 private:
  void check_index(std::int64_t i) const;

  std::vector<std::int32_t> tokens_;  // num_tokens() tokens: the kept part of the stream
  std::int64_t seq_len_ = 0;
  std::int64_t num_sequences_ = 0;
  std::int64_t stream_tokens_ = 0;
  std::int64_t num_documents_ = 0;
};

}  // namespace lft::data
