// Decoders: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence.
#include <stdexcept>

#include "hf_tokenizer_internal.h"

namespace lft::data::hf {
namespace {

std::string join(const std::vector<std::string>& tokens, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out.append(separator);
    out.append(tokens[i]);
  }
  return out;
}

class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes, raw;
    for (const std::string& t : tokens) {
      // A token with a char outside the alphabet (an added token) goes through unchanged.
      if (unmap_byte_level(t, raw))
        bytes.append(raw);
      else
        bytes.append(t);
    }
    tokens.assign(1, repair_utf8(bytes));
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  explicit ReplaceDecoder(const Json& j) : pattern_(j.at("pattern")), content_(j.at("content")) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::pair<std::size_t, std::size_t>> spans;
    for (std::string& t : tokens) {
      pattern_.find_all(t, spans);
      std::string out;
      std::size_t at = 0;
      for (const auto& [start, end] : spans) {
        out.append(t, at, start - at).append(content_);
        at = end;
      }
      out.append(t, at, std::string::npos);
      t.swap(out);
    }
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    const auto flush = [&] {
      if (bytes.empty()) return;
      if (is_valid_utf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (std::size_t i = 0; i < bytes.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
    };
    for (std::string& t : tokens) {
      int value = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        const auto hex = [](char c) {
          if (c >= '0' && c <= '9') return c - '0';
          if (c >= 'a' && c <= 'f') return c - 'a' + 10;
          if (c >= 'A' && c <= 'F') return c - 'A' + 10;
          return -1;
        };
        const int hi = hex(t[3]), lo = hex(t[4]);
        if (hi >= 0 && lo >= 0) value = hi * 16 + lo;
      }
      if (value >= 0) {
        bytes.push_back(static_cast<char>(value));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    tokens.assign(1, join(tokens, ""));
  }
};

class StripDecoder final : public Decoder {
 public:
  explicit StripDecoder(const Json& j)
      : content_(j.at("content").get<std::string>()),
        start_(j.value("start", std::size_t{0})),
        stop_(j.value("stop", std::size_t{0})) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<std::pair<std::size_t, std::size_t>> chars;  // byte spans of the chars
      for (std::size_t i = 0; i < t.size();) {
        const std::size_t s = i;
        next_code_point(t, i);
        chars.emplace_back(s, i);
      }
      const auto is_content = [&](std::size_t k) {
        return t.compare(chars[k].first, chars[k].second - chars[k].first, content_) == 0;
      };
      std::size_t begin = 0, end = chars.size();
      for (std::size_t k = 0; k < start_ && k < chars.size() && is_content(k); ++k) begin = k + 1;
      for (std::size_t k = 0; k < stop_ && k < chars.size() && is_content(chars.size() - 1 - k);
           ++k) {
        end = chars.size() - 1 - k;
      }
      if (begin >= end) {
        t.clear();
      } else {
        const std::size_t from = chars[begin].first;
        t = t.substr(from, chars[end - 1].second - from);
      }
    }
  }

 private:
  std::string content_;
  std::size_t start_, stop_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  explicit MetaspaceDecoder(const Json& j) : replacement_(j.value("replacement", "\u2581")) {
    std::string scheme = j.value("prepend_scheme", "");
    if (scheme.empty()) scheme = j.value("add_prefix_space", true) ? "always" : "never";
    strip_first_ = scheme != "never";
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (std::size_t at = 0; at < t.size();) {
        if (t.compare(at, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && strip_first_))
            out.push_back(' ');  // the library drops every one in token 0
          at += replacement_.size();
        } else {
          out.push_back(t[at++]);
        }
      }
      tokens[i].swap(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(const Json& j) {
    for (const Json& d : j.at("decoders")) {
      if (auto made = make_decoder(d)) steps_.push_back(std::move(made));
    }
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const Json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = j.value("type", "");
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(j);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") return std::make_unique<StripDecoder>(j);
  if (type == "Metaspace") return std::make_unique<MetaspaceDecoder>(j);
  if (type == "Sequence") return std::make_unique<SequenceDecoder>(j);
  throw std::invalid_argument("unsupported decoder type '" + type +
                              "' (supported: ByteLevel, Replace, ByteFallback, Fuse, Strip, "
                              "Metaspace, Sequence)");
}

std::string run_decoder(const Decoder* decoder, std::vector<std::string> tokens) {
  if (decoder == nullptr) return join(tokens, " ");
  decoder->decode_chain(tokens);
  return join(tokens, "");
}

}  // namespace lft::data::hf
