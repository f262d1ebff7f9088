// The BPE model, as the library's models/bpe (model.rs, word.rs) applies it.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <stdexcept>

#include "hf_tokenizer_internal.h"

namespace lft::data::hf {
namespace {

constexpr std::size_t kCacheCapacity = 1 << 16;  // entries; cleared when full
constexpr std::size_t kCacheMaxWord = 256;       // bytes; longer words are not cached

std::string optional_string(const Json& m, const char* key) {
  return m.contains(key) && m[key].is_string() ? m[key].get<std::string>() : std::string();
}

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
         static_cast<std::uint32_t>(b);
}

constexpr std::uint64_t kEmpty = ~std::uint64_t{0};  // never a key: ids are < 2^31

// Fibonacci hashing: the top bits of the product depend on every bit of the key.
std::uint64_t slot_of(std::uint64_t key, int shift) { return key * 0x9E3779B97F4A7C15ull >> shift; }

// Scratch space of merge_word, kept per thread so that a word costs no allocation.
struct Symbol {
  std::int32_t id, prev, next;
  bool alive;
};
thread_local std::vector<Symbol> t_symbols;
thread_local std::vector<std::uint64_t> t_queue;  // (rank << 32 | position), a min-heap

}  // namespace

void MergeTable::build(const std::unordered_map<std::uint64_t, BpeMerge>& merges) {
  std::size_t capacity = 16;
  shift_ = 60;
  while (capacity < 2 * merges.size()) {
    capacity *= 2;
    --shift_;
  }
  mask_ = capacity - 1;
  keys_.assign(capacity, kEmpty);
  values_.assign(capacity, BpeMerge{0, 0});
  for (const auto& [key, merge] : merges) {
    std::uint64_t slot = slot_of(key, shift_);
    while (keys_[slot] != kEmpty) slot = (slot + 1) & mask_;
    keys_[slot] = key;
    values_[slot] = merge;
  }
}

const BpeMerge* MergeTable::find(std::int32_t a, std::int32_t b) const {
  if (keys_.empty()) return nullptr;
  const std::uint64_t key = pair_key(a, b);
  for (std::uint64_t slot = slot_of(key, shift_);; slot = (slot + 1) & mask_) {
    if (keys_[slot] == key) return &values_[slot];
    if (keys_[slot] == kEmpty) return nullptr;
  }
}

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
    // Checked before any table is sized by it: an id of 2^31-1 made every rank allocate its table.
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= kMaxTokenId)
      throw std::invalid_argument("model.vocab: token " + Json(token).dump() + " has id " + id.dump() +
                                  ", outside [0, " + std::to_string(kMaxTokenId) + ") (no vocabulary is that large)");
    ids.push_back(static_cast<std::int32_t>(id.get<std::int64_t>()));
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
    for (std::size_t i = 0; i < model_keys_.size(); ++i)
      model_vocab_[model_keys_[i]] = model_ids[i];
    if (!unmap_byte_level(file_prefix_, prefix_) || !unmap_byte_level(file_suffix_, suffix_)) {
      throw std::invalid_argument(
          "unsupported continuing_subword_prefix/end_of_word_suffix "
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
    if (it == file_vocab_.end())
      throw std::invalid_argument("unk_token '" + unk + "' is not in the vocab");
    unk_id_ = it->second;
  }

  const Json& merges = m.at("merges");
  std::unordered_map<std::uint64_t, BpeMerge> merge_map;
  merge_map.reserve(merges.size());
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
    if (b.size() < file_prefix_.size())
      throw std::invalid_argument("merge token '" + b + "' is shorter than the prefix");
    const std::int32_t a_id = lookup(a), b_id = lookup(b);
    const std::int32_t new_id = lookup(a + b.substr(file_prefix_.size()));
    merge_map.insert_or_assign(pair_key(a_id, b_id),
                               BpeMerge{rank, new_id});  // a repeated pair: the last rank wins
    ++rank;
  }
  merges_.build(merge_map);
}

std::int32_t Bpe::token_id(std::string_view token) const {
  const auto it = file_vocab_.find(token);
  return it == file_vocab_.end() ? -1 : it->second;
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
  cache_.emplace(
      key, std::vector<std::int32_t>(out.begin() + static_cast<std::ptrdiff_t>(before), out.end()));
}

void Bpe::merge_word(std::string_view word, std::vector<std::int32_t>& out) const {
  std::vector<Symbol>& symbols = t_symbols;
  symbols.clear();
  const auto add = [&](std::int32_t id) {
    const auto n = static_cast<std::int32_t>(symbols.size());
    if (n > 0) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, true});
  };
  std::int32_t pending_unk = -1;  // an unknown not yet added (fuse_unk extends it)
  std::string unit, fallback;
  const bool affixes = !prefix_.empty() || !suffix_.empty();
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t start = i;
    if (byte_level_) {
      ++i;
    } else {
      next_code_point(word, i);
    }
    const bool first = start == 0, last = i == word.size();
    std::int32_t id = -1;
    if (!affixes && byte_level_) {
      id = byte_ids_[static_cast<unsigned char>(word[start])];
    } else {
      std::string_view key = word.substr(start, i - start);
      if (affixes) {
        unit.assign(first ? "" : prefix_).append(key).append(last ? suffix_ : "");
        key = unit;
      }
      const auto it = model_vocab_.find(key);
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

  // The library's Word::merge_all: the lowest (rank, position) first. An entry is stale when the
  // pair now at its position has another rank (a rank names one pair, so one new id).
  std::vector<std::uint64_t>& queue = t_queue;
  queue.clear();
  const auto push = [&](std::int32_t rank, std::int32_t pos) {
    queue.push_back(static_cast<std::uint64_t>(rank) << 32 | static_cast<std::uint32_t>(pos));
    std::push_heap(queue.begin(), queue.end(), std::greater<>());
  };
  for (std::size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const BpeMerge* m = merges_.find(symbols[k].id, symbols[k + 1].id)) {
      queue.push_back(static_cast<std::uint64_t>(m->rank) << 32 | k);
    }
  }
  std::make_heap(queue.begin(), queue.end(), std::greater<>());
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), std::greater<>());
    const std::uint64_t top = queue.back();
    queue.pop_back();
    const auto pos = static_cast<std::int32_t>(top & 0xFFFFFFFFu);
    const auto rank = static_cast<std::int32_t>(top >> 32);
    Symbol& left = symbols[static_cast<std::size_t>(pos)];
    if (!left.alive || left.next < 0) continue;
    const Symbol right = symbols[static_cast<std::size_t>(left.next)];
    const BpeMerge* merge = merges_.find(left.id, right.id);
    if (merge == nullptr || merge->rank != rank) continue;
    symbols[static_cast<std::size_t>(left.next)].alive = false;
    left.id = merge->new_id;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = pos;
    if (left.prev >= 0) {
      if (const BpeMerge* m =
              merges_.find(symbols[static_cast<std::size_t>(left.prev)].id, left.id)) {
        push(m->rank, left.prev);
      }
    }
    if (left.next >= 0) {
      if (const BpeMerge* m =
              merges_.find(left.id, symbols[static_cast<std::size_t>(left.next)].id)) {
        push(m->rank, pos);
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.alive) out.push_back(s.id);
  }
}

}  // namespace lft::data::hf
