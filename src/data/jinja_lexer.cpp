// The lexer follows jinja2's (lexer.py) rule by rule, because the whitespace a chat template
// leaves depends on them: newlines are normalised and one trailing newline dropped
// (keep_trailing_newline=False); "{%-"/"{{-"/"{#-" strip all whitespace before the tag and
// "-%}"/"-}}"/"-#}" all whitespace after it; trim_blocks drops one newline after "%}" and "#}"
// (never after "}}"); lstrip_blocks drops spaces and tabs between a line start and "{%" or "{#"
// unless the tag starts with "+". An end marker inside open brackets is not an end marker.
#include <cctype>
#include <cstring>

#include "jinja_ast.h"

namespace lft::data::jinja {
namespace {

// Length in bytes of the whitespace code point at s[i] (Python's \s), or 0.
std::size_t space_at(const std::string& s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) ? 1 : 0;
  std::size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
  if (i + n > s.size()) return 0;
  const auto cps = utf8_decode(s.substr(i, n));
  return cps.size() == 1 && is_python_space(cps[0]) ? n : 0;
}

std::size_t skip_spaces(const std::string& s, std::size_t i) {
  while (i < s.size()) {
    const std::size_t n = space_at(s, i);
    if (!n) break;
    i += n;
  }
  return i;
}

std::string rstrip_spaces(const std::string& s) {
  // Walk forward, remembering where the trailing run of whitespace starts.
  std::size_t keep = 0;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = space_at(s, i);
    if (n) {
      i += n;
    } else {
      i += 1;
      while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xc0) == 0x80) ++i;
      keep = i;
    }
  }
  return s.substr(0, keep);
}

bool all_spaces(const std::string& s, std::size_t from) {
  return from < s.size() && skip_spaces(s, from) == s.size();
}

std::string normalize_source(const std::string& text) {
  std::string s;
  s.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r') {
      s += '\n';
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else {
      s += text[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

class Lexer {
 public:
  Lexer(const std::string& text, const std::string& name)
      : s_(normalize_source(text)), name_(name) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < s_.size()) {
      const std::size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_data(s_.substr(pos_));
        break;
      }
      std::string text = s_.substr(pos_, tag - pos_);
      const char type = s_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < s_.size() ? s_[tag + 2] : '\0';
      const bool raw = type == '%' && is_raw_begin(tag);
      if (sign == '-') {
        text = rstrip_spaces(text);
      } else if (sign != '+' && type != '{') {
        const std::size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((l_pos > 0 || line_starting) && all_spaces(text, l_pos)) text.resize(l_pos);
      }
      emit_data(text);
      line_ = line_at(tag);
      pos_ = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (raw) {
        lex_raw();
      } else if (type == '#') {
        lex_comment();
      } else {
        lex_tag(type == '{');
      }
      line_starting = pos_ > 0 && s_[pos_ - 1] == '\n';
    }
    tokens_.push_back({Token::Kind::kEnd, "", line_at(s_.size())});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void syntax_error(const std::string& message, int line) {
    throw Error(ErrorKind::kSyntax, message, name_, line);
  }

  int line_at(std::size_t pos) {
    // Lines are counted incrementally: positions only move forward.
    for (; counted_ < pos && counted_ < s_.size(); ++counted_) {
      if (s_[counted_] == '\n') ++counted_line_;
    }
    return counted_line_;
  }

  std::size_t find_tag(std::size_t from) const {
    for (std::size_t i = s_.find('{', from); i != std::string::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  bool is_raw_begin(std::size_t tag) const {
    std::size_t i = tag + 2;
    if (i < s_.size() && (s_[i] == '-' || s_[i] == '+')) ++i;
    i = skip_spaces(s_, i);
    if (s_.compare(i, 3, "raw") != 0) return false;
    i = skip_spaces(s_, i + 3);
    return s_.compare(i, 2, "%}") == 0 || s_.compare(i, 3, "-%}") == 0;
  }

  void emit_data(const std::string& text) {
    if (!text.empty()) tokens_.push_back({Token::Kind::kData, text, line_});
  }

  // After "%}" (or "#}"): trim_blocks eats one newline; after "-%}" all whitespace goes.
  void after_block_end(bool minus, bool plus) {
    if (minus) {
      pos_ = skip_spaces(s_, pos_);
    } else if (!plus && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
    }
  }

  void lex_comment() {
    const std::size_t end = s_.find("#}", pos_);
    if (end == std::string::npos) syntax_error("Missing end of comment tag", line_);
    const bool minus = end > pos_ && s_[end - 1] == '-';
    const bool plus = end > pos_ && s_[end - 1] == '+';
    pos_ = end + 2;
    after_block_end(minus, plus);
  }

  void lex_raw() {
    // Skip "raw" and the rest of the opening tag; no trim_blocks newline after it (jinja2's regex).
    pos_ = skip_spaces(s_, pos_);
    pos_ = skip_spaces(s_, pos_ + 3);
    if (s_[pos_] == '-') {
      pos_ = skip_spaces(s_, pos_ + 3);
    } else {
      pos_ += 2;
    }
    if (pos_ >= s_.size()) return;  // jinja2 stops at the end of the source without complaint
    for (std::size_t i = s_.find("{%", pos_); i != std::string::npos; i = s_.find("{%", i + 1)) {
      std::size_t j = i + 2;
      const char sign = j < s_.size() ? s_[j] : '\0';
      if (sign == '-' || sign == '+') ++j;
      j = skip_spaces(s_, j);
      if (s_.compare(j, 6, "endraw") != 0) continue;
      j = skip_spaces(s_, j + 6);
      bool minus = false, plus = false;
      if (s_.compare(j, 3, "-%}") == 0) {
        minus = true, j += 3;
      } else if (s_.compare(j, 3, "+%}") == 0) {
        plus = true, j += 3;
      } else if (s_.compare(j, 2, "%}") == 0) {
        j += 2;
      } else {
        continue;
      }
      std::string text = s_.substr(pos_, i - pos_);
      if (sign == '-') {
        text = rstrip_spaces(text);
      } else if (sign != '+') {
        const std::size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if (l_pos > 0 && all_spaces(text, l_pos)) text.resize(l_pos);
      }
      emit_data(text);
      pos_ = j;
      after_block_end(minus, plus);
      return;
    }
    syntax_error("Missing end of raw directive", line_);
  }

  void lex_tag(bool variable) {
    tokens_.push_back(
        {variable ? Token::Kind::kVariableBegin : Token::Kind::kBlockBegin, "", line_});
    std::string open;  // open brackets: an end marker inside them is an operator
    while (true) {
      pos_ = skip_spaces(s_, pos_);
      if (pos_ >= s_.size()) {
        syntax_error(std::string("unexpected end of template, expected '") +
                         (variable ? "end of print statement" : "end of statement block") + "'",
                     line_at(pos_));
      }
      const int line = line_at(pos_);
      if (open.empty() && end_marker(variable)) return;
      const char c = s_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        std::size_t j = pos_;
        while (j < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[j])) || s_[j] == '_'))
          ++j;
        tokens_.push_back({Token::Kind::kName, s_.substr(pos_, j - pos_), line});
        pos_ = j;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number(line);
      } else if (c == '\'' || c == '"') {
        lex_string(line);
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                           "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                           ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};
        const char* op = nullptr;
        for (const char* candidate : kOps) {
          if (s_.compare(pos_, std::strlen(candidate), candidate) == 0) {
            op = candidate;
            break;
          }
        }
        if (!op) syntax_error(std::string("unexpected char '") + c + "'", line);
        if (*op == '(' || *op == '[' || *op == '{') open += *op;
        if (*op == ')' || *op == ']' || *op == '}') {
          if (open.empty()) syntax_error(std::string("unexpected '") + op + "'", line);
          const char expected = open.back() == '(' ? ')' : open.back() == '[' ? ']' : '}';
          if (*op != expected) {
            syntax_error(std::string("unexpected '") + op + "', expected '" + expected + "'", line);
          }
          open.pop_back();
        }
        tokens_.push_back({Token::Kind::kOperator, op, line});
        pos_ += std::strlen(op);
      }
    }
  }

  bool end_marker(bool variable) {
    const char* close = variable ? "}}" : "%}";
    const int line = line_at(pos_);
    const Token::Kind kind = variable ? Token::Kind::kVariableEnd : Token::Kind::kBlockEnd;
    if (s_[pos_] == '-' && s_.compare(pos_ + 1, 2, close) == 0) {
      pos_ += 3;
      pos_ = skip_spaces(s_, pos_);
    } else if (!variable && s_[pos_] == '+' && s_.compare(pos_ + 1, 2, close) == 0) {
      pos_ += 3;
    } else if (s_.compare(pos_, 2, close) == 0) {
      pos_ += 2;
      if (!variable) after_block_end(false, false);
    } else {
      return false;
    }
    tokens_.push_back({kind, "", line});
    return true;
  }

  void lex_number(int line) {
    std::size_t j = pos_;
    auto digits = [&] {
      while (j < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[j])) || s_[j] == '_'))
        ++j;
    };
    digits();
    bool is_float = false;
    // jinja2's float rule cannot start right after a dot: "x.0.1" is x[0][1].
    const bool after_dot = pos_ > 0 && s_[pos_ - 1] == '.';
    if (!after_dot && j + 1 < s_.size() && s_[j] == '.' &&
        std::isdigit(static_cast<unsigned char>(s_[j + 1]))) {
      is_float = true;
      ++j;
      digits();
    }
    if (!after_dot && j < s_.size() && (s_[j] == 'e' || s_[j] == 'E')) {
      std::size_t k = j + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (k < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k]))) {
        is_float = true;
        j = k;
        digits();
      }
    }
    std::string text;
    for (std::size_t k = pos_; k < j; ++k) {
      if (s_[k] != '_') text += s_[k];
    }
    Token t{is_float ? Token::Kind::kFloat : Token::Kind::kInteger, text, line};
    if (is_float)
      t.floating = std::strtod(text.c_str(), nullptr);
    else
      t.integer = std::strtoll(text.c_str(), nullptr, 10);
    tokens_.push_back(t);
    pos_ = j;
  }

  // Python's "unicode-escape" decoding, which jinja2 applies to string literals.
  void lex_string(int line) {
    const char quote = s_[pos_];
    std::string out;
    std::size_t j = pos_ + 1;
    while (true) {
      if (j >= s_.size()) syntax_error("unexpected end of string", line);
      const char c = s_[j];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++j;
        continue;
      }
      if (j + 1 >= s_.size()) syntax_error("unexpected end of string", line);
      const char e = s_[j + 1];
      j += 2;
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case '\n':
          break;  // line continuation
        case 'N':
          syntax_error(
              "\\N{...} escapes are not supported (jinja2: malformed \\N character escape)", line);
        case 'x':
        case 'u':
        case 'U': {
          const std::size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (j + n > s_.size()) syntax_error("truncated \\" + std::string(1, e) + " escape", line);
          const std::string hex = s_.substr(j, n);
          for (char h : hex) {
            if (!std::isxdigit(static_cast<unsigned char>(h))) {
              syntax_error("truncated \\" + std::string(1, e) + " escape", line);
            }
          }
          utf8_append(out, static_cast<std::uint32_t>(std::strtoul(hex.c_str(), nullptr, 16)));
          j += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            std::uint32_t v = static_cast<std::uint32_t>(e - '0');
            for (int k = 0; k < 2 && j < s_.size() && s_[j] >= '0' && s_[j] <= '7'; ++k, ++j) {
              v = v * 8 + static_cast<std::uint32_t>(s_[j] - '0');
            }
            utf8_append(out, v);
          } else {
            out += '\\';  // unknown escapes keep their backslash
            out += e;
          }
      }
    }
    tokens_.push_back({Token::Kind::kString, out, line});
    pos_ = j + 1;
  }

  std::string s_;
  std::string name_;
  std::size_t pos_ = 0;
  int line_ = 1;
  std::size_t counted_ = 0;
  int counted_line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source, const std::string& name) {
  return Lexer(source, name).run();
}

}  // namespace lft::data::jinja
