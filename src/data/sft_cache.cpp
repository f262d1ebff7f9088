#include "lft/data/sft_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "lft/runtime/error.h"

namespace lft::data {
namespace {

constexpr char kMagic[8] = {'L', 'F', 'T', 'T', 'O', 'K', '0', '1'};
constexpr std::uint64_t kByteOrder = 0x0102030405060708ULL;

std::string errno_text() { return std::strerror(errno); }

bool read_all(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  out = buffer.str();
  return !in.bad();
}

class Writer {
 public:
  explicit Writer(std::FILE* f) : f_(f) {}
  void put(const void* p, std::size_t n) {
    hash_ = fnv1a(p, n, hash_);
    ok_ = ok_ && std::fwrite(p, 1, n, f_) == n;
  }
  template <class T>
  void put(const T& v) {
    put(&v, sizeof v);
  }
  template <class T>
  void put_vector(const std::vector<T>& v) {
    put(v.data(), v.size() * sizeof(T));
  }
  void finish() {
    const std::uint64_t h = hash_;
    ok_ = ok_ && std::fwrite(&h, 1, sizeof h, f_) == sizeof h;
  }
  bool ok() const { return ok_; }

 private:
  std::FILE* f_;
  std::uint64_t hash_ = 0xcbf29ce484222325ULL;
  bool ok_ = true;
};

class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  bool get(void* p, std::size_t n) {
    if (n > bytes_.size() - pos_) return false;
    std::memcpy(p, bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  template <class T>
  bool get(T& v) {
    return get(&v, sizeof v);
  }
  template <class T>
  bool get_vector(std::vector<T>& v, std::int64_t n) {
    if (n < 0 || static_cast<std::uint64_t>(n) > (bytes_.size() - pos_) / sizeof(T)) return false;
    v.resize(static_cast<std::size_t>(n));
    return get(v.data(), v.size() * sizeof(T));
  }
  std::size_t pos() const { return pos_; }
  std::size_t left() const { return bytes_.size() - pos_; }

 private:
  const std::string& bytes_;
  std::size_t pos_ = 0;
};

// The first line of `a` that differs from `b`'s, for "made for other inputs" messages.
std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  while (true) {
    const bool ga = static_cast<bool>(std::getline(sa, la));
    const bool gb = static_cast<bool>(std::getline(sb, lb));
    if (!ga && !gb) return "";
    if (!ga || !gb || la != lb)
      return "now \"" + (gb ? lb : "") + "\", cached \"" + (ga ? la : "") + "\"";
  }
}

}  // namespace

std::uint64_t fnv1a(const void* bytes, std::size_t size, std::uint64_t hash) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= p[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::string file_stamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw UsageError(path + ": cannot read the dataset: " + errno_text());
  }
  return "size=" + std::to_string(st.st_size) + " mtime=" + std::to_string(st.st_mtim.tv_sec) +
         "." + std::to_string(st.st_mtim.tv_nsec);
}

std::string file_fingerprint(const std::string& path) {
  std::string bytes;
  if (!read_all(path, bytes)) throw UsageError(path + ": cannot read the file: " + errno_text());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(fnv1a(bytes.data(), bytes.size())));
  return std::string("fnv1a64=") + hex + " size=" + std::to_string(bytes.size());
}

void save_sequences(const std::string& path, const std::string& key, const PackedSequences& seqs) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    throw UsageError(path + ": cannot write the tokenized-data cache (tokenized_path): " +
                     errno_text() + "; check that its folder exists and is writable");
  }
  Writer w(f);
  w.put(kMagic, sizeof kMagic);
  w.put(kByteOrder);
  w.put(fnv1a(key.data(), key.size()));
  w.put(static_cast<std::uint64_t>(key.size()));
  w.put(key.data(), key.size());
  w.put(seqs.seq_len);
  w.put(seqs.num_sequences());
  w.put(static_cast<std::int64_t>(seqs.tokens.size()));
  w.put(seqs.stats.examples);
  w.put(seqs.stats.truncated);
  w.put(seqs.stats.dropped_untrained);
  w.put(seqs.stats.dropped_tokens);
  w.put_vector(seqs.offsets);
  w.put_vector(seqs.tokens);
  w.put_vector(seqs.weights);
  w.put_vector(seqs.segments);
  w.finish();
  const bool flushed = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const bool closed = std::fclose(f) == 0;
  if (!w.ok() || !flushed || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = errno_text();
    ::unlink(tmp.c_str());
    throw UsageError(path + ": writing the tokenized-data cache failed: " + err + " (disk full?)");
  }
}

std::optional<PackedSequences> load_sequences(const std::string& path, const std::string& key,
                                              std::string& why) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    why = "no cache yet";
    return std::nullopt;
  }
  std::string bytes;
  if (!read_all(path, bytes)) {
    why = "unreadable: " + errno_text();
    return std::nullopt;
  }
  Reader r(bytes);
  char magic[8];
  std::uint64_t order = 0, hash = 0, key_size = 0;
  if (!r.get(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof kMagic) != 0 ||
      !r.get(order) || order != kByteOrder) {
    why = "not an lftrain tokenized-data file of this version";
    return std::nullopt;
  }
  std::string cached_key;
  if (!r.get(hash) || !r.get(key_size) || key_size > r.left()) {
    why = "corrupt (truncated header)";
    return std::nullopt;
  }
  cached_key.resize(key_size);
  r.get(cached_key.data(), key_size);
  if (hash != fnv1a(key.data(), key.size()) || cached_key != key) {
    why = "made for other inputs (" + first_difference(cached_key, key) + ")";
    return std::nullopt;
  }
  PackedSequences s;
  std::int64_t n = 0, tokens = 0;
  const bool ok = r.get(s.seq_len) && r.get(n) && r.get(tokens) && r.get(s.stats.examples) &&
                  r.get(s.stats.truncated) && r.get(s.stats.dropped_untrained) &&
                  r.get(s.stats.dropped_tokens) && n >= 0 && r.get_vector(s.offsets, n + 1) &&
                  r.get_vector(s.tokens, tokens) && r.get_vector(s.weights, tokens) &&
                  r.get_vector(s.segments, tokens);
  const std::uint64_t computed = fnv1a(bytes.data(), r.pos());
  std::uint64_t stored = 0;
  if (!ok || !r.get(stored) || r.left() != 0 || stored != computed || s.offsets.front() != 0 ||
      s.offsets.back() != tokens) {
    why = "corrupt (size or checksum mismatch)";
    return std::nullopt;
  }
  return s;
}

}  // namespace lft::data
