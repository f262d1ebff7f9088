// lfmerge: writing the export (safetensors streamed one tensor at a time, text files, copies, the
// HDF5 store). Every write is checked; a failure removes what this export wrote.
#include <ATen/ATen.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "lft/ckpt/merge.h"
#include "lft/model/safetensors.h"
#include "merge_internal.h"

namespace lft::ckpt::merge_detail {
namespace {

[[noreturn]] void io_fail(const std::string& what, const std::string& path, int err) {
  std::string reason = std::strerror(err);
  if (err == ENOSPC || err == EDQUOT || err == EFBIG)
    reason +=
        " (disk full, or a quota or file-size limit reached: free space or choose another "
        "--out)";
  throw MergeIoError(what + " " + path + ": " + reason);
}

// A file being written: every call checked, fsync'ed and closed with a check in finish().
class WriteFile {
 public:
  explicit WriteFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) io_fail("cannot create", path_, errno);
  }
  ~WriteFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  WriteFile(const WriteFile&) = delete;
  WriteFile& operator=(const WriteFile&) = delete;

  void write_all(const void* data, std::size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const std::size_t chunk = std::min<std::size_t>(n, std::size_t{1} << 30);
      const ssize_t done = ::write(fd_, p, chunk);
      if (done < 0 && errno == EINTR) continue;
      if (done <= 0) io_fail("cannot write", path_, done < 0 ? errno : ENOSPC);
      p += done;
      n -= static_cast<std::size_t>(done);
    }
  }
  void finish() {
    if (::fsync(fd_) != 0) io_fail("cannot write (fsync)", path_, errno);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) io_fail("cannot write (close)", path_, errno);
  }

 private:
  std::string path_;
  int fd_ = -1;
};

void rename_into_place(const std::string& tmp, const std::string& path) {
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    io_fail("cannot rename " + tmp + " to", path, errno);
}

}  // namespace

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<std::string> list_folder(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") out.push_back(name);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::int64_t free_bytes(const std::string& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return -1;
  return static_cast<std::int64_t>(st.f_bavail) * static_cast<std::int64_t>(st.f_frsize);
}

OutputFiles::OutputFiles(std::string dir, bool created_dir)
    : dir_(std::move(dir)), created_dir_(created_dir) {}

OutputFiles::~OutputFiles() {
  if (committed_) return;
  for (auto it = paths_.rbegin(); it != paths_.rend(); ++it) {
    ::unlink((*it + ".tmp").c_str());
    ::unlink(it->c_str());
  }
  if (created_dir_) ::rmdir(dir_.c_str());  // only when empty
}

void OutputFiles::add(const std::string& path) { paths_.push_back(path); }

void write_safetensors_streaming(const std::string& path, const std::vector<TensorInfo>& tensors,
                                 at::ScalarType dtype, const TensorLoader& load,
                                 OutputFiles& files) {
  // The reference writer's order: larger element size first, then by name. One dtype here.
  std::vector<const TensorInfo*> order;
  for (const TensorInfo& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->name < b->name; });
  const std::int64_t element = static_cast<std::int64_t>(c10::elementSize(dtype));
  const std::string dtype_text = model::safetensors_dtype(dtype);

  std::string json = "{\"__metadata__\":{\"format\":\"pt\"}";
  std::uint64_t offset = 0;
  for (const TensorInfo* t : order) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(numel(t->shape) * element);
    nlohmann::ordered_json entry;
    entry["dtype"] = dtype_text;
    entry["shape"] = t->shape;
    entry["data_offsets"] = {offset, offset + bytes};
    json += "," + nlohmann::json(t->name).dump() + ":" + entry.dump();
    offset += bytes;
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');

  files.add(path);
  const std::string tmp = path + ".tmp";
  WriteFile out(tmp);
  unsigned char length[8];
  const std::uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  out.write_all(length, sizeof(length));
  out.write_all(json.data(), json.size());
  for (const TensorInfo* t : order) {
    const at::Tensor data = load(*t).to(dtype).contiguous();
    if (data.sizes().vec() != t->shape)
      throw MergeIoError("reading tensor '" + t->name + "' gave shape " +
                         shape_text(data.sizes().vec()) + ", expected " + shape_text(t->shape));
    out.write_all(data.data_ptr(), data.nbytes());
  }
  out.finish();
  rename_into_place(tmp, path);
}

void write_text_file(const std::string& path, const std::string& text, OutputFiles& files) {
  files.add(path);
  const std::string tmp = path + ".tmp";
  WriteFile out(tmp);
  out.write_all(text.data(), text.size());
  out.finish();
  rename_into_place(tmp, path);
}

void copy_file(const std::string& from, const std::string& to, OutputFiles& files) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) io_fail("cannot read", from, errno);
  try {
    files.add(to);
    const std::string tmp = to + ".tmp";
    WriteFile out(tmp);
    std::vector<char> buf(std::size_t{1} << 20);
    while (true) {
      const ssize_t got = ::read(in, buf.data(), buf.size());
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) io_fail("cannot read", from, errno);
      if (got == 0) break;
      out.write_all(buf.data(), static_cast<std::size_t>(got));
    }
    out.finish();
    rename_into_place(tmp, to);
  } catch (...) {
    ::close(in);
    throw;
  }
  ::close(in);
}

void write_hdf5_export(const std::string& path, const std::vector<TensorInfo>& tensors,
                       at::ScalarType dtype, const TensorLoader& load,
                       const std::vector<Attribute>& attributes, OutputFiles& files) {
  files.add(path);
  const std::string tmp = path + ".tmp";
  StoreWriter writer(MPI_COMM_SELF, tmp, StoreMode::SharedFile);
  for (const TensorInfo& t : tensors) {
    Slice slice;
    slice.name = "model/" + t.name;
    slice.global_shape = t.shape;
    slice.offset.assign(t.shape.size(), 0);
    slice.local = load(t).to(dtype).contiguous();
    writer.write({slice});  // one tensor at a time: memory stays at one tensor
  }
  for (const Attribute& a : attributes) {
    switch (a.kind) {
      case Attribute::Kind::String:
        writer.set_attribute("/", a.key, a.s);
        break;
      case Attribute::Kind::Int:
        writer.set_attribute("/", a.key, a.i);
        break;
      case Attribute::Kind::Double:
        writer.set_attribute("/", a.key, a.d);
        break;
      case Attribute::Kind::IntVector:
        writer.set_attribute("/", a.key, a.v);
        break;
    }
  }
  writer.close();
  rename_into_place(tmp, path);
}

}  // namespace lft::ckpt::merge_detail
