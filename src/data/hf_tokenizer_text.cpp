// UTF-8, the Unicode classes added-token matching needs, and the PCRE2 regex wrapper.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <stdexcept>

#include "hf_tokenizer_internal.h"

namespace lft::data::hf {
namespace {

// Length of the well-formed UTF-8 sequence at s[i] (Unicode Table 3-7), or 0 when there is none;
// then `maximal` is the length of the maximal subpart of an ill-formed sequence (at least 1).
std::size_t sequence_length(std::string_view s, std::size_t i, std::size_t& maximal) {
  const auto byte = [&](std::size_t k) -> unsigned {
    return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0x100;
  };
  const unsigned b0 = byte(0);
  maximal = 1;
  if (b0 < 0x80) return 1;
  std::size_t n;
  unsigned lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (std::size_t k = 1; k < n; ++k) {
    const unsigned b = byte(k);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      maximal = k;
      return 0;
    }
  }
  return n;
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  std::size_t i = 0, maximal = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t n = sequence_length(s, i, maximal);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string repair_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  std::size_t i = 0, maximal = 0;
  while (i < s.size()) {
    const std::size_t n = sequence_length(s, i, maximal);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i += maximal;
    }
  }
  return out;
}

char32_t next_code_point(std::string_view s, std::size_t& i) {
  const auto b = [&](std::size_t k) {
    return static_cast<char32_t>(static_cast<unsigned char>(s[i + k]));
  };
  char32_t c = b(0);
  if (c < 0x80) {
    i += 1;
  } else if (c < 0xE0) {
    c = ((c & 0x1F) << 6) | (b(1) & 0x3F);
    i += 2;
  } else if (c < 0xF0) {
    c = ((c & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    i += 3;
  } else {
    c = ((c & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    i += 4;
  }
  return c;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_word_char(char32_t c) {
  if (c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9)) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// ---- Regex ---------------------------------------------------------------------------------
namespace {

// Unicode White_Space, Oniguruma's \s; PCRE2's \s (UCP) also matches U+180E, which the code
// point sweep of tests/e2e/tokenizer_parity.py caught.
constexpr const char* kSpaceSet =
    R"(\x{09}-\x{0D} \x{85}\x{A0}\x{1680}\x{2000}-\x{200A})"
    R"(\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// The pattern with the escapes whose meaning differs between Oniguruma (Ruby syntax) and PCRE2
// rewritten: \s, \S (outside classes) and \h, \H (hex digits in Oniguruma).
std::string to_pcre2(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[++i];
      const std::string set = d == 's' || d == 'S' ? kSpaceSet : "0-9a-fA-F";
      if (d == 's' || d == 'h') {
        out += in_class ? set : "[" + set + "]";
      } else if ((d == 'S' || d == 'H') && !in_class) {
        out += "[^" + set + "]";
      } else {
        out += c;
        out += d;
      }
      continue;
    }
    out += c;
    if (!in_class && c == '[') {
      in_class = true;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ] is literal
    } else if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      const std::size_t end = p.find(":]", i + 2);  // a POSIX class, [:alpha:]
      if (end != std::string::npos) {
        out.append(p, i + 1, end + 2 - (i + 1));
        i = end + 1;
      }
    } else if (in_class && c == ']') {
      in_class = false;
    }
  }
  return out;
}

// Per-thread match state: a JIT stack may only be used by one thread at a time.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
  MatchScratch() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchScratch() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

}  // namespace

Regex::Regex(const std::string& oniguruma) {
  const std::string pattern = to_pcre2(oniguruma);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, context);
  pcre2_compile_context_free(context);
  if (code_ == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw std::invalid_argument("regex '" + oniguruma + "' does not compile with PCRE2 at offset " +
                                std::to_string(offset) + ": " +
                                reinterpret_cast<const char*>(message));
  }
  jit_ = pcre2_jit_compile(static_cast<pcre2_code*>(code_), PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view text,
                     std::vector<std::pair<std::size_t, std::size_t>>& out) const {
  out.clear();
  MatchScratch& s = scratch();
  const auto* code = static_cast<const pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t at = 0;
  std::size_t last_end = static_cast<std::size_t>(-1);
  while (at <= text.size()) {
    // Input is valid UTF-8 (repaired on the way in), so PCRE2's check would only cost time.
    const int rc =
        jit_
            ? pcre2_jit_match(code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, s.data, s.context)
            : pcre2_match(code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, s.data, s.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      throw std::runtime_error(std::string("PCRE2 match failed: ") +
                               reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(s.data);
    const std::size_t start = ovector[0], end = ovector[1];
    if (start == end && end == last_end) {
      // Oniguruma's rule: no empty match right after the previous one; retry one char later.
      if (at >= text.size()) break;
      std::size_t next = at;
      next_code_point(text, next);
      at = next;
      continue;
    }
    out.emplace_back(start, end);
    last_end = end;
    if (end == start) {
      if (end >= text.size()) break;
      std::size_t next = end;
      next_code_point(text, next);
      at = next;
    } else {
      at = end;
    }
  }
}

Pattern::Pattern(const Json& j) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) {
    literal_ = j["String"].get<std::string>();
  } else if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
    regex_ = std::make_unique<Regex>(j["Regex"].get<std::string>());
  } else {
    throw std::invalid_argument("unsupported pattern " + j.dump() +
                                " (expected {\"String\": ...} or {\"Regex\": ...})");
  }
}

void Pattern::find_all(std::string_view text,
                       std::vector<std::pair<std::size_t, std::size_t>>& out) const {
  if (regex_) return regex_->find_all(text, out);
  out.clear();
  if (literal_.empty()) return;
  for (std::size_t at = text.find(literal_); at != std::string_view::npos;
       at = text.find(literal_, at + literal_.size())) {
    out.emplace_back(at, at + literal_.size());
  }
}

}  // namespace lft::data::hf
