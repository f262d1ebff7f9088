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

QuietH5Errors::QuietH5Errors() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

QuietH5Errors::~QuietH5Errors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

namespace {

herr_t collect_error(unsigned n, const H5E_error2_t* err, void* data) {
  auto* lines = static_cast<std::vector<std::string>*>(data);
  if (n < 8 && err) {
    std::string line = err->func_name ? std::string(err->func_name) + "(): " : std::string();
    line += err->desc ? err->desc : "?";
    lines->push_back(line);
  }
  return 0;
}

}  // namespace

std::string h5_error_text() {
  std::vector<std::string> lines;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &lines);
  std::string text;
  for (const auto& l : lines) text += (text.empty() ? "" : "; ") + l;
  return text;
}

namespace {

// Deletes `key` on `obj` if present, then creates it with `type` and `space`.
H5Attribute fresh_attribute(hid_t obj, const std::string& key, hid_t type, hid_t space) {
  if (LFT_H5_CHECK(H5Aexists(obj, key.c_str())) > 0) LFT_H5_CHECK(H5Adelete(obj, key.c_str()));
  return H5Attribute(
      LFT_H5_CHECK(H5Acreate2(obj, key.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT)));
}

H5Datatype vl_string_type(H5T_cset_t cset) {
  H5Datatype t(LFT_H5_CHECK(H5Tcopy(H5T_C_S1)));
  LFT_H5_CHECK(H5Tset_size(t.get(), H5T_VARIABLE));
  LFT_H5_CHECK(H5Tset_cset(t.get(), cset));
  return t;
}

}  // namespace

void write_string_attr(hid_t obj, const std::string& key, const std::string& value) {
  H5Datatype type = vl_string_type(H5T_CSET_UTF8);
  H5Dataspace space(LFT_H5_CHECK(H5Screate(H5S_SCALAR)));
  H5Attribute a = fresh_attribute(obj, key, type.get(), space.get());
  const char* p = value.c_str();
  LFT_H5_CHECK(H5Awrite(a.get(), type.get(), &p));
  LFT_H5_CHECK(a.close());
}

void write_int_attr(hid_t obj, const std::string& key, int64_t value) {
  H5Dataspace space(LFT_H5_CHECK(H5Screate(H5S_SCALAR)));
  H5Attribute a = fresh_attribute(obj, key, H5T_NATIVE_INT64, space.get());
  LFT_H5_CHECK(H5Awrite(a.get(), H5T_NATIVE_INT64, &value));
  LFT_H5_CHECK(a.close());
}

void write_double_attr(hid_t obj, const std::string& key, double value) {
  H5Dataspace space(LFT_H5_CHECK(H5Screate(H5S_SCALAR)));
  H5Attribute a = fresh_attribute(obj, key, H5T_NATIVE_DOUBLE, space.get());
  LFT_H5_CHECK(H5Awrite(a.get(), H5T_NATIVE_DOUBLE, &value));
  LFT_H5_CHECK(a.close());
}

void write_int_vector_attr(hid_t obj, const std::string& key, const std::vector<int64_t>& value) {
  if (value.empty()) {
    H5Dataspace space(LFT_H5_CHECK(H5Screate(H5S_NULL)));
    H5Attribute a = fresh_attribute(obj, key, H5T_NATIVE_INT64, space.get());
    LFT_H5_CHECK(a.close());
    return;
  }
  const hsize_t n = value.size();
  H5Dataspace space(LFT_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  H5Attribute a = fresh_attribute(obj, key, H5T_NATIVE_INT64, space.get());
  LFT_H5_CHECK(H5Awrite(a.get(), H5T_NATIVE_INT64, value.data()));
  LFT_H5_CHECK(a.close());
}

namespace {

// Opens `key` on `obj` and checks its type class; nullopt + error otherwise.
struct OpenedAttr {
  H5Attribute attr;
  H5Datatype type;
  H5Dataspace space;
  hssize_t npoints = 0;
  H5S_class_t space_class = H5S_NO_CLASS;
};

std::optional<OpenedAttr> open_attr(hid_t obj, const std::string& key, std::string* error) {
  if (H5Aexists(obj, key.c_str()) <= 0) {
    *error = "attribute '" + key + "' is missing";
    return std::nullopt;
  }
  OpenedAttr a;
  a.attr.reset(H5Aopen(obj, key.c_str(), H5P_DEFAULT));
  if (a.attr.valid()) a.type.reset(H5Aget_type(a.attr.get()));
  if (a.type.valid()) a.space.reset(H5Aget_space(a.attr.get()));
  if (!a.space.valid()) {
    *error = "attribute '" + key + "' cannot be opened: " + h5_error_text();
    return std::nullopt;
  }
  a.space_class = H5Sget_simple_extent_type(a.space.get());
  a.npoints = a.space_class == H5S_NULL ? 0 : H5Sget_simple_extent_npoints(a.space.get());
  return a;
}

const char* class_name(H5T_class_t c) {
  switch (c) {
    case H5T_INTEGER: return "an integer";
    case H5T_FLOAT: return "a float";
    case H5T_STRING: return "a string";
    default: return "of another HDF5 type class";
  }
}

std::string wrong_kind(const std::string& key, const OpenedAttr& a, const char* wanted) {
  return "attribute '" + key + "' is " + class_name(H5Tget_class(a.type.get())) + " attribute of " +
         std::to_string(a.npoints) + " element(s), not " + wanted;
}

}  // namespace

std::optional<std::string> read_string_attr(hid_t obj, const std::string& key,
                                            std::string* error) {
  auto a = open_attr(obj, key, error);
  if (!a) return std::nullopt;
  if (H5Tget_class(a->type.get()) != H5T_STRING || a->npoints != 1) {
    *error = wrong_kind(key, *a, "a string");
    return std::nullopt;
  }
  if (H5Tis_variable_str(a->type.get()) > 0) {
    H5Datatype mem = vl_string_type(H5Tget_cset(a->type.get()));
    char* p = nullptr;
    if (H5Aread(a->attr.get(), mem.get(), &p) < 0) {
      *error = "attribute '" + key + "' cannot be read: " + h5_error_text();
      return std::nullopt;
    }
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  const size_t n = H5Tget_size(a->type.get());
  std::vector<char> buf(n + 1, '\0');
  H5Datatype mem(H5Tcopy(a->type.get()));
  if (!mem.valid() || H5Aread(a->attr.get(), mem.get(), buf.data()) < 0) {
    *error = "attribute '" + key + "' cannot be read: " + h5_error_text();
    return std::nullopt;
  }
  return std::string(buf.data(), strnlen(buf.data(), n));
}

std::optional<int64_t> read_int_attr(hid_t obj, const std::string& key, std::string* error) {
  auto a = open_attr(obj, key, error);
  if (!a) return std::nullopt;
  if (H5Tget_class(a->type.get()) != H5T_INTEGER || a->npoints != 1) {
    *error = wrong_kind(key, *a, "an integer");
    return std::nullopt;
  }
  int64_t v = 0;
  if (H5Aread(a->attr.get(), H5T_NATIVE_INT64, &v) < 0) {
    *error = "attribute '" + key + "' cannot be read: " + h5_error_text();
    return std::nullopt;
  }
  return v;
}

std::optional<double> read_double_attr(hid_t obj, const std::string& key, std::string* error) {
  auto a = open_attr(obj, key, error);
  if (!a) return std::nullopt;
  const H5T_class_t c = H5Tget_class(a->type.get());
  if ((c != H5T_FLOAT && c != H5T_INTEGER) || a->npoints != 1) {
    *error = wrong_kind(key, *a, "a number");
    return std::nullopt;
  }
  double v = 0;
  if (H5Aread(a->attr.get(), H5T_NATIVE_DOUBLE, &v) < 0) {
    *error = "attribute '" + key + "' cannot be read: " + h5_error_text();
    return std::nullopt;
  }
  return v;
}

std::optional<std::vector<int64_t>> read_int_vector_attr(hid_t obj, const std::string& key,
                                                         std::string* error) {
  auto a = open_attr(obj, key, error);
  if (!a) return std::nullopt;
  const int ndims = a->space_class == H5S_SIMPLE ? H5Sget_simple_extent_ndims(a->space.get()) : 0;
  if (H5Tget_class(a->type.get()) != H5T_INTEGER || ndims > 1) {
    *error = wrong_kind(key, *a, "an integer vector");
    return std::nullopt;
  }
  std::vector<int64_t> v(static_cast<size_t>(a->npoints));
  if (!v.empty() && H5Aread(a->attr.get(), H5T_NATIVE_INT64, v.data()) < 0) {
    *error = "attribute '" + key + "' cannot be read: " + h5_error_text();
    return std::nullopt;
  }
  return v;
}

H5Dataspace make_space(const std::vector<int64_t>& shape) {
  if (shape.empty()) return H5Dataspace(LFT_H5_CHECK(H5Screate(H5S_SCALAR)));
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  return H5Dataspace(
      LFT_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
}

void select_box(hid_t space, const std::vector<int64_t>& start, const std::vector<int64_t>& count) {
  if (start.empty()) {
    LFT_H5_CHECK(H5Sselect_all(space));
    return;
  }
  std::vector<hsize_t> s(start.begin(), start.end()), c(count.begin(), count.end());
  LFT_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, s.data(), nullptr, c.data(), nullptr));
}

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

void broadcast_string(MPI_Comm comm, int root, std::string& s) {
  int64_t n = static_cast<int64_t>(s.size());
  LFT_MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT64_T, root, comm));
  if (n > INT_MAX) fatal_one("tensor store: a broadcast message exceeds 2 GiB");
  s.resize(static_cast<size_t>(n));
  if (n > 0) LFT_MPI_CHECK(MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, root, comm));
}

std::string agree_on_error(MPI_Comm comm, const std::string& local_error) {
  int rank = 0, size = 1;
  LFT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  LFT_MPI_CHECK(MPI_Comm_size(comm, &size));
  const int mine = local_error.empty() ? size : rank;
  int first = size;
  LFT_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == size) return "";
  std::string message = rank == first ? local_error : std::string();
  broadcast_string(comm, first, message);
  return message;
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
