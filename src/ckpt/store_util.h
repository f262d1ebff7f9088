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
#include "lft/comm/mpi_util.h"
#include "h5_attributes.h"
#include "store_bytes.h"

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

// fsync of a file or directory; returns errno or 0.
int fsync_path(const std::string& path, bool directory);
// "dir" of "dir/name"; "." for a bare name.
std::string parent_dir(const std::string& path);

}  // namespace lft::ckpt::detail
