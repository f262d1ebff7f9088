#include "store_bytes.h"

#include <cstring>
#include <stdexcept>

namespace lft::ckpt::detail {

void Hasher::bytes(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h_ ^= p[i];
    h_ *= 1099511628211ULL;
  }
}

void Hasher::str(const std::string& s) {
  i64(static_cast<int64_t>(s.size()));
  bytes(s.data(), s.size());
}

void Hasher::i64(int64_t v) { bytes(&v, sizeof(v)); }

void ByteWriter::i64(int64_t v) { buf_.append(reinterpret_cast<const char*>(&v), sizeof(v)); }

void ByteWriter::str(const std::string& s) {
  i64(static_cast<int64_t>(s.size()));
  buf_ += s;
}

void ByteWriter::vec(const std::vector<int64_t>& v) {
  i64(static_cast<int64_t>(v.size()));
  for (int64_t x : v) i64(x);
}

int64_t ByteReader::i64() {
  if (end_ - p_ < static_cast<std::ptrdiff_t>(sizeof(int64_t)))
    throw std::logic_error("tensor store: truncated index message");
  int64_t v;
  std::memcpy(&v, p_, sizeof(v));
  p_ += sizeof(v);
  return v;
}

std::string ByteReader::str() {
  const int64_t n = i64();
  if (n < 0 || end_ - p_ < n) throw std::logic_error("tensor store: truncated index message");
  std::string s(p_, static_cast<size_t>(n));
  p_ += n;
  return s;
}

std::vector<int64_t> ByteReader::vec() {
  const int64_t n = i64();
  if (n < 0 || (end_ - p_) / 8 < n) throw std::logic_error("tensor store: truncated index message");
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = i64();
  return v;
}

}  // namespace lft::ckpt::detail
