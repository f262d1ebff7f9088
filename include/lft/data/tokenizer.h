// Tokenizers: text <-> token ids. `Tokenizer` is the interface the data pipeline uses, so other
// tokenizers (Hugging Face BPE / SentencePiece, later) plug in without touching packing or
// sampling. `ByteTokenizer` is the dependency-free one: every byte is a token.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lft::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Number of ids the model's embedding must hold (every id is in [0, vocab_size())).
  virtual std::int64_t vocab_size() const = 0;
  // Special ids; -1 when the tokenizer has no such token (some HF tokenizers have no BOS or PAD).
  virtual std::int32_t bos_id() const = 0;
  virtual std::int32_t eos_id() const = 0;
  virtual std::int32_t pad_id() const = 0;

  // The ids of `text`, without BOS/EOS (the caller decides where special tokens go).
  virtual std::vector<std::int32_t> encode(const std::string& text) const = 0;
  // The text of `ids`; special tokens (BOS/EOS/PAD) are skipped. Throws std::out_of_range for an id
  // outside [0, vocab_size()).
  virtual std::string decode(const std::vector<std::int32_t>& ids) const = 0;

  // Short name for logs and error messages ("byte").
  virtual std::string name() const = 0;

  // The tokens with a text of their own that are marked special (tokenizer.json's added tokens with
  // "special": true, in id order): their text and id. None here; HfTokenizer's.
  virtual std::vector<std::pair<std::string, std::int32_t>> special_tokens() const { return {}; }
};

// Byte-level tokenizer: ids 0..255 are the bytes of the UTF-8 (or any) input, 256 is BOS, 257 EOS,
// 258 PAD; vocab_size() is 259. encode/decode round-trip every byte string exactly.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr std::int32_t kBos = 256;
  static constexpr std::int32_t kEos = 257;
  static constexpr std::int32_t kPad = 258;
  static constexpr std::int64_t kVocabSize = 259;

  std::int64_t vocab_size() const override { return kVocabSize; }
  std::int32_t bos_id() const override { return kBos; }
  std::int32_t eos_id() const override { return kEos; }
  std::int32_t pad_id() const override { return kPad; }
  std::vector<std::int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  std::string name() const override { return "byte"; }
};

}  // namespace lft::data
