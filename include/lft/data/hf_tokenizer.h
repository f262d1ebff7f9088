// Hugging Face `tokenizer.json` tokenizers, giving the ids of the `tokenizers` library (0.23):
// byte-level BPE (GPT-2, Llama 3, Qwen2) and SentencePiece-style BPE with byte fallback (Llama 2,
// Mistral). Added tokens (special or not) are matched whole in the text before anything else, as
// the library does by default. Normalizers NFC/NFD/NFKC/NFKD (utf8proc), Replace, Prepend and
// Sequence; pre-tokenizers Split (PCRE2), ByteLevel, Metaspace and Sequence; a BPE model; decoders
// ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace and Sequence. The post-processor is not
// applied: encode() adds no BOS/EOS.
//
// Invalid UTF-8: the library only accepts valid text, so input bytes that are not valid UTF-8 are
// first repaired, each maximal invalid subsequence becoming one U+FFFD (what Python's
// bytes.decode("utf-8", errors="replace") does). encode(bytes) then equals the library's encode of
// that repaired string.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lft/data/tokenizer.h"

namespace lft::data {

namespace hf {
class Pipeline;  // src/data/hf_tokenizer_internal.h
}

class HfTokenizer final : public Tokenizer {
 public:
  // `folder_or_file`: a folder holding tokenizer.json and, optionally, tokenizer_config.json, whose
  // bos_token / eos_token / pad_token (strings or {"content": ...} objects) give the special ids;
  // or a tokenizer.json file (then there are no BOS/EOS/PAD ids). Throws UsageError naming the file
  // for a missing or malformed file, and the component for one this class does not implement.
  static std::unique_ptr<HfTokenizer> load(const std::string& folder_or_file);
  ~HfTokenizer() override;

  std::int64_t vocab_size() const override;
  std::int32_t bos_id() const override;
  std::int32_t eos_id() const override;
  std::int32_t pad_id() const override;
  // Thread-safe; a cache of recent pre-tokens is shared by all threads.
  std::vector<std::int32_t> encode(const std::string& text) const override;
  // Skips every added token marked special (skip_special_tokens=True in the library). Ids inside
  // [0, vocab_size()) that name no token are skipped too.
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  // "hf:<folder name>", e.g. "hf:llama3".
  std::string name() const override;
  std::vector<std::pair<std::string, std::int32_t>> special_tokens() const override;

  // The id of an added or vocabulary token given its exact text as tokenizer.json spells it
  // ("<|eot_id|>", "Ġthe", "▁the"); -1 when there is none.
  std::int32_t token_id(const std::string& token) const;
  // The text of `id` as tokenizer.json spells it; "" for an id that names no token. Throws
  // std::out_of_range for an id outside [0, vocab_size()).
  std::string id_to_token(std::int32_t id) const;

 private:
  HfTokenizer(std::unique_ptr<hf::Pipeline> pipeline, std::string name);
  std::unique_ptr<hf::Pipeline> pipeline_;
  std::string name_;
};

}  // namespace lft::data
