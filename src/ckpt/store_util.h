// Internals shared by the tensor store's writer and reader (not a public header).
#pragma once

#include <mpi.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <hdf5.h>

#include "lft/ckpt/h5_handle.h"

namespace lft::ckpt::detail {

constexpr const char* kStoreFormat = "lftrain tensor store";
// 2: every dataset carries a `checksum` attribute (box_checksum of its data).
constexpr int64_t kStoreVersion = 2;
constexpr const char* kModeShared = "shared";
constexpr const char* kModePerRank = "per_rank";

// "rank-00042.h5"
std::string rank_file_name(int rank);

// ---- dtypes ------------------------------------------------------------------------------------
// The HDF5 type a dtype is stored as (a predefined native type: never close it), or -1.
hid_t storage_type(at::ScalarType dtype);
std::optional<at::ScalarType> dtype_from_name(const std::string& name);
// For datasets without a `dtype` attribute (files written by other tools): plain integer and
// float types only.
std::optional<at::ScalarType> dtype_from_h5type(hid_t type);

// ---- names and shapes --------------------------------------------------------------------------
// Strips leading and trailing '/'. "" is the root.
std::string normalize_path(const std::string& name);
// "[3, 4]"
std::string shape_str(const std::vector<int64_t>& shape);
int64_t numel_of(const std::vector<int64_t>& shape);

// ---- HDF5 errors -------------------------------------------------------------------------------
// Turns off HDF5's automatic error-stack printing while alive (restores the previous handler).
class QuietH5Errors {
 public:
  QuietH5Errors();
  ~QuietH5Errors();
  QuietH5Errors(const QuietH5Errors&) = delete;
  QuietH5Errors& operator=(const QuietH5Errors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};
// The current HDF5 error stack as one line ("H5Fopen: unable to open file; ... "), or "".
std::string h5_error_text();

// ---- attributes (writing: callers make the same calls on every rank in MPI-IO files) ------------
void write_string_attr(hid_t obj, const std::string& key, const std::string& value);
void write_int_attr(hid_t obj, const std::string& key, int64_t value);
void write_double_attr(hid_t obj, const std::string& key, double value);
void write_int_vector_attr(hid_t obj, const std::string& key, const std::vector<int64_t>& value);

// Reading: nullopt + `error` set when the attribute is missing or of another kind.
std::optional<std::string> read_string_attr(hid_t obj, const std::string& key, std::string* error);
std::optional<int64_t> read_int_attr(hid_t obj, const std::string& key, std::string* error);
std::optional<double> read_double_attr(hid_t obj, const std::string& key, std::string* error);
std::optional<std::vector<int64_t>> read_int_vector_attr(hid_t obj, const std::string& key,
                                                         std::string* error);

// A dataspace of `shape` (H5S_SCALAR for rank 0).
H5Dataspace make_space(const std::vector<int64_t>& shape);
// Selects the box [start, start + count) of a simple dataspace (or all of a scalar one).
void select_box(hid_t space, const std::vector<int64_t>& start, const std::vector<int64_t>& count);

// ---- hashing and serialization -----------------------------------------------------------------
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

// ---- the checksum sidecar of a store file ------------------------------------------------------
// Next to each file a store writes, `<file>.sum` records the file's size, where each tensor's
// data lies, and a checksum of every other byte (the HDF5 metadata), so that a damaged file is
// recognised before the HDF5 library parses it (it can crash on damaged metadata). Tensor data is
// covered by the per-tensor `checksum` attributes instead, checked as it is read.
struct Extent {
  int64_t offset = 0;
  int64_t size = 0;
};
std::string sidecar_path(const std::string& file);
// Where the data of `datasets` lies in `file` (an open HDF5 file), sorted.
std::vector<Extent> data_extents(hid_t file, const std::vector<std::string>& datasets);
// Writes `file`'s sidecar (durably); fatal_one on an I/O error.
void write_sidecar(const std::string& file, const std::vector<Extent>& data);
// "" if `file` matches its sidecar or has none, else what is wrong.
std::string check_sidecar(const std::string& file);

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

// ---- MPI agreement -----------------------------------------------------------------------------
// Collective. "" if `local_error` is empty on every rank, else the message of the lowest rank that
// has one (the same string on every rank).
std::string agree_on_error(MPI_Comm comm, const std::string& local_error);
// Collective. Rank `root`'s string on every rank.
void broadcast_string(MPI_Comm comm, int root, std::string& s);

// fsync of a file or directory; returns errno or 0.
int fsync_path(const std::string& path, bool directory);
// "dir" of "dir/name"; "." for a bare name.
std::string parent_dir(const std::string& path);

}  // namespace lft::ckpt::detail
