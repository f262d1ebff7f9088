#include "store_bytes.h"

#include <ATen/ATen.h>

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

namespace {

uint64_t mix64(uint64_t x) {  // the splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t box_checksum(const at::Tensor& data, const std::vector<int64_t>& offset,
                      const std::vector<int64_t>& global_shape) {
  const int64_t n = data.numel();
  if (n == 0) return 0;
  const auto elem = static_cast<size_t>(data.element_size());
  const auto* bytes = static_cast<const unsigned char*>(data.data_ptr());
  const size_t nd = global_shape.size();
  const std::vector<int64_t> box = nd == 0 ? std::vector<int64_t>{} : data.sizes().vec();
  const int64_t row = nd == 0 ? 1 : box[nd - 1];  // elements contiguous in both memory and file
  std::vector<int64_t> idx(nd, 0);                // position of the row inside the box
  uint64_t sum = 0;
  for (int64_t done = 0; done < n; done += row) {
    uint64_t global = 0;
    for (size_t d = 0; d < nd; ++d)
      global = global * static_cast<uint64_t>(global_shape[d]) + static_cast<uint64_t>(offset[d] + idx[d]);
    for (int64_t j = 0; j < row; ++j) {
      uint64_t bits = 0;
      std::memcpy(&bits, bytes + static_cast<size_t>(done + j) * elem, elem);
      sum += mix64(bits ^ mix64((global + static_cast<uint64_t>(j)) * 0x9e3779b97f4a7c15ULL + 1));
    }
    for (size_t d = nd < 2 ? 0 : nd - 1; d-- > 0;) {  // next row: odometer over the outer dims
      if (++idx[d] < box[d]) break;
      idx[d] = 0;
    }
  }
  return sum;
}

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
