// A store of named, globally-shaped tensors in parallel HDF5: the I/O layer of checkpoints.
//
// Every rank holds a box of each global tensor (a Slice); the store keeps the GLOBAL tensor, so a
// store written at N ranks reads back at any rank count and any layout (StoreReader::read takes
// any box). Two on-disk modes:
//
//   SharedFile  one .h5 file. One contiguous dataset per tensor, with its global shape; each
//               rank writes its box with collective MPI-IO (H5FD_MPIO_COLLECTIVE).
//               h5py / h5dump see the global tensors directly.
//   PerRank     a directory with one file per writer rank, rank-<rrrrr>.h5 (serial HDF5, no
//               MPI-IO). In it each tensor is the rank's box, with attributes `global_shape` and
//               `offset`. Needs no parallel file system support; the reader re-assembles boxes.
//
// Dataset layout (both modes):
//   - the name is an HDF5 path ("model/model.layers.0.mlp.up_proj.weight"); a leading '/' is
//     ignored; groups are created as needed. A name cannot be both a tensor and a group.
//   - string attribute `dtype` on every dataset: the torch dtype name ("float32", "bfloat16",
//     "float16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool").
//   - float32/float64/int* as the native HDF5 types; bfloat16 and float16 as H5T_NATIVE_UINT16
//     (raw bits; HDF5 has no portable 16-bit float types); bool as H5T_NATIVE_UINT8.
//     h5py users: `np.asarray(d).astype(np.uint32) << 16` viewed as float32 gives bfloat16 values,
//     `.view(np.float16)` gives float16 ones.
//   - int64 attribute `checksum` on every dataset: box_checksum (box_checksum.h) of its data (a position-
//     keyed sum, so the ranks' boxes add up); read_full and verify check it.
//   - root attributes `store_format` ("lftrain tensor store"), `store_version` (2; 1 had no
//     checksums), `store_mode`
//     ("shared" / "per_rank"), `store_world_size` (ranks that wrote it); PerRank files also have
//     `store_rank` and `store_id` (the same random id in every file of one store). Attribute keys
//     starting with "store_" on "/" are reserved.
//
// Threads: HDF5 (the parallel build) is not thread-safe. Use stores, and any other HDF5 code of the
// process, from one thread at a time.
#pragma once

#include <mpi.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace lft::ckpt {

enum class StoreMode { SharedFile, PerRank };

// A rank's part of one global tensor: the N-d box [offset, offset + local.sizes()) of
// global_shape.
struct Slice {
  std::string name;                  // HDF5 path inside the store
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offset;       // same length as global_shape (ignored when local is empty)
  // Its dtype is the stored dtype; numel() == 0 means this rank holds nothing of the tensor (it
  // must still be a defined tensor of the right dtype, e.g. at::empty({0}, dtype)). Any device
  // and layout: a CUDA or non-contiguous tensor is copied to a contiguous CPU one first.
  at::Tensor local;
};

struct TensorInfo {
  std::string name;  // without a leading '/'
  std::vector<int64_t> shape;
  at::ScalarType dtype;
};

// Writes a new store. Every member function is collective over the communicator given to the
// constructor: every rank calls it, in the same order, with the same names (and, for
// set_attribute, the same values). The communicator is duplicated; the caller's may be freed.
class StoreWriter {
 public:
  // SharedFile: creates the file `path`. PerRank: creates the directory `path` and, in it,
  // rank-<rrrrr>.h5 for every rank. The parent directory must exist. Throws lft::UsageError
  // (naming the path, on every rank) if `path` already exists or cannot be created.
  StoreWriter(MPI_Comm comm, std::string path, StoreMode mode);
  // Closes the store if it is still open. That is collective: call close() explicitly, so that a
  // rank unwinding from an exception the others did not see cannot hang.
  ~StoreWriter();
  StoreWriter(StoreWriter&&) noexcept;
  StoreWriter& operator=(StoreWriter&&) noexcept;
  StoreWriter(const StoreWriter&) = delete;
  StoreWriter& operator=(const StoreWriter&) = delete;

  // Writes one tensor per slice. Every rank passes slices for the same names, in the same order,
  // with the same global shapes and dtypes; this is verified (two small all-reduces) and a
  // disagreement throws std::invalid_argument on every rank, naming the first tensor concerned.
  // A slice that is invalid on one rank (box outside the global shape, rank mismatch, unsupported
  // dtype, name already written) also throws std::invalid_argument on every rank. After such an
  // exception nothing of this call was written and the writer is still usable.
  //
  // The boxes of all ranks together must tile each tensor: overlaps and holes are NOT detected
  // (with overlaps one of the ranks wins; holes read back as whatever the disk held, because
  // datasets are created without a fill value). Ranks with an empty slice still take part.
  //
  // SharedFile: one H5Dwrite per tensor with a collective transfer; a rank's box larger than
  // max_piece_bytes() is written in several pieces (each one contiguous in memory), every rank
  // making the same number of collective H5Dwrite calls.
  void write(const std::vector<Slice>& slices);

  // Attributes on a group ("/" or "" for the root; created if it does not exist) or on a tensor
  // already written. Same value on every rank (verified: std::invalid_argument otherwise).
  // Setting a key again replaces the value. Strings are stored as variable-length UTF-8 (any
  // length: a whole TOML file is fine); vectors as a 1-d int64 attribute (an empty vector as a
  // null dataspace).
  void set_attribute(const std::string& group, const std::string& key, const std::string& value);
  void set_attribute(const std::string& group, const std::string& key, const char* value);
  void set_attribute(const std::string& group, const std::string& key, int64_t value);
  void set_attribute(const std::string& group, const std::string& key, double value);
  void set_attribute(const std::string& group, const std::string& key,
                     const std::vector<int64_t>& value);
  // Any other integer type is stored as int64 (so that `set_attribute(g, k, 5)` is not ambiguous).
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                                             !std::is_same_v<T, int64_t>,
                                         int> = 0>
  void set_attribute(const std::string& group, const std::string& key, T value) {
    set_attribute(group, key, static_cast<int64_t>(value));
  }

  // H5D_mpio_actual_io_mode_t of the last write() on this rank, as an int (4 = contiguous
  // collective); H5D_MPIO_NO_COLLECTIVE (0) if any of its H5Dwrite calls fell back to independent
  // I/O. -1 in PerRank mode or before the first write() that wrote a piece.
  int last_io_mode() const;
  // The global H5D_mpio_no_collective_cause_t bits of the last write() (OR over its H5Dwrite
  // calls), 0 if every call was collective. For diagnostics.
  uint32_t last_no_collective_cause() const;

  // Upper bound on the bytes one rank moves in one H5Dwrite (default 1 GiB; MPI-IO has trouble
  // with more than 2 GiB per rank per call). Local setting, for tests and tuning.
  void set_max_piece_bytes(int64_t bytes);
  int64_t max_piece_bytes() const;

  // Collective. Flushes (H5Fflush, which fsyncs), closes, fsyncs the directory entries, and waits
  // for every rank: when it returns on any rank, the store is complete on disk. Idempotent.
  void close();
  bool is_open() const;

  const std::string& path() const;
  StoreMode mode() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads a store of either mode, written at any rank count. Only the constructor is collective;
// the other member functions are local (any rank may read any box, any number of times).
class StoreReader {
 public:
  // Detects the mode (a file = SharedFile, a directory = PerRank) and indexes the tensors. Throws
  // lft::UsageError on every rank, with the path and what is wrong, for: a missing path; a file
  // that is not HDF5; a truncated or corrupt file (HDF5 cannot open or index it); a PerRank
  // directory with a rank file missing or not belonging to the store (store_world_size /
  // store_rank / store_id disagree). Files are opened with the serial (sec2) driver, read-only,
  // without file locking (the store is immutable once written).
  StoreReader(MPI_Comm comm, std::string path);
  ~StoreReader();
  StoreReader(StoreReader&&) noexcept;
  StoreReader& operator=(StoreReader&&) noexcept;
  StoreReader(const StoreReader&) = delete;
  StoreReader& operator=(const StoreReader&) = delete;

  StoreMode mode() const;
  const std::string& path() const;
  // Ranks that wrote the store (the root attribute store_world_size; 0 for a foreign file).
  int store_world_size() const;

  // Every tensor under `group` ("" or "/" for all; recursive), sorted by name.
  std::vector<TensorInfo> tensors(const std::string& group = "") const;
  bool has_tensor(const std::string& name) const;
  TensorInfo info(const std::string& name) const;  // lft::UsageError if missing

  // The box [offset, offset + shape) of the global tensor, as a new contiguous CPU tensor of the
  // stored dtype. std::invalid_argument if the box is not inside the tensor; lft::UsageError if
  // the tensor is missing or HDF5 fails to read it (corrupt file), or (PerRank) if the rank
  // files do not cover the box.
  at::Tensor read(const std::string& name, const std::vector<int64_t>& offset,
                  const std::vector<int64_t>& shape) const;
  // The whole tensor, checked against the checksum written with it (UsageError naming the
  // tensor and the file if they differ).
  at::Tensor read_full(const std::string& name) const;
  // Reads the tensor whole and checks it against its checksum (each rank file's box, PerRank),
  // without keeping it: UsageError naming the tensor if it is corrupt. Stores written before
  // checksums existed (store_version 1) pass.
  void verify(const std::string& name) const;

  // Attributes of a group or tensor ("/" or "" = root). The getters throw lft::UsageError if the
  // attribute is missing or of another kind. int_attribute accepts any integer attribute,
  // double_attribute any integer or float one, int_vector_attribute any integer attribute of at
  // most one dimension.
  bool has_attribute(const std::string& group, const std::string& key) const;
  std::string string_attribute(const std::string& group, const std::string& key) const;
  int64_t int_attribute(const std::string& group, const std::string& key) const;
  double double_attribute(const std::string& group, const std::string& key) const;
  std::vector<int64_t> int_vector_attribute(const std::string& group,
                                            const std::string& key) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The torch dtype name used in the `dtype` attribute ("float32", "bfloat16", ...);
// std::invalid_argument for a dtype the store does not support.
const char* store_dtype_name(at::ScalarType dtype);

}  // namespace lft::ckpt
