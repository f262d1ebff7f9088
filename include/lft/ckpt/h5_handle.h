// Move-only owners of HDF5 ids. Each closes its id with the matching H5*close when destroyed or
// reset. The destructor ignores a failing close (it may run while an exception unwinds); where a
// close must succeed (files, datasets written to), call close() and check its result:
//   LFT_H5_CHECK(file.close());
// Note: in a file opened with the MPI-IO driver, closing a file or a dataset is collective.
#pragma once

#include <hdf5.h>

namespace lft::ckpt {

template <herr_t (*CloseFn)(hid_t)>
class H5Handle {
 public:
  H5Handle() = default;
  // Takes ownership of `id` (a negative id means "none").
  explicit H5Handle(hid_t id) : id_(id) {}
  ~H5Handle() { reset(); }

  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  H5Handle(H5Handle&& other) noexcept : id_(other.release()) {}
  H5Handle& operator=(H5Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = other.release();
    }
    return *this;
  }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  explicit operator bool() const { return valid(); }

  // Gives up ownership without closing.
  hid_t release() {
    const hid_t id = id_;
    id_ = H5I_INVALID_HID;
    return id;
  }
  // Closes the current id (ignoring a failure) and takes `id`.
  void reset(hid_t id = H5I_INVALID_HID) {
    if (id_ >= 0) CloseFn(id_);
    id_ = id;
  }
  // Closes now and returns the close status (0 if there was nothing to close).
  herr_t close() {
    const hid_t id = release();
    return id >= 0 ? CloseFn(id) : 0;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

using H5File = H5Handle<H5Fclose>;
using H5Group = H5Handle<H5Gclose>;
using H5Dataset = H5Handle<H5Dclose>;
using H5Dataspace = H5Handle<H5Sclose>;
using H5PropList = H5Handle<H5Pclose>;
using H5Attribute = H5Handle<H5Aclose>;
// Only for types the program made (H5Tcopy, H5Tcreate, H5Dget_type, ...), never predefined ones.
using H5Datatype = H5Handle<H5Tclose>;
// A group, dataset or named datatype opened with H5Oopen.
using H5Object = H5Handle<H5Oclose>;

}  // namespace lft::ckpt
