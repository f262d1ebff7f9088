// StoreWriter: see include/lft/ckpt/tensor_store.h.
#include <ATen/ATen.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>

#include "lft/ckpt/box_checksum.h"
#include "lft/ckpt/tensor_store.h"
#include "lft/comm/watchdog.h"
#include "lft/runtime/check.h"
#include "lft/runtime/error.h"
#include "store_util.h"

namespace lft::ckpt {

using namespace detail;

namespace {

constexpr int64_t kDefaultMaxPieceBytes = int64_t{1} << 30;
// Datasets of at least 4 MiB start on a 1 MiB boundary (file system blocks / Lustre stripes);
// smaller ones are packed. Wastes at most 1 MiB per large dataset.
constexpr hsize_t kAlignThreshold = hsize_t{4} << 20;
constexpr hsize_t kAlignment = hsize_t{1} << 20;

// Dataset attribute keys the store owns.
bool reserved_dataset_key(const std::string& key) {
  return key == "dtype" || key == "global_shape" || key == "offset" || key == kChecksumKey;
}

// A sub-box of a rank's local box that is contiguous in its (row-major) memory.
struct Piece {
  std::vector<int64_t> offset;  // inside the local box
  std::vector<int64_t> shape;
  int64_t mem_offset = 0;       // elements from the start of the local data
};

// Splits a local box of shape `s` into pieces of at most `limit` bytes (at least one element
// each): whole index ranges of the outermost dimension whose inner block fits.
std::vector<Piece> split_box(const std::vector<int64_t>& s, int64_t elem, int64_t limit) {
  const int64_t n = numel_of(s);
  if (n == 0) return {};
  const size_t nd = s.size();
  if (nd == 0 || n * elem <= limit) return {Piece{std::vector<int64_t>(nd, 0), s, 0}};
  std::vector<int64_t> inner(nd, 1);  // elements per index of dim d
  for (size_t d = nd - 1; d-- > 0;) inner[d] = inner[d + 1] * s[d + 1];
  size_t d = 0;
  while (d + 1 < nd && inner[d] * elem > limit) ++d;
  const int64_t rows = std::max<int64_t>(1, limit / (inner[d] * elem));
  int64_t outer = 1;
  for (size_t i = 0; i < d; ++i) outer *= s[i];
  std::vector<Piece> pieces;
  for (int64_t o = 0; o < outer; ++o) {
    std::vector<int64_t> idx(nd, 0);
    int64_t rem = o;
    for (size_t i = d; i-- > 0;) {
      idx[i] = rem % s[i];
      rem /= s[i];
    }
    for (int64_t j = 0; j < s[d]; j += rows) {
      Piece p;
      p.offset = idx;
      p.offset[d] = j;
      p.shape = s;
      for (size_t i = 0; i < d; ++i) p.shape[i] = 1;
      p.shape[d] = std::min(rows, s[d] - j);
      for (size_t i = 0; i < nd; ++i) p.mem_offset += p.offset[i] * inner[i];
      pieces.push_back(std::move(p));
    }
  }
  return pieces;
}

// One slice, checked and ready to write.
struct Prepared {
  std::string name;
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offset;  // empty if this rank holds nothing
  std::vector<int64_t> local_shape;
  at::ScalarType dtype = at::kFloat;
  at::Tensor data;              // contiguous CPU, or undefined if this rank holds nothing
  std::vector<Piece> pieces;
  uint64_t hash = 0;
  uint64_t checksum = 0;  // of this rank's box; in SharedFile mode summed over the ranks
};

std::string check_name(const std::string& name) {
  if (name.empty()) return "an empty name";
  size_t start = 0;
  while (start <= name.size()) {
    const size_t slash = std::min(name.find('/', start), name.size());
    const std::string part = name.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..")
      return "name '" + name + "' has an empty, '.' or '..' component";
    start = slash + 1;
  }
  return "";
}

// Every '/'-prefix of `name` ("a/b/c" -> "a", "a/b").
std::vector<std::string> parents_of(const std::string& name) {
  std::vector<std::string> out;
  for (size_t i = name.find('/'); i != std::string::npos; i = name.find('/', i + 1))
    out.push_back(name.substr(0, i));
  return out;
}

std::string random_store_id() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                      static_cast<uint64_t>(
                          std::chrono::steady_clock::now().time_since_epoch().count()) ^
                      static_cast<uint64_t>(getpid()));
  char text[24];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(gen()));
  return text;
}

// Run on rank 0 before anything is created. "" if fine.
std::string precheck_new_path(const std::string& path, StoreMode mode) {
  if (path.empty()) return "empty store path";
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0)
    return path + " already exists; refusing to overwrite it";
  if (errno != ENOENT) return "cannot check " + path + ": " + std::strerror(errno);
  const std::string parent = parent_dir(path);
  if (::stat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return "cannot create " + path + ": its parent directory " + parent + " does not exist";
  if (mode == StoreMode::PerRank && ::mkdir(path.c_str(), 0777) != 0)
    return "cannot create the directory " + path + ": " + std::strerror(errno);
  return "";
}

}  // namespace

struct StoreWriter::Impl {
  std::string path;
  StoreMode mode = StoreMode::SharedFile;
  std::string file_path;  // the HDF5 file this rank writes
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  H5File file;
  bool open = false;
  std::set<std::string> datasets;  // normalized names written so far
  std::set<std::string> groups;    // groups that exist (explicitly or as parents)
  int last_io_mode = -1;
  uint32_t last_cause = 0;
  int64_t max_piece_bytes = kDefaultMaxPieceBytes;

  ~Impl() {
    file.reset();
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm);
  }

  std::string where() const { return "tensor store " + path; }

  // A failed HDF5 write, flush or close: HDF5's stack, then why (a full disk is the usual cause,
  // and the stack does not say so).
  template <typename Rc>
  void check_write(Rc rc, const char* call) const {
    if (rc >= 0) return;
    H5Eprint2(H5E_DEFAULT, stderr);
    fatal_one(std::string(call) + " failed writing " + where() + ": " +
              describe_write_error(0, parent_dir(path)));  // errno after MPI-IO is not reliable
  }

  void require_open(const char* what) const {
    if (!open) throw std::logic_error(where() + ": " + what + " after close()");
  }

  // "" if `name` can become a new dataset (given `pending` names of this call).
  std::string dataset_conflict(const std::string& name, const std::set<std::string>& pending) const {
    if (datasets.count(name) || pending.count(name)) return "tensor '" + name + "' is already written";
    if (groups.count(name)) return "'" + name + "' is already a group";
    for (const auto& p : parents_of(name))
      if (datasets.count(p) || pending.count(p))
        return "'" + p + "' is a tensor, so '" + name + "' cannot be created under it";
    for (const auto& other : pending)
      if (other.size() > name.size() && other.compare(0, name.size(), name) == 0 &&
          other[name.size()] == '/')
        return "'" + name + "' is already a group (of '" + other + "')";
    return "";
  }

  void note_dataset(const std::string& name) {
    datasets.insert(name);
    for (auto& p : parents_of(name)) groups.insert(std::move(p));
  }

  // Validates one slice on this rank; fills `p` or returns the problem.
  std::string prepare(const Slice& s, Prepared& p, const std::set<std::string>& pending) const {
    p.name = normalize_path(s.name);
    const std::string label = "tensor '" + s.name + "': ";
    std::string e = check_name(p.name);
    if (!e.empty()) return label + e;
    if (!s.local.defined())
      return label + "`local` is an undefined tensor (pass an empty one of the stored dtype)";
    p.dtype = s.local.scalar_type();
    if (storage_type(p.dtype) < 0)
      return label + "unsupported dtype " + c10::toString(p.dtype);
    p.global_shape = s.global_shape;
    for (int64_t d : p.global_shape)
      if (d < 0) return label + "negative global shape " + shape_str(p.global_shape);
    e = dataset_conflict(p.name, pending);
    if (!e.empty()) return e;
    Hasher h;
    h.str(p.name);
    h.i64(static_cast<int64_t>(p.global_shape.size()));
    for (int64_t d : p.global_shape) h.i64(d);
    h.i64(static_cast<int64_t>(p.dtype));
    p.hash = h.value();
    if (s.local.numel() == 0) return "";
    const size_t nd = p.global_shape.size();
    if (static_cast<size_t>(s.local.dim()) != nd || s.offset.size() != nd)
      return label + "local shape " + shape_str(s.local.sizes().vec()) + " and offset " +
             shape_str(s.offset) + " do not match the rank of global shape " +
             shape_str(p.global_shape);
    p.local_shape = s.local.sizes().vec();
    for (size_t i = 0; i < nd; ++i)
      if (s.offset[i] < 0 || s.offset[i] + p.local_shape[i] > p.global_shape[i])
        return label + "box at offset " + shape_str(s.offset) + " of shape " +
               shape_str(p.local_shape) + " is outside the global shape " +
               shape_str(p.global_shape);
    p.offset = s.offset;
    p.data = s.local.to(at::kCPU).contiguous();
    p.pieces = split_box(p.local_shape, static_cast<int64_t>(p.data.element_size()),
                         max_piece_bytes);
    p.checksum = box_checksum(p.data, p.offset, p.global_shape);
    return "";
  }

  H5PropList link_create_plist() const {
    H5PropList lcpl(LFT_H5_CHECK(H5Pcreate(H5P_LINK_CREATE)));
    LFT_H5_CHECK(H5Pset_create_intermediate_group(lcpl.get(), 1));
    return lcpl;
  }

  void write_shared(const std::vector<Prepared>& items, const std::vector<uint64_t>& piece_counts) {
    H5PropList lcpl = link_create_plist();
    H5PropList dcpl(LFT_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
    LFT_H5_CHECK(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER));
    H5PropList dxpl(LFT_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
    LFT_H5_CHECK(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
    int mode = -1;
    bool any_independent = false;
    uint32_t causes = 0;
    const char dummy = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const Prepared& p = items[i];
      const hid_t type = storage_type(p.dtype);
      H5Dataspace fspace = make_space(p.global_shape);
      H5Dataset dset(LFT_H5_CHECK(H5Dcreate2(file.get(), p.name.c_str(), type, fspace.get(),
                                             lcpl.get(), dcpl.get(), H5P_DEFAULT)));
      write_string_attr(dset.get(), "dtype", store_dtype_name(p.dtype));
      write_int_attr(dset.get(), kChecksumKey, static_cast<int64_t>(p.checksum));
      const auto elem = static_cast<int64_t>(p.data.defined() ? p.data.element_size() : 0);
      for (uint64_t j = 0; j < piece_counts[i]; ++j) {
        H5Dataspace mspace;
        const void* buf = &dummy;
        if (j < p.pieces.size()) {
          const Piece& piece = p.pieces[j];
          std::vector<int64_t> start(p.offset.size());
          for (size_t d = 0; d < start.size(); ++d) start[d] = p.offset[d] + piece.offset[d];
          select_box(fspace.get(), start, piece.shape);
          mspace = make_space({numel_of(piece.shape)});
          buf = static_cast<const char*>(p.data.data_ptr()) + piece.mem_offset * elem;
        } else {
          LFT_H5_CHECK(H5Sselect_none(fspace.get()));
          mspace = make_space({1});
          LFT_H5_CHECK(H5Sselect_none(mspace.get()));
        }
        check_write(H5Dwrite(dset.get(), type, mspace.get(), fspace.get(), dxpl.get(), buf), "H5Dwrite");
        H5D_mpio_actual_io_mode_t actual = H5D_MPIO_NO_COLLECTIVE;
        LFT_H5_CHECK(H5Pget_mpio_actual_io_mode(dxpl.get(), &actual));
        uint32_t local_cause = 0, global_cause = 0;
        LFT_H5_CHECK(H5Pget_mpio_no_collective_cause(dxpl.get(), &local_cause, &global_cause));
        causes |= global_cause;
        if (actual == H5D_MPIO_NO_COLLECTIVE) any_independent = true;
        mode = static_cast<int>(actual);
      }
      LFT_H5_CHECK(dset.close());
    }
    last_io_mode = any_independent ? static_cast<int>(H5D_MPIO_NO_COLLECTIVE) : mode;
    last_cause = causes;
  }

  void write_per_rank(const std::vector<Prepared>& items) {
    H5PropList lcpl = link_create_plist();
    H5PropList dcpl(LFT_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
    LFT_H5_CHECK(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER));
    for (const Prepared& p : items) {
      const hid_t type = storage_type(p.dtype);
      const bool empty = !p.data.defined();
      H5Dataspace space = make_space(empty ? std::vector<int64_t>{0} : p.local_shape);
      H5Dataset dset(LFT_H5_CHECK(H5Dcreate2(file.get(), p.name.c_str(), type, space.get(),
                                             lcpl.get(), dcpl.get(), H5P_DEFAULT)));
      if (!empty)
        check_write(H5Dwrite(dset.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, p.data.data_ptr()),
                    "H5Dwrite");
      write_string_attr(dset.get(), "dtype", store_dtype_name(p.dtype));
      write_int_attr(dset.get(), kChecksumKey, static_cast<int64_t>(p.checksum));
      write_int_vector_attr(dset.get(), "global_shape", p.global_shape);
      write_int_vector_attr(dset.get(), "offset",
                            empty ? std::vector<int64_t>(p.global_shape.size(), 0) : p.offset);
      LFT_H5_CHECK(dset.close());
    }
    last_io_mode = -1;
    last_cause = 0;
  }

  // Opens (creating the group if needed) the object attributes go on.
  H5Object attribute_target(const std::string& g) {
    if (!g.empty() && !datasets.count(g) && !groups.count(g)) {
      H5PropList lcpl = link_create_plist();
      H5Group grp(LFT_H5_CHECK(H5Gcreate2(file.get(), g.c_str(), lcpl.get(), H5P_DEFAULT,
                                          H5P_DEFAULT)));
      LFT_H5_CHECK(grp.close());
      groups.insert(g);
      for (auto& p : parents_of(g)) groups.insert(std::move(p));
    }
    return H5Object(LFT_H5_CHECK(H5Oopen(file.get(), g.empty() ? "/" : g.c_str(), H5P_DEFAULT)));
  }

  // The common part of the set_attribute overloads: agreement, then `put` on the target object.
  template <typename Put>
  void set_attribute(const std::string& group, const std::string& key, int64_t kind,
                     const Hasher& value_hash, Put put) {
    require_open("set_attribute()");
    const std::string g = normalize_path(group);
    Watchdog::Scope scope("setting attribute '" + key + "' of '/" + g + "' in " + where(),
                          Watchdog::collective_timeout(), "comm_timeout");
    std::string err;
    if (key.empty()) err = "set_attribute: empty key";
    else if (g.empty() && key.rfind("store_", 0) == 0)
      err = "set_attribute: root attribute keys starting with 'store_' are reserved ('" + key + "')";
    else if (datasets.count(g) && reserved_dataset_key(key))
      err = "set_attribute: attribute '" + key + "' of a tensor is reserved";
    else if (!g.empty() && !datasets.count(g)) {
      err = check_name(g);
      for (const auto& p : parents_of(g))
        if (err.empty() && datasets.count(p))
          err = "set_attribute: '" + p + "' is a tensor, it cannot hold a group '" + g + "'";
    }
    Hasher h;
    h.str(g);
    h.str(key);
    h.i64(kind);
    h.i64(static_cast<int64_t>(value_hash.value()));
    uint64_t mine[3] = {h.value(), ~h.value(), err.empty() ? 0u : 1u};
    uint64_t all[3];
    LFT_MPI_CHECK(MPI_Allreduce(mine, all, 3, MPI_UINT64_T, MPI_MAX, comm));
    if (all[2] != 0) throw std::invalid_argument(where() + ": " + agree_on_error(comm, err));
    if (all[0] != ~all[1])
      throw std::invalid_argument(where() + ": set_attribute('/" + g + "', '" + key +
                                  "'): the ranks passed different groups, keys or values");
    QuietH5Errors quiet;
    H5Object obj = attribute_target(g);
    put(obj.get());
  }
};

StoreWriter::StoreWriter(MPI_Comm comm, std::string path, StoreMode mode)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.path = std::move(path);
  s.mode = mode;
  Watchdog::Scope scope("creating " + s.where(), Watchdog::setup_timeout(), "setup_timeout");
  LFT_MPI_CHECK(MPI_Comm_dup(comm, &s.comm));
  LFT_MPI_CHECK(MPI_Comm_rank(s.comm, &s.rank));
  LFT_MPI_CHECK(MPI_Comm_size(s.comm, &s.size));

  std::string err = s.rank == 0 ? precheck_new_path(s.path, mode) : std::string();
  err = agree_on_error(s.comm, err);
  if (!err.empty()) throw UsageError("tensor store: " + err);
  std::string store_id = s.rank == 0 ? random_store_id() : std::string();
  broadcast_string(s.comm, 0, store_id);

  QuietH5Errors quiet;  // failures become messages (LFT_H5_CHECK prints the stack itself)
  H5PropList fapl(LFT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  LFT_H5_CHECK(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST));
  if (mode == StoreMode::SharedFile) {
    s.file_path = s.path;
    LFT_H5_CHECK(H5Pset_fapl_mpio(fapl.get(), s.comm, MPI_INFO_NULL));
    LFT_H5_CHECK(H5Pset_all_coll_metadata_ops(fapl.get(), 1));
    LFT_H5_CHECK(H5Pset_coll_metadata_write(fapl.get(), 1));
    LFT_H5_CHECK(H5Pset_alignment(fapl.get(), kAlignThreshold, kAlignment));
    const hid_t f = H5Fcreate(s.file_path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get());
    const std::string local =
        f < 0 ? "cannot create the HDF5 file " + s.file_path + ": " + h5_error_text() : "";
    int ok[2] = {f >= 0 ? 1 : 0, f >= 0 ? -1 : 0}, agreed[2];
    LFT_MPI_CHECK(MPI_Allreduce(ok, agreed, 2, MPI_INT, MPI_MIN, s.comm));
    if (agreed[1] == 0) throw UsageError("tensor store: " + agree_on_error(s.comm, local));
    if (agreed[0] == 0)  // some ranks have the file open, others not: nothing safe to do
      fatal_one("H5Fcreate of " + s.file_path + " (collective) failed on some ranks only" +
                (local.empty() ? std::string() : ": " + local));
    s.file.reset(f);
  } else {
    s.file_path = s.path + "/" + rank_file_name(s.rank);
    LFT_H5_CHECK(H5Pset_fapl_sec2(fapl.get()));
    LFT_H5_CHECK(H5Pset_file_locking(fapl.get(), 0, 1));
    const hid_t f = H5Fcreate(s.file_path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get());
    const std::string local =
        f < 0 ? "cannot create the HDF5 file " + s.file_path + ": " + h5_error_text() : "";
    err = agree_on_error(s.comm, local);
    if (!err.empty()) {  // undo: this rank's file, then (rank 0) the directory
      if (f >= 0) {
        H5Fclose(f);
        ::unlink(s.file_path.c_str());
      }
      LFT_MPI_CHECK(MPI_Barrier(s.comm));
      if (s.rank == 0) ::rmdir(s.path.c_str());
      throw UsageError("tensor store: " + err);
    }
    s.file.reset(f);
  }
  const hid_t f = s.file.get();
  write_string_attr(f, "store_format", kStoreFormat);
  write_int_attr(f, "store_version", kStoreVersion);
  write_string_attr(f, "store_mode", mode == StoreMode::SharedFile ? kModeShared : kModePerRank);
  write_int_attr(f, "store_world_size", s.size);
  if (mode == StoreMode::PerRank) {
    write_int_attr(f, "store_rank", s.rank);
    write_string_attr(f, "store_id", store_id);
  }
  s.open = true;
}

StoreWriter::~StoreWriter() {
  if (impl_ && impl_->open) close();
}

StoreWriter::StoreWriter(StoreWriter&&) noexcept = default;
StoreWriter& StoreWriter::operator=(StoreWriter&& other) noexcept {
  if (this != &other) {
    if (impl_ && impl_->open) close();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

void StoreWriter::write(const std::vector<Slice>& slices) {
  Impl& s = *impl_;
  s.require_open("write()");
  Watchdog::Scope scope("writing " + std::to_string(slices.size()) + " tensor(s) to " + s.where(),
                        Watchdog::collective_timeout(), "comm_timeout");

  // 1. Check this rank's slices.
  std::vector<Prepared> items(slices.size());
  std::set<std::string> pending;
  std::string err;
  for (size_t i = 0; i < slices.size() && err.empty(); ++i) {
    err = s.prepare(slices[i], items[i], pending);
    pending.insert(items[i].name);
  }
  const auto n = static_cast<int64_t>(slices.size());
  int64_t head[3] = {n, -n, err.empty() ? 0 : static_cast<int64_t>(s.size - s.rank)};
  int64_t head_all[3];
  LFT_MPI_CHECK(MPI_Allreduce(head, head_all, 3, MPI_INT64_T, MPI_MAX, s.comm));
  if (head_all[2] != 0) {
    const int bad_rank = static_cast<int>(s.size - head_all[2]);
    std::string message = err;
    broadcast_string(s.comm, bad_rank, message);
    if (s.size > 1) message = "on rank " + std::to_string(bad_rank) + ": " + message;
    throw std::invalid_argument(s.where() + ": write(): " + message);
  }

  // 2. Agree on names, shapes and dtypes, and on the number of collective writes per tensor.
  const int64_t max_n = head_all[0];
  const size_t m = static_cast<size_t>(max_n);
  std::vector<uint64_t> mine(3 * m, 0), all(3 * m, 0);
  for (size_t i = 0; i < m; ++i) {
    const uint64_t h = static_cast<int64_t>(i) < n ? items[i].hash : 0;
    mine[i] = h;
    mine[m + i] = ~h;
    mine[2 * m + i] = static_cast<int64_t>(i) < n ? items[i].pieces.size() : 0;
  }
  if (m > 0)
    LFT_MPI_CHECK(MPI_Allreduce(mine.data(), all.data(), static_cast<int>(3 * m), MPI_UINT64_T,
                                MPI_MAX, s.comm));
  for (size_t i = 0; i < m; ++i) {
    if (all[i] == ~all[m + i]) continue;
    std::string here =
        static_cast<int64_t>(i) < n
            ? "'" + items[i].name + "' of global shape " + shape_str(items[i].global_shape) +
                  " and dtype " + store_dtype_name(items[i].dtype)
            : "no tensor (it passed " + std::to_string(n) + ")";
    throw std::invalid_argument(
        s.where() + ": write(): the ranks disagree on tensor #" + std::to_string(i) +
        ": this rank (" + std::to_string(s.rank) + ") has " + here +
        ". Every rank must pass the same names, global shapes and dtypes, in the same order.");
  }

  // 3. The whole tensor's checksum: the sum of the (disjoint) boxes' ones.
  if (s.mode == StoreMode::SharedFile && n > 0) {
    std::vector<uint64_t> sums(items.size());
    for (size_t i = 0; i < items.size(); ++i) sums[i] = items[i].checksum;
    LFT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()),
                                MPI_UINT64_T, MPI_SUM, s.comm));
    for (size_t i = 0; i < items.size(); ++i) items[i].checksum = sums[i];
  }

  // 4. Write. (Automatic error printing off: LFT_H5_CHECK prints the stack once, then aborts.)
  QuietH5Errors quiet;
  if (s.mode == StoreMode::SharedFile)
    s.write_shared(items, std::vector<uint64_t>(all.begin() + 2 * max_n, all.end()));
  else
    s.write_per_rank(items);
  for (const auto& p : items) s.note_dataset(p.name);
}

void StoreWriter::set_attribute(const std::string& group, const std::string& key,
                                const std::string& value) {
  Hasher h;
  h.str(value);
  impl_->set_attribute(group, key, 1, h,
                       [&](hid_t obj) { write_string_attr(obj, key, value); });
}

void StoreWriter::set_attribute(const std::string& group, const std::string& key,
                                const char* value) {
  set_attribute(group, key, std::string(value));
}

void StoreWriter::set_attribute(const std::string& group, const std::string& key, int64_t value) {
  Hasher h;
  h.i64(value);
  impl_->set_attribute(group, key, 2, h, [&](hid_t obj) { write_int_attr(obj, key, value); });
}

void StoreWriter::set_attribute(const std::string& group, const std::string& key, double value) {
  Hasher h;
  h.bytes(&value, sizeof(value));
  impl_->set_attribute(group, key, 3, h, [&](hid_t obj) { write_double_attr(obj, key, value); });
}

void StoreWriter::set_attribute(const std::string& group, const std::string& key,
                                const std::vector<int64_t>& value) {
  Hasher h;
  h.i64(static_cast<int64_t>(value.size()));
  for (int64_t v : value) h.i64(v);
  impl_->set_attribute(group, key, 4, h,
                       [&](hid_t obj) { write_int_vector_attr(obj, key, value); });
}

int StoreWriter::last_io_mode() const { return impl_->last_io_mode; }
uint32_t StoreWriter::last_no_collective_cause() const { return impl_->last_cause; }

void StoreWriter::set_max_piece_bytes(int64_t bytes) {
  if (bytes < 1) throw std::invalid_argument("tensor store: max piece bytes must be positive");
  impl_->max_piece_bytes = bytes;
}

int64_t StoreWriter::max_piece_bytes() const { return impl_->max_piece_bytes; }

void StoreWriter::close() {
  Impl& s = *impl_;
  if (!s.open) return;
  s.open = false;
  Watchdog::Scope scope("closing " + s.where(), Watchdog::collective_timeout(), "comm_timeout");
  QuietH5Errors quiet;
  const std::vector<Extent> extents =
      data_extents(s.file.get(), std::vector<std::string>(s.datasets.begin(), s.datasets.end()));
  s.check_write(H5Fflush(s.file.get(), H5F_SCOPE_GLOBAL), "H5Fflush");  // MPI-IO: MPI_File_sync
  s.check_write(s.file.close(), "H5Fclose");
  if (s.mode == StoreMode::PerRank) {  // the sec2 driver never fsyncs
    const int rc = fsync_path(s.file_path, false);
    if (rc != 0) fatal_one("fsync of " + s.file_path + " failed: " + std::strerror(rc));
  }
  LFT_MPI_CHECK(MPI_Barrier(s.comm));  // the shared file is whole before rank 0 reads it
  if (s.mode == StoreMode::PerRank || s.rank == 0) write_sidecar(s.file_path, extents);
  LFT_MPI_CHECK(MPI_Barrier(s.comm));
  if (s.rank == 0) {  // the new directory entries (best effort: some file systems refuse)
    if (s.mode == StoreMode::SharedFile) fsync_path(s.path, false);
    else fsync_path(s.path, true);
    fsync_path(parent_dir(s.path), true);
  }
  LFT_MPI_CHECK(MPI_Barrier(s.comm));
  LFT_MPI_CHECK(MPI_Comm_free(&s.comm));
}

bool StoreWriter::is_open() const { return impl_ && impl_->open; }
const std::string& StoreWriter::path() const { return impl_->path; }
StoreMode StoreWriter::mode() const { return impl_->mode; }

}  // namespace lft::ckpt
