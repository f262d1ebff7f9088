// Pre-tokenizers: Split, ByteLevel, Metaspace, Sequence; and GPT-2's byte <-> char map.
#include <algorithm>
#include <stdexcept>

#include "hf_tokenizer_internal.h"

namespace lft::data::hf {

const std::array<char32_t, 256>& byte_to_char() {
  static const std::array<char32_t, 256> map = [] {
    std::array<char32_t, 256> m{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      m[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return m;
  }();
  return map;
}

int char_to_byte(char32_t c) {
  static const std::array<int, 324> inverse = [] {
    std::array<int, 324> m{};
    m.fill(-1);
    for (int b = 0; b < 256; ++b) m[byte_to_char()[b]] = b;
    return m;
  }();
  return c < inverse.size() ? inverse[c] : -1;
}

bool unmap_byte_level(std::string_view token, std::string& raw) {
  raw.clear();
  for (std::size_t i = 0; i < token.size();) {
    const int b = char_to_byte(next_code_point(token, i));
    if (b < 0) return false;
    raw.push_back(static_cast<char>(b));
  }
  return true;
}

namespace {

using Spans = std::vector<std::pair<std::size_t, std::size_t>>;
enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const std::string& name) {
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  throw std::invalid_argument("unsupported Split behavior '" + name + "'");
}

// NormalizedString::split of the library: the matches of a pattern and the text between them,
// grouped by `behavior`; empty pieces are dropped (PreTokenizedString::split does).
void split_by(std::string_view text, const Spans& matches, Behavior behavior, bool invert,
              bool at_origin, const PieceSink& sink) {
  if (text.empty()) return;
  struct Part {
    std::size_t start, end;
    bool match;
  };
  std::vector<Part> parts;
  parts.reserve(2 * matches.size() + 1);
  std::size_t prev = 0;
  for (const auto& [start, end] : matches) {
    if (prev != start) parts.push_back({prev, start, invert});
    parts.push_back({start, end, !invert});
    prev = end;
  }
  if (prev != text.size()) parts.push_back({prev, text.size(), invert});

  std::vector<Part> groups;  // `match` now means "remove"
  bool previous = false;
  switch (behavior) {
    case Behavior::kIsolated:
    case Behavior::kRemoved:
      for (const Part& p : parts)
        groups.push_back({p.start, p.end, behavior == Behavior::kRemoved && p.match});
      break;
    case Behavior::kContiguous:
      for (const Part& p : parts) {
        if (p.match == previous && !groups.empty())
          groups.back().end = p.end;
        else
          groups.push_back({p.start, p.end, false});
        previous = p.match;
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (const Part& p : parts) {
        if (p.match && !previous && !groups.empty())
          groups.back().end = p.end;
        else
          groups.push_back({p.start, p.end, false});
        previous = p.match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->match && !previous && !groups.empty())
          groups.back().start = it->start;
        else
          groups.push_back({it->start, it->end, false});
        previous = it->match;
      }
      std::reverse(groups.begin(), groups.end());
      break;
  }
  for (const Part& g : groups) {
    if (!g.match && g.end > g.start)
      sink(text.substr(g.start, g.end - g.start), at_origin && g.start == 0);
  }
}

class Split final : public PreTokenizer {
 public:
  explicit Split(const Json& j)
      : pattern_(j.at("pattern")),
        behavior_(parse_behavior(j.at("behavior").get<std::string>())),
        invert_(j.value("invert", false)) {}
  void split(std::string_view text, bool at_origin, const PieceSink& sink) const override {
    Spans matches;
    pattern_.find_all(text, matches);
    if (behavior_ == Behavior::kIsolated && !invert_) {  // the common case, without copies
      std::size_t prev = 0;
      for (const auto& [start, end] : matches) {
        if (prev != start) sink(text.substr(prev, start - prev), at_origin && prev == 0);
        if (end > start) sink(text.substr(start, end - start), at_origin && start == 0);
        prev = end;
      }
      if (prev != text.size()) sink(text.substr(prev), at_origin && prev == 0);
      return;
    }
    split_by(text, matches, behavior_, invert_, at_origin, sink);
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

// Works on raw bytes (see make_pre_tokenizer); only the optional GPT-2 regex split is left to do.
class ByteLevel final : public PreTokenizer {
 public:
  explicit ByteLevel(const Json& j)
      : add_prefix_space_(j.value("add_prefix_space", true)),
        use_regex_(j.value("use_regex", true)) {
    if (use_regex_) {
      regex_ = std::make_unique<Regex>(
          R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)");
    }
  }
  void split(std::string_view text, bool at_origin, const PieceSink& sink) const override {
    std::string prefixed;
    if (add_prefix_space_ && !text.empty() && text.front() != ' ') {
      prefixed = " ";
      prefixed.append(text);
      text = prefixed;
    }
    if (!use_regex_) {
      if (!text.empty()) sink(text, at_origin);
      return;
    }
    Spans matches;
    regex_->find_all(text, matches);
    split_by(text, matches, Behavior::kIsolated, false, at_origin, sink);
  }

 private:
  bool add_prefix_space_, use_regex_;
  std::unique_ptr<Regex> regex_;
};

class Metaspace final : public PreTokenizer {
 public:
  explicit Metaspace(const Json& j) {
    const std::string rep = j.value("replacement", "\u2581");
    std::size_t i = 0;
    if (rep.empty() || (next_code_point(rep, i), i != rep.size())) {
      throw std::invalid_argument("Metaspace replacement must be one character, not '" + rep + "'");
    }
    replacement_ = rep;
    std::string scheme = j.value("prepend_scheme", "");
    if (scheme.empty()) scheme = j.value("add_prefix_space", true) ? "always" : "never";
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      throw std::invalid_argument("unsupported Metaspace prepend_scheme '" + scheme + "'");
    }
    prepend_ = scheme == "always" ? 2 : scheme == "first" ? 1 : 0;
    split_ = j.value("split", true);
  }
  void split(std::string_view text, bool at_origin, const PieceSink& sink) const override {
    std::string s;
    s.reserve(text.size() + 8);
    for (const char c : text) {
      if (c == ' ')
        s.append(replacement_);
      else
        s.push_back(c);
    }
    const bool starts = s.compare(0, replacement_.size(), replacement_) == 0;
    if (!starts && (prepend_ == 2 || (prepend_ == 1 && at_origin))) s.insert(0, replacement_);
    if (!split_) {
      if (!s.empty()) sink(s, at_origin);
      return;
    }
    Spans matches;
    for (std::size_t at = s.find(replacement_); at != std::string::npos;
         at = s.find(replacement_, at + replacement_.size())) {
      matches.emplace_back(at, at + replacement_.size());
    }
    split_by(s, matches, Behavior::kMergedWithNext, false, at_origin, sink);
  }

 private:
  std::string replacement_;
  int prepend_;  // 0 never, 1 first, 2 always
  bool split_;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void split(std::string_view text, bool at_origin, const PieceSink& sink) const override {
    run(0, text, at_origin, sink);
  }

 private:
  void run(std::size_t step, std::string_view text, bool at_origin, const PieceSink& sink) const {
    if (step == steps_.size()) return sink(text, at_origin);
    steps_[step]->split(text, at_origin, [&](std::string_view piece, bool origin) {
      run(step + 1, piece, origin, sink);
    });
  }
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

std::unique_ptr<PreTokenizer> make_one(const Json& j, bool last, bool& byte_level) {
  const std::string type = j.value("type", "");
  if (type == "ByteLevel") {
    if (!last)
      throw std::invalid_argument(
          "a ByteLevel pre-tokenizer that is not the last step is not supported");
    byte_level = true;
    return std::make_unique<ByteLevel>(j);
  }
  if (type == "Split") return std::make_unique<Split>(j);
  if (type == "Metaspace") return std::make_unique<Metaspace>(j);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    const Json& list = j.at("pretokenizers");
    for (std::size_t i = 0; i < list.size(); ++i) {
      steps.push_back(make_one(list[i], last && i + 1 == list.size(), byte_level));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  throw std::invalid_argument("unsupported pre_tokenizer type '" + type +
                              "' (supported: ByteLevel, Split, Metaspace, Sequence)");
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, bool& byte_level) {
  byte_level = false;
  if (j.is_null()) return nullptr;
  return make_one(j, true, byte_level);
}

}  // namespace lft::data::hf
