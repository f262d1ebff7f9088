// UTF-8 decoding and Python's str operations that chat templates lean on (strip, case changes),
// code point by code point, as Python counts. Case mapping covers ASCII, Latin-1, Greek and
// Cyrillic; other scripts either have no case (CJK) or are left unchanged (NOTES.md).
#include "jinja_builtins.h"

namespace lft::data::jinja {
namespace {

std::uint32_t to_upper_cp(std::uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 32;
  if (c == 0xff) return 0x178;
  if (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) return c - 32;
  if (c >= 0x430 && c <= 0x44f) return c - 32;
  if (c >= 0x450 && c <= 0x45f) return c - 80;
  return c;
}

std::uint32_t to_lower_cp(std::uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xc0 && c <= 0xde && c != 0xd7)) return c + 32;
  if (c == 0x178) return 0xff;
  if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 32;
  if (c >= 0x410 && c <= 0x42f) return c + 32;
  if (c >= 0x400 && c <= 0x40f) return c + 80;
  return c;
}

bool is_cased(std::uint32_t c) { return to_upper_cp(c) != c || to_lower_cp(c) != c; }

template <class F>
std::string map_cps(const std::string& s, F f) {
  std::string out;
  out.reserve(s.size());
  for (std::uint32_t c : utf8_decode(s)) utf8_append(out, f(c));
  return out;
}

}  // namespace

std::string python_upper(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::uint32_t c : utf8_decode(s)) {
    if (c == 0xdf)
      out += "SS";  // Python's full case mapping of ß
    else
      utf8_append(out, to_upper_cp(c));
  }
  return out;
}
std::string python_lower(const std::string& s) { return map_cps(s, to_lower_cp); }

std::string python_capitalize(const std::string& s) {
  bool first = true;
  return map_cps(s, [&](std::uint32_t c) {
    const std::uint32_t r = first ? to_upper_cp(c) : to_lower_cp(c);
    first = false;
    return r;
  });
}

// jinja2's title filter (not str.title): words start after runs of "-", whitespace, "(", "{",
// "[" or "<"; the first character of a word is upper-cased, the rest lower-cased.
std::string python_title(const std::string& s) {
  bool word_start = true;
  return map_cps(s, [&](std::uint32_t c) {
    const bool separator =
        c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_python_space(c);
    if (separator) {
      word_start = true;
      return c;
    }
    const std::uint32_t r = word_start ? to_upper_cp(c) : to_lower_cp(c);
    word_start = false;
    return r;
  });
}

// str.title() differs from the filter: a word is a run of cased characters.
std::string python_str_title(const std::string& s) {
  bool previous_cased = false;
  return map_cps(s, [&](std::uint32_t c) {
    const std::uint32_t r = previous_cased ? to_lower_cp(c) : to_upper_cp(c);
    previous_cased = is_cased(c);
    return r;
  });
}

Value python_str_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<std::uint32_t> set;
  const bool whitespace = !chars || chars->is_none();
  if (!whitespace) {
    if (!chars->is_string()) fail(ErrorKind::kType, "strip arg must be None or str");
    set = utf8_decode(chars->str());
  }
  const auto strip_it = [&](std::uint32_t c) {
    if (whitespace) return is_python_space(c);
    for (auto x : set) {
      if (x == c) return true;
    }
    return false;
  };
  if (is_ascii(s)) {
    std::size_t b = 0, e = s.size();
    if (left)
      while (b < e && strip_it(static_cast<unsigned char>(s[b]))) ++b;
    if (right)
      while (e > b && strip_it(static_cast<unsigned char>(s[e - 1]))) --e;
    return Value::string(s.substr(b, e - b));
  }
  const auto cps = utf8_decode(s);
  std::size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return Value::string(utf8_encode(std::vector<std::uint32_t>(cps.begin() + static_cast<long>(b),
                                                              cps.begin() + static_cast<long>(e))));
}

// str.splitlines(): every Python line boundary, "\r\n" counting once.
std::vector<std::string> python_splitlines(const std::string& s) {
  std::vector<std::string> lines;
  const auto cps = utf8_decode(s);
  std::vector<std::uint32_t> line;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    const std::uint32_t c = cps[i];
    const bool boundary = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c ||
                          c == 0x1d || c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) {
      line.push_back(c);
      continue;
    }
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    lines.push_back(utf8_encode(line));
    line.clear();
  }
  if (!line.empty()) lines.push_back(utf8_encode(line));
  return lines;
}

// ---- UTF-8 -------------------------------------------------------------------------------------

std::vector<std::uint32_t> utf8_decode(const std::string& s) {
  std::vector<std::uint32_t> out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::uint32_t cp = c;
    std::size_t n = 1;
    if (c >= 0xf0) {
      n = 4;
      cp = c & 0x07;
    } else if (c >= 0xe0) {
      n = 3;
      cp = c & 0x0f;
    } else if (c >= 0xc0) {
      n = 2;
      cp = c & 0x1f;
    }
    if (i + n > s.size()) {  // truncated sequence: keep the byte
      n = 1;
      cp = c;
    }
    for (std::size_t k = 1; k < n; ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    out.push_back(cp);
    i += n;
  }
  return out;
}

void utf8_append(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::string utf8_encode(const std::vector<std::uint32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (auto cp : cps) utf8_append(out, cp);
  return out;
}

std::int64_t utf8_length(const std::string& s) {
  std::int64_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

bool is_ascii(const std::string& s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

bool is_python_space(std::uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

}  // namespace lft::data::jinja
