// safetensors reader and writer (POSIX I/O, nlohmann-json header).
#include "lft/model/safetensors.h"
#include "lft/runtime/json_nesting.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

namespace lft::model {

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this reader copies bytes as they are");

constexpr std::uint64_t kMaxHeaderSize = 100000000;  // the reference MAX_HEADER_SIZE

struct DtypeInfo {
  const char* name;
  c10::ScalarType type;
};

const DtypeInfo kDtypes[] = {
    {"F64", c10::ScalarType::Double},       {"F32", c10::ScalarType::Float},
    {"F16", c10::ScalarType::Half},         {"BF16", c10::ScalarType::BFloat16},
    {"I64", c10::ScalarType::Long},         {"I32", c10::ScalarType::Int},
    {"I16", c10::ScalarType::Short},        {"I8", c10::ScalarType::Char},
    {"U8", c10::ScalarType::Byte},          {"U16", c10::ScalarType::UInt16},
    {"U32", c10::ScalarType::UInt32},       {"U64", c10::ScalarType::UInt64},
    {"BOOL", c10::ScalarType::Bool},        {"F8_E4M3", c10::ScalarType::Float8_e4m3fn},
    {"F8_E5M2", c10::ScalarType::Float8_e5m2},
};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw SafetensorsError(path + ": " + what);
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& name,
                              const std::string& what) {
  throw SafetensorsError(path + ": tensor '" + name + "': " + what);
}

std::string errno_text() { return std::strerror(errno); }

class File {
 public:
  File(const std::string& path, int flags, mode_t mode = 0) : path_(path) {
    fd_ = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    if (fd_ < 0) fail(path, "cannot open: " + errno_text());
  }
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  std::uint64_t size() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail(path_, "cannot stat: " + errno_text());
    return static_cast<std::uint64_t>(st.st_size);
  }
  // Reads exactly n bytes at offset, or throws.
  void pread_all(void* dst, std::uint64_t n, std::uint64_t offset, const std::string& what) const {
    auto* p = static_cast<char*>(dst);
    while (n > 0) {
      const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(n, 1ULL << 30));
      const ssize_t got = ::pread(fd_, p, chunk, static_cast<off_t>(offset));
      if (got < 0) {
        if (errno == EINTR) continue;
        fail(path_, "read error in " + what + ": " + errno_text());
      }
      if (got == 0) fail(path_, "truncated: end of file in " + what);
      p += got;
      n -= static_cast<std::uint64_t>(got);
      offset += static_cast<std::uint64_t>(got);
    }
  }
  void write_all(const void* src, std::uint64_t n) const {
    const auto* p = static_cast<const char*>(src);
    while (n > 0) {
      const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(n, 1ULL << 30));
      const ssize_t put = ::write(fd_, p, chunk);
      if (put < 0) {
        if (errno == EINTR) continue;
        fail(path_, "write error: " + errno_text());
      }
      p += put;
      n -= static_cast<std::uint64_t>(put);
    }
  }
  void close_checked() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail(path_, "close failed: " + errno_text());
  }

 private:
  std::string path_;
  int fd_ = -1;
};

bool mul_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return true;
  *out = a * b;
  return false;
}

}  // namespace

const SafetensorsEntry* SafetensorsHeader::find(const std::string& name) const {
  for (const auto& e : tensors) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

std::string safetensors_dtype(c10::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return d.name;
  }
  throw SafetensorsError(std::string("safetensors: dtype ") + c10::toString(type) +
                         " is not supported");
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  File file(path, O_RDONLY);
  SafetensorsHeader header;
  header.file_size = file.size();
  if (header.file_size < 8) {
    fail(path, "truncated: " + std::to_string(header.file_size) +
                   " bytes, shorter than the 8-byte header length (not a safetensors file?)");
  }
  unsigned char len_bytes[8];
  file.pread_all(len_bytes, 8, 0, "the header length");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxHeaderSize) {
    fail(path, "header length " + std::to_string(n) + " exceeds the limit of " +
                   std::to_string(kMaxHeaderSize) + " bytes (not a safetensors file?)");
  }
  if (8 + n > header.file_size) {
    fail(path, "truncated: the header needs " + std::to_string(n) + " bytes, the file has " +
                   std::to_string(header.file_size - 8) + " after the length");
  }
  header.data_start = 8 + n;
  std::string text(static_cast<std::size_t>(n), '\0');
  file.pread_all(text.data(), n, 8, "the header");

  if (const std::string deep = json_too_deep(text); !deep.empty()) fail(path, "header: " + deep);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!json.is_object()) fail(path, "header is not a JSON object");

  for (auto it = json.begin(); it != json.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          fail(path, "__metadata__ value of '" + m.key() + "' is not a string");
        }
        header.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) fail_tensor(path, name, "header entry is not an object");
    SafetensorsEntry e;
    e.name = name;
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) fail_tensor(path, name, "missing 'dtype' string");
    e.dtype = dt->get<std::string>();
    bool known = false;
    for (const auto& d : kDtypes) {
      if (e.dtype == d.name) {
        e.scalar_type = d.type;
        known = true;
      }
    }
    if (!known) fail_tensor(path, name, "dtype '" + e.dtype + "' is not supported");
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) fail_tensor(path, name, "missing 'shape' list");
    std::uint64_t numel = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<std::int64_t>() >= 0)) {
        fail_tensor(path, name, "shape " + sh->dump() + " is not a list of non-negative integers");
      }
      const std::uint64_t dim = d.get<std::uint64_t>();
      if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
          mul_overflows(numel, dim, &numel)) {
        fail_tensor(path, name, "shape " + sh->dump() + " overflows");
      }
      e.shape.push_back(static_cast<std::int64_t>(dim));
    }
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      fail_tensor(path, name, "'data_offsets' must be [begin, end] (non-negative integers)");
    }
    e.begin = (*off)[0].get<std::uint64_t>();
    e.end = (*off)[1].get<std::uint64_t>();
    if (e.end < e.begin) fail_tensor(path, name, "data_offsets " + off->dump() + ": end < begin");
    std::uint64_t bytes = 0;
    if (mul_overflows(numel, c10::elementSize(e.scalar_type), &bytes)) {
      fail_tensor(path, name, "size overflows");
    }
    if (e.end - e.begin != bytes) {
      fail_tensor(path, name,
                  "data_offsets " + off->dump() + " hold " + std::to_string(e.end - e.begin) +
                      " bytes, but " + e.dtype + " " + sh->dump() + " needs " +
                      std::to_string(bytes));
    }
    header.tensors.push_back(std::move(e));
  }

  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  const std::uint64_t data_size = header.file_size - header.data_start;
  std::uint64_t expected = 0;
  for (const auto& e : header.tensors) {
    if (e.begin != expected) {
      fail_tensor(path, e.name,
                  "data_offsets begin at " + std::to_string(e.begin) + ", expected " +
                      std::to_string(expected) + (e.begin < expected ? " (overlap)" : " (gap)"));
    }
    if (e.end > data_size) {
      fail_tensor(path, e.name,
                  "truncated file: data ends at " + std::to_string(e.end) +
                      " but the data buffer has " + std::to_string(data_size) + " bytes");
    }
    expected = e.end;
  }
  if (expected != data_size) {
    fail(path, std::to_string(data_size - expected) +
                   " trailing bytes after the last tensor (corrupt file?)");
  }
  return header;
}

at::Tensor read_safetensors_tensor(const std::string& path, const SafetensorsHeader& header,
                                   const std::string& name) {
  const SafetensorsEntry* e = header.find(name);
  if (e == nullptr) fail_tensor(path, name, "not in the file");
  return read_safetensors_rows(path, header, name, 0, e->shape.empty() ? 1 : e->shape[0]);
}

at::Tensor read_safetensors_rows(const std::string& path, const SafetensorsHeader& header,
                                 const std::string& name, std::int64_t row_begin, std::int64_t rows) {
  const SafetensorsEntry* e = header.find(name);
  if (e == nullptr) fail_tensor(path, name, "not in the file");
  const std::int64_t total = e->shape.empty() ? 1 : e->shape[0];
  if (row_begin < 0 || rows < 0 || row_begin + rows > total) {
    fail_tensor(path, name, "rows [" + std::to_string(row_begin) + ", " + std::to_string(row_begin + rows) +
                                ") are outside its " + std::to_string(total) + " rows");
  }
  std::vector<std::int64_t> shape = e->shape;
  if (!shape.empty()) shape[0] = rows;
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(e->scalar_type));
  const auto row_bytes = total == 0 ? 0 : (e->end - e->begin) / static_cast<std::uint64_t>(total);
  const auto bytes = row_bytes * static_cast<std::uint64_t>(rows);
  if (bytes > 0) {
    File file(path, O_RDONLY);
    file.pread_all(t.data_ptr(), bytes,
                   header.data_start + e->begin + row_bytes * static_cast<std::uint64_t>(row_begin),
                   "tensor '" + name + "'");
  }
  return t;
}

std::map<std::string, at::Tensor> read_safetensors(const std::string& path,
                                                   std::map<std::string, std::string>* metadata) {
  const SafetensorsHeader header = read_safetensors_header(path);
  File file(path, O_RDONLY);
  if (file.size() != header.file_size) fail(path, "file changed while being read");
  std::map<std::string, at::Tensor> out;
  for (const auto& e : header.tensors) {
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.scalar_type));
    if (e.end > e.begin) {
      file.pread_all(t.data_ptr(), e.end - e.begin, header.data_start + e.begin,
                     "tensor '" + e.name + "'");
    }
    out.emplace(e.name, std::move(t));
  }
  if (metadata != nullptr) *metadata = header.metadata;
  return out;
}

void write_safetensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  struct Item {
    const std::string* name;
    at::Tensor data;
    std::string dtype;
  };
  std::vector<Item> items;
  items.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") fail(path, "a tensor may not be named __metadata__");
    if (!t.defined()) fail_tensor(path, name, "undefined tensor");
    std::string dtype;
    try {
      dtype = safetensors_dtype(t.scalar_type());
    } catch (const SafetensorsError& e) {
      fail_tensor(path, name, e.what());
    }
    items.push_back({&name, t.detach().to(at::kCPU).contiguous(), dtype});
  }
  // As the reference writer: larger element size first (alignment), then by name.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    const auto sa = a.data.element_size(), sb = b.data.element_size();
    return sa != sb ? sa > sb : *a.name < *b.name;
  });

  std::string json = "{";
  bool first = true;
  if (!metadata.empty()) {
    json += "\"__metadata__\":" + nlohmann::json(metadata).dump();
    first = false;
  }
  std::uint64_t offset = 0;
  for (const auto& item : items) {
    const std::uint64_t bytes = item.data.nbytes();
    nlohmann::ordered_json entry;
    entry["dtype"] = item.dtype;
    entry["shape"] = item.data.sizes().vec();
    entry["data_offsets"] = {offset, offset + bytes};
    json += (first ? "" : ",") + nlohmann::json(*item.name).dump() + ":" + entry.dump();
    first = false;
    offset += bytes;
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');

  const std::string tmp = path + ".tmp";
  {
    File file(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    unsigned char len_bytes[8];
    std::uint64_t n = json.size();
    for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
    try {
      file.write_all(len_bytes, 8);
      file.write_all(json.data(), json.size());
      for (const auto& item : items) file.write_all(item.data.data_ptr(), item.data.nbytes());
      file.close_checked();
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = errno_text();
    ::unlink(tmp.c_str());
    fail(path, "cannot rename " + tmp + ": " + err);
  }
}

}  // namespace lft::model
