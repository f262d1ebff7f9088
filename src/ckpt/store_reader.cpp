// StoreReader: see include/lft/ckpt/tensor_store.h.
#include <ATen/ATen.h>
#include <hdf5.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
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

// A rank file's box of a tensor (PerRank stores).
struct PieceRef {
  int file = 0;
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;
};

struct Entry {
  TensorInfo info;
  std::vector<PieceRef> pieces;
};

// Open rank files kept per reader (each holds a file descriptor).
constexpr size_t kMaxCachedFiles = 64;

// Whether `path` carries the HDF5 signature at 0, 512, 1024, 2048, ... (a user block may precede
// the superblock). Sets `error` if the file cannot be read at all.
bool has_hdf5_signature(const std::string& path, std::string* error) {
  static const unsigned char kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    *error = "cannot read " + path + ": " + std::strerror(errno);
    return false;
  }
  bool found = false;
  for (off_t at = 0; !found; at = at == 0 ? 512 : at * 2) {
    unsigned char buf[8];
    if (::pread(fd, buf, sizeof(buf), at) != static_cast<ssize_t>(sizeof(buf))) break;
    found = std::memcmp(buf, kSignature, sizeof(buf)) == 0;
  }
  ::close(fd);
  return found;
}

// Opens an HDF5 file read-only with the serial driver; an invalid handle and `error` on failure.
H5File open_readonly(const std::string& path, std::string* error) {
  *error = check_sidecar(path);
  if (!error->empty()) return H5File();
  H5PropList fapl(LFT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  LFT_H5_CHECK(H5Pset_fapl_sec2(fapl.get()));
  LFT_H5_CHECK(H5Pset_file_locking(fapl.get(), 0, 1));
  H5File f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
  if (f.valid()) return f;
  const std::string h5 = h5_error_text();
  std::string io_error;
  const bool signature = has_hdf5_signature(path, &io_error);
  if (!io_error.empty()) *error = io_error;
  else if (!signature) *error = path + " is not an HDF5 file (no HDF5 signature)";
  else *error = path + " cannot be opened as HDF5 (truncated or corrupt?): " + h5;
  return H5File();
}

// Names (relative to the root) of every dataset under `loc`, recursively.
std::string collect_datasets(hid_t loc, const std::string& prefix, int depth,
                             std::vector<std::string>& out) {
  if (depth > 64) return "groups nested deeper than 64 levels (a link cycle?) at '" + prefix + "'";
  H5G_info_t info;
  if (H5Gget_info(loc, &info) < 0)
    return "cannot list group '/" + prefix + "': " + h5_error_text();
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len =
        H5Lget_name_by_idx(loc, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len < 0) return "cannot list group '/" + prefix + "': " + h5_error_text();
    std::string name(static_cast<size_t>(len) + 1, '\0');
    if (H5Lget_name_by_idx(loc, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                           H5P_DEFAULT) < 0)
      return "cannot list group '/" + prefix + "': " + h5_error_text();
    name.resize(static_cast<size_t>(len));
    const std::string full = prefix.empty() ? name : prefix + "/" + name;
    H5Object obj(H5Oopen(loc, name.c_str(), H5P_DEFAULT));
    if (!obj.valid()) return "cannot open '/" + full + "': " + h5_error_text();
    const H5I_type_t type = H5Iget_type(obj.get());
    if (type == H5I_GROUP) {
      std::string e = collect_datasets(obj.get(), full, depth + 1, out);
      if (!e.empty()) return e;
    } else if (type == H5I_DATASET) {
      out.push_back(full);
    }
  }
  return "";
}

// Describes one dataset: its shape and dtype, and (PerRank) its box. `known` is false for a
// dataset of a type the store cannot read (skipped). Returns an error for corrupt metadata.
struct DatasetMeta {
  bool known = false;
  std::vector<int64_t> shape;  // the dataset's own shape
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offset;
};

std::string describe_dataset(hid_t file, const std::string& name, bool per_rank,
                             DatasetMeta& meta) {
  H5Dataset d(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
  if (!d.valid()) return "cannot open dataset '/" + name + "': " + h5_error_text();
  H5Dataspace space(H5Dget_space(d.get()));
  if (!space.valid()) return "cannot read the shape of '/" + name + "': " + h5_error_text();
  const H5S_class_t cls = H5Sget_simple_extent_type(space.get());
  if (cls == H5S_SIMPLE) {
    const int nd = H5Sget_simple_extent_ndims(space.get());
    std::vector<hsize_t> dims(static_cast<size_t>(std::max(nd, 0)));
    if (nd < 0 || H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
      return "cannot read the shape of '/" + name + "': " + h5_error_text();
    meta.shape.assign(dims.begin(), dims.end());
  } else if (cls != H5S_SCALAR) {
    return "";  // a null dataspace: nothing to read
  }
  std::string err;
  if (H5Aexists(d.get(), "dtype") > 0) {
    auto text = read_string_attr(d.get(), "dtype", &err);
    if (!text) return "dataset '/" + name + "': " + err;
    auto dt = dtype_from_name(*text);
    if (!dt) return "dataset '/" + name + "' has an unknown dtype '" + *text + "'";
    meta.dtype = *dt;
  } else {
    H5Datatype type(H5Dget_type(d.get()));
    if (!type.valid()) return "cannot read the type of '/" + name + "': " + h5_error_text();
    auto dt = dtype_from_h5type(type.get());
    if (!dt) return "";  // not a tensor this store can read
    meta.dtype = *dt;
  }
  meta.known = true;
  if (!per_rank) {
    meta.global_shape = meta.shape;
    return "";
  }
  auto gs = read_int_vector_attr(d.get(), "global_shape", &err);
  if (!gs) return "dataset '/" + name + "': " + err;
  auto off = read_int_vector_attr(d.get(), "offset", &err);
  if (!off) return "dataset '/" + name + "': " + err;
  meta.global_shape = *gs;
  meta.offset = *off;
  for (int64_t g : meta.global_shape)
    if (g < 0) return "dataset '/" + name + "' has a negative global_shape";
  if (numel_of(meta.shape) == 0) return "";
  bool ok = meta.offset.size() == meta.global_shape.size() &&
            meta.shape.size() == meta.global_shape.size();
  for (size_t i = 0; ok && i < meta.shape.size(); ++i)
    ok = meta.offset[i] >= 0 && meta.offset[i] + meta.shape[i] <= meta.global_shape[i];
  if (!ok)
    return "dataset '/" + name + "': its box (offset " + shape_str(meta.offset) + ", shape " +
           shape_str(meta.shape) + ") does not fit its global_shape " +
           shape_str(meta.global_shape);
  return "";
}

// Appends the index records of every readable dataset of `file` to `out` (file index `k`).
std::string index_file(hid_t file, int k, bool per_rank, ByteWriter& out) {
  std::vector<std::string> names;
  H5Object root(H5Oopen(file, "/", H5P_DEFAULT));
  if (!root.valid()) return "cannot open the root group: " + h5_error_text();
  std::string err = collect_datasets(root.get(), "", 0, names);
  if (!err.empty()) return err;
  for (const auto& name : names) {
    DatasetMeta meta;
    err = describe_dataset(file, name, per_rank, meta);
    if (!err.empty()) return err;
    if (!meta.known) continue;
    out.str(name);
    out.i64(static_cast<int64_t>(meta.dtype));
    out.vec(meta.global_shape);
    const bool has_piece = per_rank && numel_of(meta.shape) > 0;
    out.i64(has_piece ? k : -1);
    if (has_piece) {
      out.vec(meta.offset);
      out.vec(meta.shape);
    }
  }
  return "";
}

// Merges index records into `index`; an error if two files disagree about a tensor.
std::string merge_index(const char* data, size_t size, std::map<std::string, Entry>& index) {
  ByteReader in(data, size);
  while (!in.done()) {
    const std::string name = in.str();
    const auto dtype = static_cast<at::ScalarType>(in.i64());
    std::vector<int64_t> global_shape = in.vec();
    const int64_t file = in.i64();
    auto [it, inserted] = index.try_emplace(name);
    Entry& e = it->second;
    if (inserted) {
      e.info = TensorInfo{name, global_shape, dtype};
    } else if (e.info.shape != global_shape || e.info.dtype != dtype) {
      return "the rank files disagree about tensor '" + name + "': global shape " +
             shape_str(e.info.shape) + " and dtype " + store_dtype_name(e.info.dtype) +
             " in one, " + shape_str(global_shape) + " and " + store_dtype_name(dtype) +
             " in another";
    }
    if (file >= 0) {
      PieceRef p;
      p.file = static_cast<int>(file);
      p.offset = in.vec();
      p.shape = in.vec();
      e.pieces.push_back(std::move(p));
    }
  }
  return "";
}

// The checked store attributes of rank file `k` of a PerRank store.
std::string check_rank_file(hid_t file, const std::string& path, int k, int64_t world_size,
                            const std::string& store_id) {
  std::string err;
  auto mode = read_string_attr(file, "store_mode", &err);
  auto rank = read_int_attr(file, "store_rank", &err);
  auto world = read_int_attr(file, "store_world_size", &err);
  auto id = read_string_attr(file, "store_id", &err);
  if (!mode || !rank || !world || !id)
    return path + " is not a rank file of a per-rank tensor store: " + err;
  if (*mode != kModePerRank || *rank != k || *world != world_size || *id != store_id)
    return path + " does not belong to this store (it says mode '" + *mode + "', rank " +
           std::to_string(*rank) + " of " + std::to_string(*world) + ", store id " + *id +
           "; expected rank " + std::to_string(k) + " of " + std::to_string(world_size) +
           ", store id " + store_id + ")";
  return "";
}

}  // namespace

struct StoreReader::Impl {
  std::string path;
  StoreMode mode = StoreMode::SharedFile;
  int store_world_size = 0;
  H5File main_file;  // the file (SharedFile) or rank-00000.h5 (PerRank; holds the attributes)
  mutable std::map<int, H5File> rank_files;  // PerRank: other rank files, opened on demand
  std::map<std::string, Entry> index;
  int64_t store_version = 0;  // 2 and later: every dataset carries a checksum

  std::string where() const { return "tensor store " + path; }

  const Entry& entry(const std::string& name) const {
    auto it = index.find(normalize_path(name));
    if (it == index.end())
      throw UsageError(where() + ": no tensor '" + normalize_path(name) + "'");
    return it->second;
  }

  hid_t rank_file(int k) const {
    if (k == 0) return main_file.get();
    auto it = rank_files.find(k);
    if (it != rank_files.end()) return it->second.get();
    if (rank_files.size() >= kMaxCachedFiles) rank_files.clear();
    std::string err;
    H5File f = open_readonly(path + "/" + rank_file_name(k), &err);
    if (!f.valid()) throw UsageError(where() + ": " + err);
    return rank_files.emplace(k, std::move(f)).first->second.get();
  }

  // Reads the box [start, start + count) of dataset `name` in `file` into the box
  // [dst, dst + count) of `out` (whose shape is `out_shape`).
  void read_box(hid_t file, const std::string& name, const std::vector<int64_t>& start,
                const std::vector<int64_t>& count, const std::vector<int64_t>& dst,
                const std::vector<int64_t>& out_shape, const at::Tensor& out) const {
    const std::string what = where() + ": reading '" + name + "'";
    H5Dataset d(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
    if (!d.valid()) throw UsageError(what + ": " + h5_error_text());
    H5Dataspace fspace(H5Dget_space(d.get()));
    if (!fspace.valid()) throw UsageError(what + ": " + h5_error_text());
    select_box(fspace.get(), start, count);
    H5Dataspace mspace = make_space(out_shape);
    select_box(mspace.get(), dst, count);
    if (H5Dread(d.get(), storage_type(out.scalar_type()), mspace.get(), fspace.get(), H5P_DEFAULT,
                out.data_ptr()) < 0)
      throw UsageError(what + " failed (corrupt or truncated file?): " + h5_error_text());
  }

  // Compares `data`, the whole dataset `name` of `file` (the box at `offset` of the global
  // tensor), with the checksum stored with it; UsageError naming the tensor when they differ.
  void check(hid_t file, const std::string& file_path, const std::string& name,
             const at::Tensor& data, const std::vector<int64_t>& offset,
             const std::vector<int64_t>& global_shape) const {
    H5Dataset d(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
    if (!d.valid()) throw UsageError(where() + ": reading '" + name + "': " + h5_error_text());
    std::string err;
    const auto stored = H5Aexists(d.get(), kChecksumKey) > 0
                            ? read_int_attr(d.get(), kChecksumKey, &err)
                            : std::nullopt;
    if (!stored) {
      if (store_version < 2) return;  // written before checksums existed
      throw UsageError(where() + ": tensor '" + name + "' in " + file_path +
                       " has no readable checksum (damaged metadata): " + err);
    }
    const uint64_t actual = box_checksum(data, offset, global_shape);
    if (actual != static_cast<uint64_t>(*stored))
      throw UsageError(where() + ": tensor '" + name + "' in " + file_path +
                       " is corrupt: its data does not match the checksum written with it");
  }
};

StoreReader::StoreReader(MPI_Comm comm, std::string path) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.path = std::move(path);
  Watchdog::Scope scope("opening " + s.where(), Watchdog::setup_timeout(), "setup_timeout");
  int rank = 0, size = 1;
  LFT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  LFT_MPI_CHECK(MPI_Comm_size(comm, &size));
  QuietH5Errors quiet;
  auto fail = [&](const std::string& message) {
    throw UsageError("cannot open " + s.where() + ": " + message);
  };

  // 1. Every rank: what the path is, and its main file.
  std::string err;
  std::string store_id;
  struct stat st;
  if (::stat(s.path.c_str(), &st) != 0) {
    err = std::strerror(errno);
  } else if (S_ISREG(st.st_mode)) {
    s.mode = StoreMode::SharedFile;
    s.main_file = open_readonly(s.path, &err);
    if (s.main_file.valid()) {
      std::string ignored;
      auto mode = read_string_attr(s.main_file.get(), "store_mode", &ignored);
      if (mode && *mode == kModePerRank)
        err = s.path + " is one rank file of a per-rank store: open its directory instead";
      auto world = read_int_attr(s.main_file.get(), "store_world_size", &ignored);
      s.store_world_size = world ? static_cast<int>(*world) : 0;
    }
  } else if (S_ISDIR(st.st_mode)) {
    s.mode = StoreMode::PerRank;
    const std::string first = s.path + "/" + rank_file_name(0);
    struct stat fst;
    if (::stat(first.c_str(), &fst) != 0) {
      err = s.path + " is a directory without " + rank_file_name(0) +
            " (not a per-rank tensor store, or its rank 0 file is missing)";
    } else {
      s.main_file = open_readonly(first, &err);
      if (s.main_file.valid()) {
        std::string e;
        auto world = read_int_attr(s.main_file.get(), "store_world_size", &e);
        auto id = read_string_attr(s.main_file.get(), "store_id", &e);
        if (!world || !id || *world < 1 || *world > INT_MAX)
          err = first + " is not a rank file of a per-rank tensor store: " + e;
        else {
          s.store_world_size = static_cast<int>(*world);
          store_id = *id;
          err = check_rank_file(s.main_file.get(), first, 0, *world, store_id);
        }
      }
    }
  } else {
    err = s.path + " is neither a regular file nor a directory";
  }
  err = agree_on_error(comm, err);
  if (!err.empty()) fail(err);

  // 2. The index: rank 0 reads a shared file's; rank r indexes rank files r, r + size, ...
  ByteWriter mine;
  if (s.mode == StoreMode::SharedFile) {
    if (rank == 0) err = index_file(s.main_file.get(), -1, false, mine);
    if (!err.empty()) err = s.path + ": " + err;
    err = agree_on_error(comm, err);
    if (!err.empty()) fail(err);
    broadcast_string(comm, 0, mine.buffer());
    err = merge_index(mine.buffer().data(), mine.buffer().size(), s.index);
  } else {
    for (int k = rank; k < s.store_world_size && err.empty(); k += size) {
      const std::string file = s.path + "/" + rank_file_name(k);
      struct stat fst;
      if (::stat(file.c_str(), &fst) != 0) {
        err = "rank file " + file + " is missing (the store was written by " +
              std::to_string(s.store_world_size) + " ranks): " + std::strerror(errno);
        break;
      }
      H5File other;
      hid_t f = s.main_file.get();
      if (k != 0) {
        other = open_readonly(file, &err);
        if (!other.valid()) break;
        err = check_rank_file(other.get(), file, k, s.store_world_size, store_id);
        f = other.get();
      }
      if (err.empty()) {
        err = index_file(f, k, true, mine);
        if (!err.empty()) err = file + ": " + err;
      }
    }
    err = agree_on_error(comm, err);
    if (!err.empty()) fail(err);
    const std::string& buf = mine.buffer();
    if (buf.size() > static_cast<size_t>(INT_MAX))
      fatal_one(s.where() + ": the index of one rank's files exceeds 2 GiB");
    int count = static_cast<int>(buf.size());
    std::vector<int> counts(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
    LFT_MPI_CHECK(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm));
    int64_t total = 0;
    for (int r = 0; r < size; ++r) {
      displs[static_cast<size_t>(r)] = static_cast<int>(total);
      total += counts[static_cast<size_t>(r)];
    }
    if (total > INT_MAX) fatal_one(s.where() + ": the store's index exceeds 2 GiB");
    std::string all(static_cast<size_t>(total), '\0');
    LFT_MPI_CHECK(MPI_Allgatherv(buf.data(), count, MPI_CHAR, all.data(), counts.data(),
                                 displs.data(), MPI_CHAR, comm));
    err = merge_index(all.data(), all.size(), s.index);
  }
  if (!err.empty()) fail(err);  // the same on every rank: they merged the same bytes
  std::string ignored;
  s.store_version = read_int_attr(s.main_file.get(), "store_version", &ignored).value_or(0);
}

StoreReader::~StoreReader() = default;
StoreReader::StoreReader(StoreReader&&) noexcept = default;
StoreReader& StoreReader::operator=(StoreReader&&) noexcept = default;

StoreMode StoreReader::mode() const { return impl_->mode; }
const std::string& StoreReader::path() const { return impl_->path; }
int StoreReader::store_world_size() const { return impl_->store_world_size; }

std::vector<TensorInfo> StoreReader::tensors(const std::string& group) const {
  const std::string g = normalize_path(group);
  std::vector<TensorInfo> out;
  for (const auto& [name, e] : impl_->index) {
    if (g.empty() || name == g ||
        (name.size() > g.size() && name.compare(0, g.size(), g) == 0 && name[g.size()] == '/'))
      out.push_back(e.info);
  }
  return out;
}

bool StoreReader::has_tensor(const std::string& name) const {
  return impl_->index.count(normalize_path(name)) > 0;
}

TensorInfo StoreReader::info(const std::string& name) const { return impl_->entry(name).info; }

at::Tensor StoreReader::read(const std::string& name, const std::vector<int64_t>& offset,
                             const std::vector<int64_t>& shape) const {
  const Impl& s = *impl_;
  const Entry& e = s.entry(name);
  const auto& gshape = e.info.shape;
  const size_t nd = gshape.size();
  bool inside = offset.size() == nd && shape.size() == nd;
  for (size_t i = 0; inside && i < nd; ++i)
    inside = offset[i] >= 0 && shape[i] >= 0 && offset[i] + shape[i] <= gshape[i];
  if (!inside)
    throw std::invalid_argument(s.where() + ": box at " + shape_str(offset) + " of shape " +
                                shape_str(shape) + " is not inside tensor '" + e.info.name +
                                "' of shape " + shape_str(gshape));
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(e.info.dtype));
  const int64_t want = out.numel();
  if (want == 0) return out;
  QuietH5Errors quiet;
  if (s.mode == StoreMode::SharedFile) {
    s.read_box(s.main_file.get(), e.info.name, offset, shape, std::vector<int64_t>(nd, 0), shape,
               out);
    return out;
  }
  int64_t covered = 0;
  for (const PieceRef& p : e.pieces) {
    std::vector<int64_t> lo(nd), count(nd), src(nd), dst(nd);
    bool overlap = true;
    for (size_t i = 0; overlap && i < nd; ++i) {
      lo[i] = std::max(offset[i], p.offset[i]);
      const int64_t hi = std::min(offset[i] + shape[i], p.offset[i] + p.shape[i]);
      count[i] = hi - lo[i];
      overlap = count[i] > 0;
      src[i] = lo[i] - p.offset[i];
      dst[i] = lo[i] - offset[i];
    }
    if (!overlap) continue;
    s.read_box(s.rank_file(p.file), e.info.name, src, count, dst, shape, out);
    covered += numel_of(count);
  }
  if (covered < want)
    throw UsageError(s.where() + ": the rank files cover only " + std::to_string(covered) +
                     " of the " + std::to_string(want) + " elements of box " + shape_str(offset) +
                     " + " + shape_str(shape) + " of tensor '" + e.info.name +
                     "' (the writers' slices did not tile it)");
  return out;
}

at::Tensor StoreReader::read_full(const std::string& name) const {
  const Impl& s = *impl_;
  const Entry& e = s.entry(name);
  const std::vector<int64_t> zero(e.info.shape.size(), 0);
  at::Tensor out = read(e.info.name, zero, e.info.shape);
  QuietH5Errors quiet;
  if (s.mode == StoreMode::SharedFile) {
    s.check(s.main_file.get(), s.path, e.info.name, out, zero, e.info.shape);
    return out;
  }
  for (const PieceRef& p : e.pieces) {  // each rank file's box carries its own checksum
    at::Tensor box = out;
    for (size_t d = 0; d < p.shape.size(); ++d)
      box = box.narrow(static_cast<int64_t>(d), p.offset[d], p.shape[d]);
    s.check(s.rank_file(p.file), s.path + "/" + rank_file_name(p.file), e.info.name, box.contiguous(), p.offset,
            e.info.shape);
  }
  return out;
}

void StoreReader::verify(const std::string& name) const { read_full(name); }

namespace {

// Runs `get(obj, &error)` on the attribute holder `group` of `file`; UsageError on failure.
template <typename Get>
auto read_attribute(const std::string& where, hid_t file, const std::string& group,
                    const std::string& key, Get get) {
  QuietH5Errors quiet;
  const std::string g = normalize_path(group);
  H5Object obj(H5Oopen(file, g.empty() ? "/" : g.c_str(), H5P_DEFAULT));
  if (!obj.valid()) throw UsageError(where + ": no group or tensor '/" + g + "'");
  std::string err;
  auto v = get(obj.get(), key, &err);
  if (!v) throw UsageError(where + ": '/" + g + "': " + err);
  return *v;
}

}  // namespace

bool StoreReader::has_attribute(const std::string& group, const std::string& key) const {
  QuietH5Errors quiet;
  const std::string g = normalize_path(group);
  H5Object obj(H5Oopen(impl_->main_file.get(), g.empty() ? "/" : g.c_str(), H5P_DEFAULT));
  return obj.valid() && H5Aexists(obj.get(), key.c_str()) > 0;
}

std::string StoreReader::string_attribute(const std::string& group, const std::string& key) const {
  return read_attribute(impl_->where(), impl_->main_file.get(), group, key, read_string_attr);
}

int64_t StoreReader::int_attribute(const std::string& group, const std::string& key) const {
  return read_attribute(impl_->where(), impl_->main_file.get(), group, key, read_int_attr);
}

double StoreReader::double_attribute(const std::string& group, const std::string& key) const {
  return read_attribute(impl_->where(), impl_->main_file.get(), group, key, read_double_attr);
}

std::vector<int64_t> StoreReader::int_vector_attribute(const std::string& group,
                                                       const std::string& key) const {
  return read_attribute(impl_->where(), impl_->main_file.get(), group, key,
                        read_int_vector_attr);
}

}  // namespace lft::ckpt
