// Bytes of the tensor store: FNV-1a hashing, the name of the checksum attribute, and
// the little serializer of the index messages ranks exchange (not a public header).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lft::ckpt::detail {

class Hasher {
 public:
  void bytes(const void* data, size_t n);
  void str(const std::string& s);
  void i64(int64_t v);
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 1469598103934665603ULL;  // FNV-1a
};

// box_checksum (lft/ckpt/box_checksum.h) of a dataset's data, as its attribute of this name.
constexpr const char* kChecksumKey = "checksum";

class ByteWriter {
 public:
  void i64(int64_t v);
  void str(const std::string& s);
  void vec(const std::vector<int64_t>& v);
  std::string& buffer() { return buf_; }

 private:
  std::string buf_;
};

class ByteReader {
 public:
  ByteReader(const char* data, size_t size) : p_(data), end_(data + size) {}
  bool done() const { return p_ >= end_; }
  int64_t i64();
  std::string str();
  std::vector<int64_t> vec();

 private:
  const char* p_;
  const char* end_;
};

}  // namespace lft::ckpt::detail
