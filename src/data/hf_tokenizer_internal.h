// The stages of HfTokenizer (include/lft/data/hf_tokenizer.h), one file each:
//   hf_tokenizer_text.cpp         UTF-8 repair and decoding, Unicode classes, the PCRE2 wrapper
//   hf_tokenizer_normalize.cpp    normalizers
//   hf_tokenizer_pretokenize.cpp  pre-tokenizers and the GPT-2 byte <-> char map
//   hf_tokenizer_bpe.cpp          the BPE model
//   hf_tokenizer_decode.cpp       decoders
//   hf_tokenizer.cpp              loading, added tokens, encode/decode
// Builders take the component's JSON and throw std::invalid_argument naming what is unsupported.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace lft::data::hf {

using Json = nlohmann::json;

// Token ids at or above this are refused when tokenizer.json is read (the largest vocabularies in
// use have a few hundred thousand ids; tables are sized by the largest id).
constexpr std::int64_t kMaxTokenId = std::int64_t{1} << 22;

// ---- text ----------------------------------------------------------------------------------
// Whether `s` is well-formed UTF-8.
bool is_valid_utf8(std::string_view s);
// `s` with each maximal invalid subsequence replaced by U+FFFD (Unicode's "maximal subpart"
// practice, as Python's errors="replace" and Rust's from_utf8_lossy do).
std::string repair_utf8(std::string_view s);
// The code point at s[i] of valid UTF-8; advances i past it.
char32_t next_code_point(std::string_view s, std::size_t& i);
void append_utf8(std::string& out, char32_t c);
// Unicode White_Space, and Rust regex's \w (alphabetic, marks, decimal digits, connectors,
// joiners): what the library's added-token matching uses for lstrip/rstrip and single_word.
bool is_white_space(char32_t c);
bool is_word_char(char32_t c);

// A PCRE2 regex (UTF, UCP, JIT when available) compiled to behave as the library's Oniguruma one
// (Ruby syntax: ^ and $ match at line ends).
class Regex {
 public:
  explicit Regex(const std::string& pattern);  // throws std::invalid_argument with PCRE2's message
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // The [start, end) byte spans of the matches in valid UTF-8 `text`, left to right, as
  // Oniguruma's find_iter gives them (an empty match right at the previous match's end is skipped).
  void find_all(std::string_view text, std::vector<std::pair<std::size_t, std::size_t>>& out) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
};

// A literal string or a regex (the {"String": s} / {"Regex": r} patterns of tokenizer.json).
class Pattern {
 public:
  explicit Pattern(const Json& j);
  void find_all(std::string_view text, std::vector<std::pair<std::size_t, std::size_t>>& out) const;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

// ---- normalizers ---------------------------------------------------------------------------
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};
// nullptr for a null normalizer.
std::unique_ptr<Normalizer> make_normalizer(const Json& j);

// ---- pre-tokenizers ------------------------------------------------------------------------
// Receives each pre-token; `at_origin`: it starts at byte 0 of the input (Metaspace's "first").
using PieceSink = std::function<void(std::string_view piece, bool at_origin)>;

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Passes the non-empty pre-tokens of `text` to `sink`, in order.
  virtual void split(std::string_view text, bool at_origin, const PieceSink& sink) const = 0;
};
// nullptr for a null pre-tokenizer. `byte_level` is set when the chain ends with ByteLevel: the
// pieces it emits are then raw bytes, and the model works on raw bytes too (the GPT-2 byte -> char
// map is a bijection, so mapping text and vocabulary alike changes no id, and skipping it is
// faster). ByteLevel anywhere but last is rejected.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, bool& byte_level);

// GPT-2's byte -> char map and its inverse (-1 for a char that is no byte's image).
const std::array<char32_t, 256>& byte_to_char();
int char_to_byte(char32_t c);
// `token` in the GPT-2 char alphabet back to raw bytes; false when a char is not in the alphabet.
bool unmap_byte_level(std::string_view token, std::string& raw);

// ---- BPE model -----------------------------------------------------------------------------
struct BpeMerge {
  std::int32_t rank;
  std::int32_t new_id;
};

// (left id, right id) -> merge, open addressing: the lookup BPE does most.
class MergeTable {
 public:
  void build(const std::unordered_map<std::uint64_t, BpeMerge>& merges);
  const BpeMerge* find(std::int32_t a, std::int32_t b) const;

 private:
  std::vector<std::uint64_t> keys_;  // kEmpty where free
  std::vector<BpeMerge> values_;
  std::uint64_t mask_ = 0;
  int shift_ = 60;  // 64 - log2(capacity)
};

class Bpe {
 public:
  // `model`: the "model" object of tokenizer.json. `byte_level`: see make_pre_tokenizer.
  Bpe(const Json& model, bool byte_level);
  // Appends the ids of one pre-token.
  void encode(std::string_view word, std::vector<std::int32_t>& out) const;
  // Vocabulary as tokenizer.json spells it.
  std::int32_t token_id(std::string_view token) const;
  const std::vector<std::string>& tokens() const { return tokens_; }  // by id, "" for holes
  std::size_t vocab_entries() const { return vocab_entries_; }

 private:
  // The library's BPE::merge_word + Word::merge_all (no cache, no ignore_merges).
  void merge_word(std::string_view word, std::vector<std::int32_t>& out) const;

  bool byte_level_;
  bool ignore_merges_ = false, byte_fallback_ = false, fuse_unk_ = false;
  std::int32_t unk_id_ = -1;
  std::string prefix_, suffix_;  // continuing_subword_prefix, end_of_word_suffix (model space)
  std::vector<std::string> tokens_;
  std::size_t vocab_entries_ = 0;
  std::string file_prefix_, file_suffix_;  // the same, as tokenizer.json spells them
  std::vector<std::string> file_keys_;     // the keys of file_vocab_
  std::vector<std::string> model_keys_;    // the keys of model_vocab_ (raw bytes when byte-level)
  std::unordered_map<std::string_view, std::int32_t> file_vocab_, model_vocab_;
  MergeTable merges_;
  std::array<std::int32_t, 256> fallback_ids_{};  // <0xXX> tokens, -1 when absent
  std::array<std::int32_t, 256> byte_ids_{};      // one-byte words (byte-level), -1 when absent

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> cache_;
};

// ---- decoders ------------------------------------------------------------------------------
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};
// nullptr for a null decoder.
std::unique_ptr<Decoder> make_decoder(const Json& j);
// The library's Decoder::decode: the chain, then the pieces joined ("" between them; " " when
// there is no decoder).
std::string run_decoder(const Decoder* decoder, std::vector<std::string> tokens);

// ---- the whole tokenizer -------------------------------------------------------------------
struct AddedToken {
  std::string content;
  std::string match;  // what is matched: content, or its normalized form when normalized
  std::int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// Leftmost-longest, non-overlapping matching of a set of added tokens.
class AddedMatcher {
 public:
  void add(const AddedToken* token);
  bool empty() const { return count_ == 0; }
  // Splits `text` as the library's AddedVocabulary::find_matches: calls on_text(begin, end) for
  // each stretch without a token (including an empty text), on_token(token) for each match.
  void split(std::string_view text, const std::function<void(std::size_t, std::size_t)>& on_text,
             const std::function<void(const AddedToken&)>& on_token) const;

 private:
  std::array<std::vector<const AddedToken*>, 256> by_first_byte_;  // longest first
  std::size_t count_ = 0;
};

class Pipeline {
 public:
  Pipeline(const Json& tokenizer_json);
  void encode(std::string_view text, std::vector<std::int32_t>& ids) const;
  std::string decode(const std::vector<std::int32_t>& ids) const;
  std::int32_t token_id(std::string_view token) const;
  std::string id_to_token(std::int32_t id) const;  // "" for a hole
  std::vector<std::pair<std::string, std::int32_t>> special_tokens() const;  // the added ones marked special, by id
  std::int64_t vocab_size() const { return vocab_size_; }

  std::int32_t bos_id = -1, eos_id = -1, pad_id = -1;

 private:
  void encode_segment(std::string_view text, bool at_origin, std::vector<std::int32_t>& ids) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Bpe> model_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_;  // in tokenizer.json order
  std::unordered_map<std::string, std::int32_t> added_by_content_;
  std::unordered_map<std::int32_t, const AddedToken*> added_by_id_;
  std::unordered_set<std::string> special_contents_;  // decode skips these
  AddedMatcher raw_matcher_, normalized_matcher_;
  std::int64_t vocab_size_ = 0;
};

}  // namespace lft::data::hf
