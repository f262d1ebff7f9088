// The checksum sidecar of a store file: see store_util.h.
#include <hdf5.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "lft/ckpt/checkpoint_files.h"
#include "lft/runtime/check.h"
#include "lft/runtime/error.h"
#include "store_util.h"

namespace lft::ckpt::detail {
namespace {

constexpr const char* kSidecarHeader = "lftrain store checksums 1";

std::string hex(uint64_t v) {
  char text[20];
  std::snprintf(text, sizeof(text), "%016" PRIx64, v);
  return text;
}

// Hashes the bytes of `path` outside `data` (sorted, disjoint extents). "" or an error.
std::string hash_outside(const std::string& path, const std::vector<Extent>& data, int64_t size,
                         uint64_t* out) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return "cannot read " + path + ": " + std::strerror(errno);
  Hasher h;
  std::string buf;
  auto hash_range = [&](int64_t begin, int64_t end) -> bool {
    for (int64_t at = begin; at < end;) {
      const auto n = static_cast<size_t>(std::min<int64_t>(end - at, int64_t{1} << 20));
      buf.resize(n);
      const ssize_t got = ::pread(fd, buf.data(), n, at);
      if (got <= 0) return false;
      h.bytes(buf.data(), static_cast<size_t>(got));
      at += got;
    }
    return true;
  };
  int64_t at = 0;
  bool ok = true;
  for (const Extent& e : data) {
    ok = ok && hash_range(at, std::min(e.offset, size));
    at = std::max(at, e.offset + e.size);
  }
  ok = ok && hash_range(at, size);
  const int saved = errno;
  ::close(fd);
  if (!ok) return "cannot read " + path + ": " + std::strerror(saved);
  *out = h.value();
  return "";
}

int64_t file_size(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

}  // namespace

std::string sidecar_path(const std::string& file) { return file + ".sum"; }

std::vector<Extent> data_extents(hid_t file, const std::vector<std::string>& datasets) {
  std::vector<Extent> out;
  for (const std::string& name : datasets) {
    H5Dataset d(LFT_H5_CHECK(H5Dopen2(file, name.c_str(), H5P_DEFAULT)));
    const haddr_t offset = H5Dget_offset(d.get());
    const hsize_t size = H5Dget_storage_size(d.get());
    if (offset != HADDR_UNDEF && size > 0)
      out.push_back({static_cast<int64_t>(offset), static_cast<int64_t>(size)});
  }
  std::sort(out.begin(), out.end(), [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
  return out;
}

void write_sidecar(const std::string& file, const std::vector<Extent>& data) {
  const int64_t size = file_size(file);
  if (size < 0) fatal_one("cannot stat " + file + " to checksum it: " + std::strerror(errno));
  uint64_t outside = 0;
  const std::string err = hash_outside(file, data, size, &outside);
  if (!err.empty()) fatal_one(err);
  std::ostringstream text;
  text << kSidecarHeader << "\nsize " << size << "\n";
  for (const Extent& e : data) text << "data " << e.offset << " " << e.size << "\n";
  text << "outside " << hex(outside) << "\n";
  Hasher self;
  self.str(text.str());
  text << "self " << hex(self.value()) << "\n";
  write_file_atomically(sidecar_path(file), text.str());
}

std::string check_sidecar(const std::string& file) {
  const std::string sidecar = sidecar_path(file);
  FILE* in = std::fopen(sidecar.c_str(), "rb");
  if (in == nullptr) return "";  // written without one (store_version 1, or another tool)
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), in)) > 0) text.append(buf, n);
  std::fclose(in);
  const std::string damaged = sidecar + " (the checksums of " + file + ") is damaged";
  const size_t self_at = text.rfind("self ");
  if (self_at == std::string::npos || text.compare(0, std::strlen(kSidecarHeader), kSidecarHeader) != 0)
    return damaged;
  Hasher self;
  self.str(text.substr(0, self_at));
  if (text.compare(self_at, std::string::npos, "self " + hex(self.value()) + "\n") != 0) return damaged;

  std::istringstream lines(text.substr(0, self_at));
  std::string line, word;
  std::getline(lines, line);  // the header
  int64_t size = -1;
  std::vector<Extent> data;
  std::string outside;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    fields >> word;
    if (word == "size") fields >> size;
    else if (word == "outside") fields >> outside;
    else if (word == "data") {
      Extent e;
      fields >> e.offset >> e.size;
      data.push_back(e);
    }
  }
  const int64_t actual = file_size(file);
  if (actual != size)
    return file + " is " + std::to_string(actual) + " bytes, " + std::to_string(size) +
           " when it was written (truncated or overwritten)";
  uint64_t hash = 0;
  const std::string err = hash_outside(file, data, size, &hash);
  if (!err.empty()) return err;
  if (hex(hash) != outside)
    return file + " is damaged: its HDF5 metadata (the bytes outside tensor data) does not match "
                  "the checksum written with it";
  return "";
}

}  // namespace lft::ckpt::detail
