#include "lft/data/sft_sequences.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "lft/runtime/error.h"

namespace lft::data {
namespace {

void append(PackedSequences& out, const TokenizedExample& ex, std::int32_t segment) {
  out.tokens.insert(out.tokens.end(), ex.ids.begin(), ex.ids.end());
  const std::size_t first = out.weights.size();
  out.weights.insert(out.weights.end(), ex.weights.begin(), ex.weights.end());
  if (!ex.weights.empty()) out.weights[first] = 0.0f;  // nothing predicts a sample's first token
  out.segments.insert(out.segments.end(), ex.ids.size(), segment);
}

void close_sequence(PackedSequences& out) {
  out.offsets.push_back(static_cast<std::int64_t>(out.tokens.size()));
}

bool trains_something(const TokenizedExample& ex) {
  return std::any_of(ex.weights.begin() + (ex.weights.empty() ? 0 : 1), ex.weights.end(),
                     [](float w) { return w > 0.0f; });
}

void check_cutoff(std::int64_t cutoff_len) {
  if (cutoff_len < 2) {
    throw UsageError("cutoff_len must be at least 2 (one token predicted from another), got " +
                     std::to_string(cutoff_len));
  }
}

}  // namespace

std::pair<std::int64_t, std::int64_t> infer_seqlen(std::int64_t source_len, std::int64_t target_len,
                                                   std::int64_t cutoff_len) {
  std::int64_t max_target = 0;
  if (target_len * 2 < cutoff_len) {
    max_target = cutoff_len;
  } else if (source_len * 2 < cutoff_len) {
    max_target = cutoff_len - source_len;
  } else {  // the same double arithmetic as Python's int(cutoff * (target / (source + target)))
    const double share =
        static_cast<double>(target_len) / static_cast<double>(source_len + target_len);
    max_target = static_cast<std::int64_t>(static_cast<double>(cutoff_len) * share);
  }
  const std::int64_t new_target = std::min(max_target, target_len);
  const std::int64_t new_source =
      std::min(std::max<std::int64_t>(cutoff_len - new_target, 0), source_len);
  return {new_source, new_target};
}

TokenizedExample flatten_turns(const std::vector<EncodedTurn>& turns, std::int64_t cutoff_len) {
  TokenizedExample ex;
  std::int64_t total = 0;
  for (const EncodedTurn& turn : turns) {
    if (total >= cutoff_len) {
      ex.truncated = true;
      break;
    }
    const auto src = static_cast<std::int64_t>(turn.source.size());
    const auto tgt = static_cast<std::int64_t>(turn.target.size());
    const auto [s, t] = infer_seqlen(src, tgt, cutoff_len - total);
    ex.truncated = ex.truncated || s < src || t < tgt;
    ex.ids.insert(ex.ids.end(), turn.source.begin(), turn.source.begin() + s);
    ex.ids.insert(ex.ids.end(), turn.target.begin(), turn.target.begin() + t);
    ex.weights.insert(ex.weights.end(), static_cast<std::size_t>(s), 0.0f);
    ex.weights.insert(ex.weights.end(), static_cast<std::size_t>(t), turn.weight);
    total += s + t;
  }
  return ex;
}

std::pair<TokenizedExample, TokenizedExample> flatten_pair(const std::vector<EncodedTurn>& chosen,
                                                           const std::vector<EncodedTurn>& rejected,
                                                           std::int64_t cutoff_len) {
  if (chosen.empty() || chosen.size() != rejected.size())
    throw std::invalid_argument("flatten_pair: the chosen and rejected conversations differ in turns");
  std::vector<std::int32_t> prompt;  // every turn but the last answer (LlamaFactory's encode_oneturn)
  for (std::size_t i = 0; i + 1 < chosen.size(); ++i) {
    prompt.insert(prompt.end(), chosen[i].source.begin(), chosen[i].source.end());
    prompt.insert(prompt.end(), chosen[i].target.begin(), chosen[i].target.end());
  }
  prompt.insert(prompt.end(), chosen.back().source.begin(), chosen.back().source.end());
  const auto src = static_cast<std::int64_t>(prompt.size());
  const auto longer = static_cast<std::int64_t>(std::max(chosen.back().target.size(), rejected.back().target.size()));
  const auto [s, t] = infer_seqlen(src, longer, cutoff_len);  // the longer answer decides for both
  auto one = [&, s = s, t = t](const EncodedTurn& last) {
    TokenizedExample ex;
    const auto keep = std::min<std::int64_t>(t, static_cast<std::int64_t>(last.target.size()));
    ex.truncated = s < src || keep < static_cast<std::int64_t>(last.target.size());
    ex.ids.assign(prompt.begin(), prompt.begin() + s);
    ex.ids.insert(ex.ids.end(), last.target.begin(), last.target.begin() + keep);
    ex.weights.assign(static_cast<std::size_t>(s), 0.0f);
    ex.weights.insert(ex.weights.end(), static_cast<std::size_t>(keep), last.weight);
    return ex;
  };
  return {one(chosen.back()), one(rejected.back())};
}

std::vector<std::vector<std::int64_t>> greedy_knapsack(const std::vector<std::int64_t>& lengths,
                                                       std::int64_t capacity) {
  std::map<std::int64_t, std::vector<std::int64_t>> by_length;  // indices ascending per length
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] > capacity) {
      throw std::invalid_argument("greedy_knapsack: item " + std::to_string(i) + " is longer (" +
                                  std::to_string(lengths[i]) + ") than the capacity " +
                                  std::to_string(capacity));
    }
    by_length[lengths[i]].push_back(static_cast<std::int64_t>(i));
  }
  std::vector<std::vector<std::int64_t>> bins;
  while (!by_length.empty()) {
    std::vector<std::int64_t> bin;
    std::int64_t room = capacity;
    for (;;) {
      auto it = by_length.upper_bound(room);
      if (it == by_length.begin()) break;
      --it;
      room -= it->first;
      bin.push_back(it->second.back());
      it->second.pop_back();
      if (it->second.empty()) by_length.erase(it);
    }
    bins.push_back(std::move(bin));
  }
  return bins;
}

PackedSequences build_sft_sequences(std::vector<TokenizedExample> examples, std::int64_t cutoff_len,
                                    bool packing, bool neat, bool keep_untrained) {
  check_cutoff(cutoff_len);
  PackedSequences out;
  out.seq_len = cutoff_len;
  out.stats.examples = static_cast<std::int64_t>(examples.size());
  std::vector<TokenizedExample> kept;
  for (TokenizedExample& ex : examples) {
    if (static_cast<std::int64_t>(ex.ids.size()) > cutoff_len) {  // callers normally cut already
      ex.ids.resize(static_cast<std::size_t>(cutoff_len));
      ex.weights.resize(static_cast<std::size_t>(cutoff_len));
      ex.truncated = true;
    }
    out.stats.truncated += ex.truncated ? 1 : 0;
    if (!keep_untrained && !trains_something(ex)) {
      ++out.stats.dropped_untrained;
      continue;
    }
    kept.push_back(std::move(ex));
  }
  if (!packing) {
    for (const TokenizedExample& ex : kept) {
      append(out, ex, 1);
      close_sequence(out);
    }
    return out;
  }
  std::vector<std::int64_t> lengths;
  for (const TokenizedExample& ex : kept)
    lengths.push_back(static_cast<std::int64_t>(ex.ids.size()));
  for (const std::vector<std::int64_t>& bin : greedy_knapsack(lengths, cutoff_len)) {
    std::int32_t segment = 0;
    for (const std::int64_t i : bin)
      append(out, kept[static_cast<std::size_t>(i)], neat ? ++segment : 1);
    close_sequence(out);
  }
  return out;
}

PackedSequences build_pretrain_sequences(const std::vector<std::string>& docs, const Tokenizer& tok,
                                         std::int64_t cutoff_len, bool packing, bool neat,
                                         const std::string& source) {
  check_cutoff(cutoff_len);
  PackedSequences out;
  out.seq_len = cutoff_len;
  out.stats.examples = static_cast<std::int64_t>(docs.size());
  std::vector<std::int32_t> stream;
  std::vector<std::int32_t> doc_of;  // per stream token: its document number
  std::int32_t doc_no = 0;
  for (const std::string& doc : docs) {
    std::vector<std::int32_t> ids;
    if (tok.bos_id() >= 0) ids.push_back(tok.bos_id());
    for (const std::int32_t id : tok.encode(doc)) {
      if (id < 0 || id >= tok.vocab_size()) {
        throw std::out_of_range("tokenizer '" + tok.name() + "' returned id " + std::to_string(id) +
                                " outside its vocabulary");
      }
      ids.push_back(id);
    }
    if (tok.eos_id() >= 0) ids.push_back(tok.eos_id());
    ++doc_no;
    if (!packing) {
      TokenizedExample ex;
      ex.truncated = static_cast<std::int64_t>(ids.size()) > cutoff_len;
      if (ex.truncated) ids.resize(static_cast<std::size_t>(cutoff_len));
      ex.weights.assign(ids.size(), 1.0f);
      ex.ids = std::move(ids);
      out.stats.truncated += ex.truncated ? 1 : 0;
      if (ex.ids.size() < 2) {
        ++out.stats.dropped_untrained;
        continue;
      }
      append(out, ex, 1);
      close_sequence(out);
      continue;
    }
    stream.insert(stream.end(), ids.begin(), ids.end());
    doc_of.insert(doc_of.end(), ids.size(), doc_no);
  }
  if (!packing) return out;
  const auto total = static_cast<std::int64_t>(stream.size());
  const std::int64_t n = total / cutoff_len;
  if (n < 1) {
    throw UsageError((source.empty() ? std::string("the training data") : "'" + source + "'") +
                     " is too small for cutoff_len = " + std::to_string(cutoff_len) + ": its " +
                     std::to_string(docs.size()) + " documents make " + std::to_string(total) +
                     " tokens with the " + tok.name() +
                     " tokenizer (BOS/EOS included), fewer "
                     "than one sequence; use more data or a smaller cutoff_len");
  }
  out.stats.dropped_tokens = total - n * cutoff_len;
  for (std::int64_t s = 0; s < n; ++s) {
    std::int32_t segment = 1;
    for (std::int64_t t = s * cutoff_len; t < (s + 1) * cutoff_len; ++t) {
      const bool new_doc = t > s * cutoff_len && doc_of[t] != doc_of[t - 1];
      if (neat && new_doc) ++segment;
      out.tokens.push_back(stream[t]);
      out.segments.push_back(segment);
      out.weights.push_back(t == s * cutoff_len || (neat && new_doc) ? 0.0f : 1.0f);
    }
    close_sequence(out);
  }
  return out;
}

}  // namespace lft::data
