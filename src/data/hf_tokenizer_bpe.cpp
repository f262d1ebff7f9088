// The BPE model, as the library's models/bpe (model.rs, word.rs) applies it.
#include <algorithm>
#include <cstdio>
#include <queue>
#include <stdexcept>

#include "hf_tokenizer_internal.h"

namespace lft::data::hf {
namespace {

constexpr std::size_t kCacheCapacity = 1 << 16;  // entries; cleared when full
constexpr std::size_t kCacheMaxWord = 256;        // bytes; longer words are not cached

std::string optional_string(const Json& m, const char* key) {
  return m.contains(key) && m[key].is_string() ? m[key].get<std::string>() : std::string();
}

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
         static_cast<std::uint32_t>(b);
}

}  // namespace

Bpe::Bpe(const Json& m, bool byte_level) : byte_level_(byte_level) {
  if (m.value("type", "BPE") != "BPE") {
    throw std::invalid_argument("unsupported model type '" + m.value("type", "") +
                                "' (supported: BPE)");
  }
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0) {
    throw std::invalid_argument("unsupported BPE dropout (only null or 0 gives fixed ids)");
  }
  const auto flag = [&](const char* key) {
    return m.contains(key) && m[key].is_boolean() && m[key].get<bool>();
  };
  ignore_merges_ = flag("ignore_merges");
  byte_fallback_ = flag("byte_fallback");
  fuse_unk_ = flag("fuse_unk");
  file_prefix_ = optional_string(m, "continuing_subword_prefix");
  file_suffix_ = optional_string(m, "end_of_word_suffix");

  const Json& vocab = m.at("vocab");
  file_keys_.reserve(vocab.size());
  std::vector<std::int32_t> ids;
  std::int32_t max_id = -1;
  for (const auto& [token, id] : vocab.items()) {
    file_keys_.push_back(token);
    ids.push_back(id.get<std::int32_t>());
    if (ids.back() < 0) throw std::invalid_argument("vocab id " + std::to_string(ids.back()) + " < 0");
    max_id = std::max(max_id, ids.back());
  }
  vocab_entries_ = file_keys_.size();
  tokens_.assign(static_cast<std::size_t>(max_id + 1), std::string());
  file_vocab_.reserve(file_keys_.size());
  for (std::size_t i = 0; i < file_keys_.size(); ++i) {
    file_vocab_[file_keys_[i]] = ids[i];
    tokens_[static_cast<std::size_t>(ids[i])] = file_keys_[i];
  }
  // The model's own keys: raw bytes for byte-level models (a token outside the GPT-2 alphabet can
  // never be produced from bytes, so it is left out).
  std::string raw;
  if (byte_level_) {
    model_keys_.reserve(file_keys_.size());
    std::vector<std::int32_t> model_ids;
    for (std::size_t i = 0; i < file_keys_.size(); ++i) {
      if (unmap_byte_level(file_keys_[i], raw)) {
        model_keys_.push_back(raw);
        model_ids.push_back(ids[i]);
      }
    }
    model_vocab_.reserve(model_keys_.size());
    for (std::size_t i = 0; i < model_keys_.size(); ++i) model_vocab_[model_keys_[i]] = model_ids[i];
    if (!unmap_byte_level(file_prefix_, prefix_) || !unmap_byte_level(file_suffix_, suffix_)) {
      throw std::invalid_argument("unsupported continuing_subword_prefix/end_of_word_suffix "
                                  "outside the byte-level alphabet");
    }
  } else {
    model_vocab_ = file_vocab_;
    prefix_ = file_prefix_;
    suffix_ = file_suffix_;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const auto it = file_vocab_.find(name);
    fallback_ids_[b] = it == file_vocab_.end() ? -1 : it->second;
    const auto one = model_vocab_.find(std::string(1, static_cast<char>(b)));
    byte_ids_[b] = one == model_vocab_.end() ? -1 : one->second;
  }
  const std::string unk = optional_string(m, "unk_token");
  if (!unk.empty()) {
    const auto it = file_vocab_.find(unk);
    if (it == file_vocab_.end()) throw std::invalid_argument("unk_token '" + unk + "' is not in the vocab");
    unk_id_ = it->second;
  }

  const Json& merges = m.at("merges");
  merges_.reserve(merges.size());
  std::string a, b;
  std::int32_t rank = 0;
  for (const Json& merge : merges) {
    if (merge.is_string()) {
      const std::string line = merge.get<std::string>();
      if (line.rfind("#version", 0) == 0) continue;
      const std::size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        throw std::invalid_argument("merge " + std::to_string(rank + 1) + " '" + line +
                                    "' is not two tokens separated by one space");
      }
      a = line.substr(0, space);
      b = line.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2) {
      a = merge[0].get<std::string>();
      b = merge[1].get<std::string>();
    } else {
      throw std::invalid_argument("merge " + std::to_string(rank + 1) + " is " + merge.dump());
    }
    const auto lookup = [&](const std::string& token) {
      const auto it = file_vocab_.find(token);
      if (it == file_vocab_.end()) {
        throw std::invalid_argument("merge " + std::to_string(rank + 1) + ": token '" + token +
                                    "' is not in the vocab");
      }
      return it->second;
    };
    if (b.size() < file_prefix_.size()) throw std::invalid_argument("merge token '" + b + "' is shorter than the prefix");
    const std::int32_t a_id = lookup(a), b_id = lookup(b);
    const std::int32_t new_id = lookup(a + b.substr(file_prefix_.size()));
    merges_.insert_or_assign(pair_key(a_id, b_id), Merge{rank, new_id});  // a repeated pair: the last rank wins
    ++rank;
  }
}

std::int32_t Bpe::token_id(std::string_view token) const {
  const auto it = file_vocab_.find(token);
  return it == file_vocab_.end() ? -1 : it->second;
}

const Bpe::Merge* Bpe::find_merge(std::int32_t a, std::int32_t b) const {
  const auto it = merges_.find(pair_key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void Bpe::encode(std::string_view word, std::vector<std::int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const auto it = model_vocab_.find(word);
    if (it != model_vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() >= kCacheMaxWord) return merge_word(word, out);
  thread_local std::string key;
  key.assign(word);
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t before = out.size();
  merge_word(word, out);
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kCacheCapacity) cache_.clear();
  cache_.emplace(key, std::vector<std::int32_t>(out.begin() + static_cast<std::ptrdiff_t>(before), out.end()));
}

void Bpe::merge_word(std::string_view word, std::vector<std::int32_t>& out) const {
  struct Symbol {
    std::int32_t id, prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  const auto add = [&](std::int32_t id) {
    const auto n = static_cast<std::int32_t>(symbols.size());
    if (n > 0) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, true});
  };
  std::int32_t pending_unk = -1;  // an unknown not yet added (fuse_unk extends it)
  std::string unit, fallback;
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t start = i;
    if (byte_level_) {
      ++i;
    } else {
      next_code_point(word, i);
    }
    const bool first = start == 0, last = i == word.size();
    std::int32_t id = -1;
    const bool plain = (first || prefix_.empty()) && (!last || suffix_.empty());
    if (plain && byte_level_) {
      id = byte_ids_[static_cast<unsigned char>(word[start])];
    } else {
      unit.assign(first ? "" : prefix_).append(word.substr(start, i - start)).append(last ? suffix_ : "");
      const auto it = model_vocab_.find(unit);
      if (it != model_vocab_.end()) id = it->second;
    }
    if (id >= 0) {
      if (pending_unk >= 0) add(pending_unk);
      pending_unk = -1;
      add(id);
      continue;
    }
    if (byte_fallback_) {
      // The library falls back on the bytes of the symbol as tokenizer.json spells it.
      fallback.assign(first ? "" : file_prefix_);
      if (byte_level_) {
        append_utf8(fallback, byte_to_char()[static_cast<unsigned char>(word[start])]);
      } else {
        fallback.append(word.substr(start, i - start));
      }
      fallback.append(last ? file_suffix_ : "");
      bool all = true;
      for (const char c : fallback) all = all && fallback_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        // As the library does, a pending unknown stays pending (it lands after these bytes).
        for (const char c : fallback) add(fallback_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
      pending_unk = unk_id_;
    }
  }
  if (pending_unk >= 0) add(pending_unk);

  struct Candidate {
    std::int32_t rank, pos, new_id;
  };
  const auto later = [](const Candidate& x, const Candidate& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  for (std::size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const Merge* m = find_merge(symbols[k].id, symbols[k + 1].id)) {
      queue.push({m->rank, static_cast<std::int32_t>(k), m->new_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<std::size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    const Symbol right = symbols[static_cast<std::size_t>(left.next)];
    const Merge* current = find_merge(left.id, right.id);
    if (current == nullptr || current->new_id != top.new_id) continue;  // a stale entry
    symbols[static_cast<std::size_t>(left.next)].alive = false;
    left.id = top.new_id;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) {
      if (const Merge* m = find_merge(symbols[static_cast<std::size_t>(left.prev)].id, left.id)) {
        queue.push({m->rank, left.prev, m->new_id});
      }
    }
    if (left.next >= 0) {
      if (const Merge* m = find_merge(left.id, symbols[static_cast<std::size_t>(left.next)].id)) {
        queue.push({m->rank, top.pos, m->new_id});
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.alive) out.push_back(s.id);
  }
}

}  // namespace lft::data::hf
