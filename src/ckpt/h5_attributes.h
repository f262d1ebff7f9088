// HDF5 helpers of the tensor store and the checkpoint files: quiet error stacks, attributes of
// each kind written and read with errors that name them, dataspaces and boxes (not a public header).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lft/ckpt/h5_handle.h"

namespace lft::ckpt::detail {

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

}  // namespace lft::ckpt::detail
