// Normalizers: NFC/NFD/NFKC/NFKD (utf8proc), Replace, Prepend, Sequence.
#include <utf8proc.h>

#include <cstdlib>
#include <stdexcept>

#include "hf_tokenizer_internal.h"

namespace lft::data::hf {
namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  UnicodeNormalizer(int options, bool composes) : options_(options), composes_(composes) {}
  void normalize(std::string& text) const override {
    // Below U+0300 every char is its own NFC (NFC_Quick_Check=Yes): most text skips utf8proc.
    if (composes_ && !(options_ & UTF8PROC_COMPAT)) {
      bool simple = true;
      for (const char c : text) simple = simple && static_cast<unsigned char>(c) < 0xCC;
      if (simple) return;
    }
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                            static_cast<utf8proc_ssize_t>(text.size()), &out,
                                            static_cast<utf8proc_option_t>(options_));
    if (n < 0) throw std::runtime_error(std::string("utf8proc: ") + utf8proc_errmsg(n));
    text.assign(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
    std::free(out);
  }

 private:
  int options_;
  bool composes_;
};

class Replace final : public Normalizer {
 public:
  explicit Replace(const Json& j) : pattern_(j.at("pattern")), content_(j.at("content")) {}
  void normalize(std::string& text) const override {
    std::vector<std::pair<std::size_t, std::size_t>> spans;
    pattern_.find_all(text, spans);
    if (spans.empty()) return;
    std::string out;
    out.reserve(text.size() + spans.size() * content_.size());
    std::size_t at = 0;
    for (const auto& [start, end] : spans) {
      out.append(text, at, start - at);
      out.append(content_);
      at = end;
    }
    out.append(text, at, std::string::npos);
    text.swap(out);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(const Json& j) : prepend_(j.at("prepend")) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(const Json& j) {
    for (const Json& n : j.at("normalizers")) {
      if (auto made = make_normalizer(n)) steps_.push_back(std::move(made));
    }
  }
  void normalize(std::string& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const Json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = j.value("type", "");
  if (type == "NFC")
    return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE, true);
  if (type == "NFD")
    return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, false);
  if (type == "NFKC") {
    return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
                                               true);
  }
  if (type == "NFKD") {
    return std::make_unique<UnicodeNormalizer>(
        UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, false);
  }
  if (type == "Replace") return std::make_unique<Replace>(j);
  if (type == "Prepend") return std::make_unique<Prepend>(j);
  if (type == "Sequence") return std::make_unique<Sequence>(j);
  throw std::invalid_argument("unsupported normalizer type '" + type +
                              "' (supported: NFC, NFD, NFKC, NFKD, Replace, Prepend, Sequence)");
}

}  // namespace lft::data::hf
