#include "store_util.h"

#include <hdf5.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "lft/ckpt/tensor_store.h"
#include "lft/runtime/check.h"
#include "lft/runtime/error.h"

namespace lft::ckpt {

const char* store_dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default:
      throw std::invalid_argument(std::string("tensor store: unsupported dtype ") +
                                  c10::toString(dtype));
  }
}

namespace detail {

std::string rank_file_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank-%05d.h5", rank);
  return name;
}

hid_t storage_type(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return H5T_NATIVE_FLOAT;
    case at::kDouble: return H5T_NATIVE_DOUBLE;
    case at::kBFloat16:
    case at::kHalf: return H5T_NATIVE_UINT16;
    case at::kLong: return H5T_NATIVE_INT64;
    case at::kInt: return H5T_NATIVE_INT32;
    case at::kShort: return H5T_NATIVE_INT16;
    case at::kChar: return H5T_NATIVE_INT8;
    case at::kByte:
    case at::kBool: return H5T_NATIVE_UINT8;
    default: return -1;
  }
}

std::optional<at::ScalarType> dtype_from_name(const std::string& name) {
  static const std::pair<const char*, at::ScalarType> kTable[] = {
      {"float32", at::kFloat}, {"float64", at::kDouble}, {"bfloat16", at::kBFloat16},
      {"float16", at::kHalf},  {"int64", at::kLong},     {"int32", at::kInt},
      {"int16", at::kShort},   {"int8", at::kChar},      {"uint8", at::kByte},
      {"bool", at::kBool}};
  for (const auto& [n, t] : kTable)
    if (name == n) return t;
  return std::nullopt;
}

std::optional<at::ScalarType> dtype_from_h5type(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT) {
    if (size == 4) return at::kFloat;
    if (size == 8) return at::kDouble;
  } else if (cls == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    if (!is_signed) return size == 1 ? std::optional<at::ScalarType>(at::kByte) : std::nullopt;
    switch (size) {
      case 1: return at::kChar;
      case 2: return at::kShort;
      case 4: return at::kInt;
      case 8: return at::kLong;
      default: break;
    }
  }
  return std::nullopt;
}

std::string normalize_path(const std::string& name) {
  size_t b = 0, e = name.size();
  while (b < e && name[b] == '/') ++b;
  while (e > b && name[e - 1] == '/') --e;
  return name.substr(b, e - b);
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | (directory ? O_DIRECTORY : 0));
  if (fd < 0) return errno;
  int rc = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return rc;
}

std::string parent_dir(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

}  // namespace detail
}  // namespace lft::ckpt
