// HfTokenizer: loading tokenizer.json, added tokens, and the encode/decode pipeline (the stages are
// in the other hf_tokenizer_*.cpp files; see hf_tokenizer_internal.h).
#include "lft/data/hf_tokenizer.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "hf_tokenizer_internal.h"
#include "lft/runtime/error.h"
#include "lft/runtime/json_nesting.h"

namespace lft::data {
namespace hf {
namespace {

// The last / first char of `s` is a \w char (the library's `\w$` / `^\w`).
bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  std::size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return is_word_char(next_code_point(s, i));
}

bool starts_with_word(std::string_view s) {
  std::size_t i = 0;
  return !s.empty() && is_word_char(next_code_point(s, i));
}

// Where the run of white space that ends `s` begins (the library's `\s*$`).
std::size_t trailing_space_start(std::string_view s) {
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size();) {
    if (!is_white_space(next_code_point(s, i))) start = i;  // i is now past that char
  }
  return start;
}

// The length of the run of white space that starts `s` (the library's `^\s*`).
std::size_t leading_space_length(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t next = i;
    if (!is_white_space(next_code_point(s, next))) break;
    i = next;
  }
  return i;
}

}  // namespace

void AddedMatcher::add(const AddedToken* token) {
  if (token->match.empty()) return;
  auto& list = by_first_byte_[static_cast<unsigned char>(token->match[0])];
  list.push_back(token);
  std::stable_sort(list.begin(), list.end(), [](const AddedToken* a, const AddedToken* b) {
    return a->match.size() > b->match.size();
  });
  ++count_;
}

void AddedMatcher::split(std::string_view text,
                         const std::function<void(std::size_t, std::size_t)>& on_text,
                         const std::function<void(const AddedToken&)>& on_token) const {
  if (text.empty()) return on_text(0, 0);
  std::size_t start_offset = 0, pos = 0;
  while (pos < text.size()) {
    // The leftmost match, the longest of those that start there (Aho-Corasick LeftmostLongest).
    const AddedToken* found = nullptr;
    std::size_t at = pos;
    for (; at < text.size() && found == nullptr; ++at) {
      for (const AddedToken* t : by_first_byte_[static_cast<unsigned char>(text[at])]) {
        if (text.compare(at, t->match.size(), t->match) == 0) {
          found = t;
          break;
        }
      }
    }
    if (found == nullptr) break;
    std::size_t start = at - 1, stop = start + found->match.size();
    pos = stop;
    if (found->single_word) {
      const bool start_space = start == 0 || !ends_with_word(text.substr(0, start));
      const bool stop_space = stop == text.size() || !starts_with_word(text.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (found->lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (found->rstrip) stop += leading_space_length(text.substr(stop));
    if (start_offset < start) on_text(start_offset, start);
    on_token(*found);
    start_offset = stop;
  }
  if (start_offset < text.size()) on_text(start_offset, text.size());
}

Pipeline::Pipeline(const Json& j) {
  if (j.contains("version") && j["version"] != "1.0") {
    throw std::invalid_argument("unsupported tokenizer.json version " + j["version"].dump());
  }
  normalizer_ = make_normalizer(j.value("normalizer", Json()));
  bool byte_level = false;
  pre_tokenizer_ = make_pre_tokenizer(j.value("pre_tokenizer", Json()), byte_level);
  model_ = std::make_unique<Bpe>(j.at("model"), byte_level);
  decoder_ = make_decoder(j.value("decoder", Json()));

  // Ids as the library derives them when it loads the file: a token already in the vocab keeps
  // that id, the others are numbered from the vocab's size on.
  const Json added = j.value("added_tokens", Json::array());
  added_.reserve(added.size());
  auto next_id = static_cast<std::int32_t>(model_->vocab_entries());
  for (const Json& a : added) {
    AddedToken t;
    t.content = a.at("content").get<std::string>();
    if (t.content.empty()) continue;
    t.special = a.value("special", false);
    t.single_word = a.value("single_word", false);
    t.lstrip = a.value("lstrip", false);
    t.rstrip = a.value("rstrip", false);
    t.normalized = a.value("normalized", !t.special);
    t.match = t.content;
    if (t.normalized && normalizer_) normalizer_->normalize(t.match);
    const auto known = added_by_content_.find(t.content);
    if (known != added_by_content_.end())
      t.id = known->second;
    else if (const std::int32_t id = model_->token_id(t.content); id >= 0)
      t.id = id;
    else
      t.id = next_id++;
    added_.push_back(std::move(t));
    const AddedToken& stored = added_.back();
    added_by_content_[stored.content] = stored.id;
    added_by_id_[stored.id] = &stored;
    if (stored.special) special_contents_.insert(stored.content);
  }
  vocab_size_ = static_cast<std::int64_t>(model_->tokens().size());
  for (const AddedToken& t : added_) {
    if (added_by_id_.at(t.id) != &t) continue;  // a later entry for the same id replaced it
    (t.normalized ? normalized_matcher_ : raw_matcher_).add(&t);
    vocab_size_ = std::max<std::int64_t>(vocab_size_, t.id + 1);
  }
}

void Pipeline::encode(std::string_view input, std::vector<std::int32_t>& ids) const {
  std::string repaired;
  std::string_view text = input;
  if (!is_valid_utf8(input)) {
    repaired = repair_utf8(input);
    text = repaired;
  }
  const auto push = [&](const AddedToken& t) { ids.push_back(t.id); };
  // Pieces without a raw-matched token are normalized, then searched for normalized tokens.
  const auto normalize_and_encode = [&](std::size_t begin, std::size_t end) {
    if (begin == end) return;
    const bool at_origin = begin == 0;
    std::string_view piece = text.substr(begin, end - begin);
    std::string normalized;
    if (normalizer_) {
      normalized.assign(piece);
      normalizer_->normalize(normalized);
      piece = normalized;
    }
    if (normalized_matcher_.empty()) return encode_segment(piece, at_origin, ids);
    normalized_matcher_.split(
        piece,
        [&](std::size_t b, std::size_t e) {
          encode_segment(piece.substr(b, e - b), at_origin && b == 0, ids);
        },
        push);
  };
  if (raw_matcher_.empty()) return normalize_and_encode(0, text.size());
  raw_matcher_.split(text, normalize_and_encode, push);
}

void Pipeline::encode_segment(std::string_view text, bool at_origin,
                              std::vector<std::int32_t>& ids) const {
  if (text.empty()) return;
  if (!pre_tokenizer_) return model_->encode(text, ids);
  pre_tokenizer_->split(text, at_origin,
                        [&](std::string_view piece, bool) { model_->encode(piece, ids); });
}

std::string Pipeline::decode(const std::vector<std::int32_t>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  const auto& model_tokens = model_->tokens();
  for (const std::int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) {
      throw std::out_of_range("HfTokenizer::decode: id " + std::to_string(id) +
                              " is outside the vocabulary [0, " + std::to_string(vocab_size_) +
                              ")");
    }
    std::string token;
    if (const auto it = added_by_id_.find(id); it != added_by_id_.end()) {
      token = it->second->match;  // the library decodes an added token in its normalized form
    } else if (static_cast<std::size_t>(id) < model_tokens.size()) {
      token = model_tokens[static_cast<std::size_t>(id)];
    }
    if (token.empty() || special_contents_.count(token) > 0) continue;
    tokens.push_back(std::move(token));
  }
  return run_decoder(decoder_.get(), std::move(tokens));
}

std::int32_t Pipeline::token_id(std::string_view token) const {
  if (const auto it = added_by_content_.find(std::string(token)); it != added_by_content_.end()) {
    return it->second;
  }
  return model_->token_id(token);
}

std::vector<std::pair<std::string, std::int32_t>> Pipeline::special_tokens() const {
  std::vector<std::pair<std::string, std::int32_t>> out;
  for (const AddedToken& t : added_)
    if (t.special) out.emplace_back(t.content, t.id);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  return out;
}

std::string Pipeline::id_to_token(std::int32_t id) const {
  if (id < 0 || id >= vocab_size_) {
    throw std::out_of_range("HfTokenizer::id_to_token: id " + std::to_string(id) +
                            " is outside the vocabulary [0, " + std::to_string(vocab_size_) + ")");
  }
  if (const auto it = added_by_id_.find(id); it != added_by_id_.end()) return it->second->content;
  const auto& tokens = model_->tokens();
  return static_cast<std::size_t>(id) < tokens.size() ? tokens[static_cast<std::size_t>(id)] : "";
}

}  // namespace hf

namespace {

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

hf::Json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read tokenizer file '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  if (const std::string deep = json_too_deep(text.str()); !deep.empty()) throw UsageError(path + ": " + deep);
  try {
    return hf::Json::parse(text.str());
  } catch (const hf::Json::exception& e) {
    throw UsageError(path + ": JSON error: " + e.what());
  }
}

// A special token of tokenizer_config.json (a string, {"content": ...} or null) as an id.
std::int32_t special_id(const hf::Json& config, const char* key, const hf::Pipeline& pipeline,
                        const std::string& path) {
  if (!config.contains(key) || config[key].is_null()) return -1;
  const hf::Json& v = config[key];
  std::string token;
  if (v.is_string()) {
    token = v.get<std::string>();
  } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    token = v["content"].get<std::string>();
  } else {
    throw UsageError(path + ": " + key + " must be a string, {\"content\": ...} or null, not " +
                     v.dump());
  }
  const std::int32_t id = pipeline.token_id(token);
  if (id < 0) throw UsageError(path + ": " + key + " '" + token + "' is not in tokenizer.json");
  return id;
}

}  // namespace

HfTokenizer::HfTokenizer(std::unique_ptr<hf::Pipeline> pipeline, std::string name)
    : pipeline_(std::move(pipeline)), name_(std::move(name)) {}

HfTokenizer::~HfTokenizer() = default;

std::unique_ptr<HfTokenizer> HfTokenizer::load(const std::string& folder_or_file) {
  const bool folder = is_directory(folder_or_file);
  const std::string file = folder ? folder_or_file + "/tokenizer.json" : folder_or_file;
  if (!folder && !is_file(file)) {
    throw UsageError("tokenizer '" + file +
                     "' does not exist: give a folder with tokenizer.json "
                     "(and tokenizer_config.json) or a tokenizer.json file");
  }
  if (!is_file(file)) throw UsageError("tokenizer file '" + file + "' does not exist");
  const hf::Json json = read_json(file);
  std::unique_ptr<hf::Pipeline> pipeline;
  try {
    pipeline = std::make_unique<hf::Pipeline>(json);
  } catch (const std::invalid_argument& e) {
    throw UsageError(file + ": " + e.what());
  } catch (const hf::Json::exception& e) {
    throw UsageError(file + ": unexpected content: " + e.what());
  }
  if (folder) {
    const std::string config_path = folder_or_file + "/tokenizer_config.json";
    if (is_file(config_path)) {
      const hf::Json config = read_json(config_path);
      pipeline->bos_id = special_id(config, "bos_token", *pipeline, config_path);
      pipeline->eos_id = special_id(config, "eos_token", *pipeline, config_path);
      pipeline->pad_id = special_id(config, "pad_token", *pipeline, config_path);
    }
  }
  std::string dir =
      folder ? folder_or_file : folder_or_file.substr(0, folder_or_file.rfind('/') + 1);
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string base = dir.substr(dir.rfind('/') + 1);
  return std::unique_ptr<HfTokenizer>(
      new HfTokenizer(std::move(pipeline), "hf:" + (base.empty() || base == "." ? file : base)));
}

std::int64_t HfTokenizer::vocab_size() const { return pipeline_->vocab_size(); }
std::int32_t HfTokenizer::bos_id() const { return pipeline_->bos_id; }
std::int32_t HfTokenizer::eos_id() const { return pipeline_->eos_id; }
std::int32_t HfTokenizer::pad_id() const { return pipeline_->pad_id; }
std::string HfTokenizer::name() const { return name_; }

std::vector<std::int32_t> HfTokenizer::encode(const std::string& text) const {
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  pipeline_->encode(text, ids);
  return ids;
}

std::string HfTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  return pipeline_->decode(ids);
}

std::int32_t HfTokenizer::token_id(const std::string& token) const {
  return pipeline_->token_id(token);
}

std::string HfTokenizer::id_to_token(std::int32_t id) const { return pipeline_->id_to_token(id); }

std::vector<std::pair<std::string, std::int32_t>> HfTokenizer::special_tokens() const {
  return pipeline_->special_tokens();
}

}  // namespace lft::data
