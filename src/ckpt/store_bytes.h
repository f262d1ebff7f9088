// Bytes of the tensor store: FNV-1a hashing, the position-keyed checksum of a tensor's box, and
// the little serializer of the index messages ranks exchange (not a public header).
#pragma once

#include <ATen/core/Tensor.h>

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

// The checksum of a tensor's data, keyed by position: the sum (mod 2^64) over its elements of a
// 64-bit mix of (row-major index in the global tensor, the element's bits). Being a sum, the
// checksums of disjoint boxes add up to that of the whole tensor, so ranks that each write a box
// add theirs, and a reader of the whole tensor recomputes it with offset 0.
// `data` is contiguous and holds the box at `offset` of a tensor of shape `global_shape`.
uint64_t box_checksum(const at::Tensor& data, const std::vector<int64_t>& offset,
                      const std::vector<int64_t>& global_shape);
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
