// The parallel HDF5 tensor store (lft/ckpt/tensor_store.h) at any rank count: round trips in both
// modes, attributes, reading at another world size, collective I/O, and the errors.
#include <ATen/ATen.h>
#include <hdf5.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <stdexcept>

#include "lft/ckpt/tensor_store.h"
#include "lft/runtime/error.h"
#include "mpi_test_util.h"

namespace lft::ckpt {
namespace {

using test::world;

MPI_Comm comm() { return MPI_COMM_WORLD; }
int rank() { return world().rank(); }
int size() { return world().size(); }

void bcast_string(std::string& s, int root = 0) {
  int64_t n = static_cast<int64_t>(s.size());
  MPI_Bcast(&n, 1, MPI_INT64_T, root, comm());
  s.resize(static_cast<size_t>(n));
  if (n > 0) MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, root, comm());
}

int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }

// A fresh directory made by rank 0 (mkdtemp), shared by every rank; removed at the end.
class TempDir {
 public:
  TempDir() {
    if (rank() == 0) {
      const char* base = std::getenv("TMPDIR");
      std::string tmpl = std::string(base && *base ? base : "/tmp") + "/lft-ckpt-XXXXXX";
      if (::mkdtemp(tmpl.data()) == nullptr) std::perror("mkdtemp");
      path_ = tmpl;
    }
    bcast_string(path_);
  }
  ~TempDir() {
    MPI_Barrier(comm());
    if (rank() == 0) ::nftw(path_.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    MPI_Barrier(comm());
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// [0, n) cut into size() parts with weights r + 1 (rank `zero_rank`'s weight is 0 if it exists).
std::vector<int64_t> uneven_bounds(int64_t n, int zero_rank) {
  std::vector<int64_t> w(static_cast<size_t>(size()));
  for (int r = 0; r < size(); ++r) w[static_cast<size_t>(r)] = r == zero_rank ? 0 : r + 1;
  if (size() == 1) w[0] = 1;
  int64_t total = 0;
  for (int64_t x : w) total += x;
  std::vector<int64_t> b(1, 0);
  int64_t acc = 0;
  for (int64_t x : w) {
    acc += x;
    b.push_back(n * acc / total);
  }
  return b;
}

struct Content {
  std::map<std::string, at::Tensor> full;
  std::vector<Slice> slices;
};

// A slice of `t` along dimension `dim`, rows [lo, hi).
Slice slice_along(const std::string& name, const at::Tensor& t, int64_t dim, int64_t lo,
                  int64_t hi) {
  std::vector<int64_t> offset(static_cast<size_t>(t.dim()), 0);
  offset[static_cast<size_t>(dim)] = lo;
  return Slice{name, t.sizes().vec(), offset, t.narrow(dim, lo, hi - lo).contiguous()};
}

// The same content on every rank count: float32 rows split unevenly (rank 1 holds none),
// bfloat16 held whole by rank 0, int64 3-d split along dim 1, float16 rows split evenly.
Content make_content() {
  Content c;
  const int r = rank();
  auto w = ((at::arange(13 * 7, at::kFloat) * 0.37).sin() * 1000).reshape({13, 7});
  auto v = ((at::arange(11, at::kFloat) * 0.77).sin() * 300).to(at::kBFloat16);
  auto t = (at::arange(3 * 10 * 4, at::kLong) * 1000000007LL - 77777).reshape({3, 10, 4});
  auto h = ((at::arange(6 * 5, at::kFloat) * 1.3).cos() * 50).to(at::kHalf).reshape({6, 5});
  c.full = {{"model/embed.weight", w}, {"model/norm.weight", v}, {"optim/exp_avg/t3", t},
            {"model/half", h}};

  auto bw = uneven_bounds(13, 1);
  c.slices.push_back(slice_along("model/embed.weight", w, 0, bw[r], bw[r + 1]));
  c.slices.push_back(r == 0 ? Slice{"model/norm.weight", {11}, {0}, v}
                            : Slice{"model/norm.weight", {11}, {0}, at::empty({0}, at::kBFloat16)});
  auto bt = uneven_bounds(10, -1);
  c.slices.push_back(slice_along("/optim/exp_avg/t3", t, 1, bt[r], bt[r + 1]));
  const int64_t lo = 6 * r / size(), hi = 6 * (r + 1) / size();
  c.slices.push_back(slice_along("model/half", h, 0, lo, hi));
  return c;
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  auto ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

at::Tensor box_of(const at::Tensor& t, const std::vector<int64_t>& off,
                  const std::vector<int64_t>& shape) {
  at::Tensor out = t;
  for (size_t d = 0; d < off.size(); ++d)
    out = out.narrow(static_cast<int64_t>(d), off[d], shape[d]);
  return out;
}

// Full reads and `boxes` random boxes per tensor, bitwise.
void check_reads(const StoreReader& r, const Content& c, unsigned seed, int boxes = 25) {
  auto infos = r.tensors();
  ASSERT_EQ(infos.size(), c.full.size());
  size_t i = 0;
  for (const auto& [name, t] : c.full) {  // std::map: sorted like tensors()
    EXPECT_EQ(infos[i].name, name);
    EXPECT_EQ(infos[i].shape, t.sizes().vec()) << name;
    EXPECT_EQ(infos[i].dtype, t.scalar_type()) << name;
    ++i;
    EXPECT_TRUE(r.has_tensor(name));
    EXPECT_TRUE(r.has_tensor("/" + name));
    EXPECT_TRUE(bitwise_equal(r.read_full(name), t)) << name;
  }
  std::mt19937 gen(seed);
  for (const auto& [name, t] : c.full) {
    for (int k = 0; k < boxes; ++k) {
      std::vector<int64_t> off, shape;
      for (int64_t n : t.sizes()) {
        const int64_t lo = std::uniform_int_distribution<int64_t>(0, n)(gen);
        off.push_back(lo);
        shape.push_back(std::uniform_int_distribution<int64_t>(0, n - lo)(gen));
      }
      auto got = r.read(name, off, shape);
      EXPECT_TRUE(bitwise_equal(got, box_of(t, off, shape).contiguous()))
          << name << " box at " << at::IntArrayRef(off) << " shape " << at::IntArrayRef(shape);
    }
  }
}

// Runs `f`, expecting a lft::UsageError whose message contains every one of `needles`.
void expect_usage_error(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no UsageError (expected one mentioning " << needles.at(0) << ")";
  } catch (const UsageError& e) {
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message: " << e.what() << "\nshould mention: " << n;
  }
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Rank 0 copies the first `fraction` of `from`'s bytes to `to`.
void copy_prefix(const std::string& from, const std::string& to, double fraction) {
  FILE* in = std::fopen(from.c_str(), "rb");
  ASSERT_NE(in, nullptr) << from;
  std::string bytes;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), in)) > 0) bytes.append(buf, n);
  std::fclose(in);
  FILE* out = std::fopen(to.c_str(), "wb");
  ASSERT_NE(out, nullptr) << to;
  const size_t keep = static_cast<size_t>(static_cast<double>(bytes.size()) * fraction);
  std::fwrite(bytes.data(), 1, keep, out);
  std::fclose(out);
}

void write_store(const std::string& path, StoreMode mode, const Content& c) {
  StoreWriter w(comm(), path, mode);
  w.write(c.slices);
  w.close();
}

TEST(CkptStore, SharedFileRoundTrip) {
  TempDir dir;
  const std::string path = dir / "state.h5";
  Content c = make_content();
  {
    StoreWriter w(comm(), path, StoreMode::SharedFile);
    EXPECT_TRUE(w.is_open());
    // In two calls: the first two tensors, then the others.
    w.write({c.slices[0], c.slices[1]});
    w.write({c.slices[2], c.slices[3]});
    if (size() >= 2) {
      EXPECT_NE(w.last_io_mode(), static_cast<int>(H5D_MPIO_NO_COLLECTIVE));
      EXPECT_EQ(w.last_no_collective_cause(), 0u);
    }
    EXPECT_EQ(w.last_io_mode(), static_cast<int>(H5D_MPIO_CONTIGUOUS_COLLECTIVE));
    w.close();
    EXPECT_FALSE(w.is_open());
    w.close();  // idempotent
  }
  StoreReader r(comm(), path);
  EXPECT_EQ(r.mode(), StoreMode::SharedFile);
  EXPECT_EQ(r.store_world_size(), size());
  EXPECT_EQ(r.string_attribute("/", "store_mode"), "shared");
  EXPECT_EQ(r.string_attribute("model/half", "dtype"), "float16");
  EXPECT_EQ(r.string_attribute("model/norm.weight", "dtype"), "bfloat16");
  check_reads(r, c, 1000u + static_cast<unsigned>(rank()));
  EXPECT_EQ(r.tensors("model").size(), 3u);
  EXPECT_EQ(r.tensors("/optim/").size(), 1u);
  EXPECT_EQ(r.tensors("mode").size(), 0u);
  EXPECT_EQ(r.info("optim/exp_avg/t3").shape, (std::vector<int64_t>{3, 10, 4}));
  expect_usage_error([&] { r.info("model/missing"); }, {"model/missing", path});
  expect_usage_error([&] { r.read_full("nope"); }, {"nope"});
  EXPECT_THROW(r.read("model/embed.weight", {10, 0}, {4, 7}), std::invalid_argument);
  EXPECT_THROW(r.read("model/embed.weight", {0}, {4}), std::invalid_argument);
}

TEST(CkptStore, PerRankRoundTrip) {
  TempDir dir;
  const std::string path = dir / "state";
  Content c = make_content();
  {
    StoreWriter w(comm(), path, StoreMode::PerRank);
    w.write(c.slices);
    EXPECT_EQ(w.last_io_mode(), -1);
    w.close();
  }
  for (int k = 0; k < size(); ++k) {
    char name[32];
    std::snprintf(name, sizeof(name), "/rank-%05d.h5", k);
    EXPECT_TRUE(exists(path + name)) << path + name;
  }
  StoreReader r(comm(), path);
  EXPECT_EQ(r.mode(), StoreMode::PerRank);
  EXPECT_EQ(r.store_world_size(), size());
  check_reads(r, c, 2000u + static_cast<unsigned>(rank()));
  // Boxes spanning the files of several ranks: rows 1..11 of the row-split tensor, and a middle
  // band of the column-split 3-d one.
  const auto& w = c.full.at("model/embed.weight");
  EXPECT_TRUE(bitwise_equal(r.read("model/embed.weight", {1, 2}, {11, 4}),
                            box_of(w, {1, 2}, {11, 4}).contiguous()));
  const auto& t = c.full.at("optim/exp_avg/t3");
  EXPECT_TRUE(bitwise_equal(r.read("optim/exp_avg/t3", {1, 1, 1}, {2, 8, 2}),
                            box_of(t, {1, 1, 1}, {2, 8, 2}).contiguous()));
}

TEST(CkptStore, AttributesRoundTrip) {
  TempDir dir;
  std::string toml;
  for (int i = 0; toml.size() < 100000; ++i)
    toml += "key_" + std::to_string(i) + " = \"value " + std::to_string(i * 7) + "\"\n";
  std::vector<int64_t> big(20000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<int64_t>(i * i) - 5;
  const std::string utf8 = "h\xc3\xa9llo \xe2\x9c\x93";
  for (StoreMode mode : {StoreMode::SharedFile, StoreMode::PerRank}) {
    const std::string path = dir / (mode == StoreMode::SharedFile ? "a.h5" : "a");
    Content c = make_content();
    {
      StoreWriter w(comm(), path, mode);
      w.set_attribute("/", "format", "lftrain-checkpoint");
      w.set_attribute("/", "step", int64_t{1234});
      w.set_attribute("", "lr", 3e-4);
      w.set_attribute("/", "mesh", std::vector<int64_t>{2, -3, 4});
      w.set_attribute("/", "empty", std::vector<int64_t>{});
      w.set_attribute("/", "toml", toml);
      w.set_attribute("/", "utf8", utf8);
      w.set_attribute("/", "big", big);
      w.set_attribute("/", "small_int", 5);  // int overload
      w.set_attribute("data/sampler", "seed", int64_t{-7});
      w.set_attribute("optim", "beta2", 0.999);
      w.write(c.slices);
      w.set_attribute("model/embed.weight", "note", std::string("tied"));
      w.set_attribute("/", "step", int64_t{1235});  // replaces
      EXPECT_THROW(w.set_attribute("/", "store_mode", "x"), std::invalid_argument);
      EXPECT_THROW(w.set_attribute("model/embed.weight", "dtype", "x"), std::invalid_argument);
      EXPECT_THROW(w.set_attribute("model/embed.weight/sub", "k", 1), std::invalid_argument);
      if (size() >= 2) {
        EXPECT_THROW(w.set_attribute("/", "differs", int64_t{rank()}), std::invalid_argument);
      }
      w.close();
      EXPECT_THROW(w.set_attribute("/", "late", 1), std::logic_error);
    }
    StoreReader r(comm(), path);
    EXPECT_EQ(r.string_attribute("/", "format"), "lftrain-checkpoint");
    EXPECT_EQ(r.int_attribute("/", "step"), 1235);
    EXPECT_EQ(r.double_attribute("", "lr"), 3e-4);
    EXPECT_EQ(r.double_attribute("/", "step"), 1235.0);  // an integer reads as a double too
    EXPECT_EQ(r.int_vector_attribute("/", "mesh"), (std::vector<int64_t>{2, -3, 4}));
    EXPECT_EQ(r.int_vector_attribute("/", "empty"), std::vector<int64_t>{});
    EXPECT_EQ(r.int_vector_attribute("/", "step"), std::vector<int64_t>{1235});
    EXPECT_EQ(r.string_attribute("/", "toml"), toml);
    EXPECT_EQ(r.string_attribute("/", "utf8"), utf8);
    EXPECT_EQ(r.int_vector_attribute("/", "big"), big);
    EXPECT_EQ(r.int_attribute("/", "small_int"), 5);
    EXPECT_EQ(r.int_attribute("data/sampler", "seed"), -7);
    EXPECT_EQ(r.double_attribute("/optim/", "beta2"), 0.999);
    EXPECT_EQ(r.string_attribute("model/embed.weight", "note"), "tied");
    EXPECT_EQ(r.int_attribute("/", "store_world_size"), size());
    EXPECT_EQ(r.int_attribute("/", "store_version"), 2);
    EXPECT_TRUE(r.has_attribute("/", "toml"));
    EXPECT_TRUE(r.has_attribute("data/sampler", "seed"));
    EXPECT_FALSE(r.has_attribute("/", "differs"));
    EXPECT_FALSE(r.has_attribute("/", "missing"));
    EXPECT_FALSE(r.has_attribute("no/such/group", "seed"));
    expect_usage_error([&] { r.int_attribute("/", "missing"); }, {"missing", path});
    expect_usage_error([&] { r.int_attribute("/", "format"); }, {"format", "not an integer"});
    expect_usage_error([&] { r.string_attribute("/", "step"); }, {"step", "not a string"});
    expect_usage_error([&] { r.int_vector_attribute("/", "lr"); }, {"lr"});
    expect_usage_error([&] { r.int_attribute("no/such", "seed"); }, {"no/such", path});
    check_reads(r, c, 3000u + static_cast<unsigned>(rank()), 3);
  }
}

TEST(CkptStore, ReadAtAnotherWorldSize) {
  TempDir dir;
  Content c = make_content();
  for (StoreMode mode : {StoreMode::SharedFile, StoreMode::PerRank}) {
    const std::string path = dir / (mode == StoreMode::SharedFile ? "s.h5" : "s");
    write_store(path, mode, c);
    // Every rank reads alone, as a 1-rank job would.
    StoreReader r(MPI_COMM_SELF, path);
    EXPECT_EQ(r.store_world_size(), size());
    check_reads(r, c, 4000u + static_cast<unsigned>(rank()), 5);
    // And a split world (two halves), each reading what a differently-sharded job would.
    MPI_Comm half;
    MPI_Comm_split(comm(), rank() % 2, rank(), &half);
    {
      StoreReader rh(half, path);
      const auto& w = c.full.at("model/embed.weight");
      int hr = 0, hs = 1;
      MPI_Comm_rank(half, &hr);
      MPI_Comm_size(half, &hs);
      const int64_t lo = 13 * hr / hs, hi = 13 * (hr + 1) / hs;
      EXPECT_TRUE(bitwise_equal(rh.read("model/embed.weight", {lo, 0}, {hi - lo, 7}),
                                w.narrow(0, lo, hi - lo).contiguous()));
    }
    MPI_Comm_free(&half);
  }
}

TEST(CkptStore, ManyPiecesPerRank) {
  TempDir dir;
  Content c = make_content();
  // 40 bytes: one row of the float32 tensor per piece; 12 bytes: one int64 element per piece of
  // the 3-d tensor (split inside its last dimension).
  for (int64_t limit : {int64_t{40}, int64_t{12}}) {
    const std::string path = dir / ("p" + std::to_string(limit) + ".h5");
    {
      StoreWriter w(comm(), path, StoreMode::SharedFile);
      w.set_max_piece_bytes(limit);
      EXPECT_EQ(w.max_piece_bytes(), limit);
      w.write(c.slices);
      if (size() >= 2) {
        EXPECT_NE(w.last_io_mode(), static_cast<int>(H5D_MPIO_NO_COLLECTIVE));
      }
      w.close();
    }
    StoreReader r(comm(), path);
    check_reads(r, c, 5000u + static_cast<unsigned>(rank()), 5);
  }
}

TEST(CkptStore, EdgeShapesAndDtypes) {
  TempDir dir;
  const int r = rank();
  Content c;
  auto scalar = at::full({}, 2.718281828459045, at::kDouble);
  auto zero = at::empty({0, 4}, at::kByte);
  auto flags = (at::arange(17, at::kLong).remainder(3) == 0);
  auto i32 = (at::arange(15, at::kInt) * -123457).reshape({5, 3});
  auto i8 = (at::arange(9, at::kInt) * 29 - 100).to(at::kChar);
  auto i16 = (at::arange(9, at::kInt) * 3001 - 12000).to(at::kShort);
  auto u8 = at::arange(200, 250, at::kLong).to(at::kByte);
  auto f64t = (at::arange(12, at::kDouble) / 7).reshape({3, 4});
  c.full = {{"s/scalar", scalar}, {"s/zero", zero}, {"s/flags", flags}, {"s/i32", i32},
            {"s/i8", i8}, {"s/i16", i16}, {"s/u8", u8}, {"s/f64t", f64t}};
  c.slices.push_back(Slice{"s/scalar", {}, {}, r == 0 ? scalar : at::empty({0}, at::kDouble)});
  c.slices.push_back(Slice{"s/zero", {0, 4}, {0, 0}, zero});
  const int64_t lo = 17 * r / size(), hi = 17 * (r + 1) / size();
  c.slices.push_back(slice_along("s/flags", flags, 0, lo, hi));
  c.slices.push_back(slice_along("s/i32", i32, 1, 3 * r / size(), 3 * (r + 1) / size()));
  c.slices.push_back(r == size() - 1 ? Slice{"s/i8", {9}, {0}, i8}
                                     : Slice{"s/i8", {9}, {0}, at::empty({0}, at::kChar)});
  c.slices.push_back(r == 0 ? Slice{"s/i16", {9}, {0}, i16}
                            : Slice{"s/i16", {9}, {0}, at::empty({0}, at::kShort)});
  c.slices.push_back(r == 0 ? Slice{"s/u8", {50}, {0}, u8}
                            : Slice{"s/u8", {50}, {0}, at::empty({0}, at::kByte)});
  // A non-contiguous local (a transposed view) on rank 0; the others hold nothing.
  c.slices.push_back(r == 0 ? Slice{"s/f64t", {3, 4}, {0, 0}, f64t.t().contiguous().t()}
                            : Slice{"s/f64t", {3, 4}, {0, 0}, at::empty({0}, at::kDouble)});
  for (StoreMode mode : {StoreMode::SharedFile, StoreMode::PerRank}) {
    const std::string path = dir / (mode == StoreMode::SharedFile ? "e.h5" : "e");
    write_store(path, mode, c);
    StoreReader reader(comm(), path);
    check_reads(reader, c, 6000u + static_cast<unsigned>(r), 4);
    EXPECT_EQ(reader.read("s/scalar", {}, {}).item<double>(), 2.718281828459045);
  }
}

TEST(CkptStore, MissingPathIsUsageError) {
  TempDir dir;
  const std::string path = dir / "does-not-exist.h5";
  expect_usage_error([&] { StoreReader r(comm(), path); }, {path});
  // A directory that is not a store.
  const std::string empty_dir = dir / "empty";
  if (rank() == 0) ::mkdir(empty_dir.c_str(), 0755);
  MPI_Barrier(comm());
  expect_usage_error([&] { StoreReader r(comm(), empty_dir); }, {empty_dir, "rank-00000.h5"});
  // A store path whose parent does not exist.
  expect_usage_error([&] { StoreWriter w(comm(), dir / "no/such/dir.h5", StoreMode::SharedFile); },
                     {dir / "no/such/dir.h5"});
}

TEST(CkptStore, NotHdf5IsUsageError) {
  TempDir dir;
  const std::string path = dir / "garbage.h5";
  if (rank() == 0) {
    FILE* f = std::fopen(path.c_str(), "wb");
    std::mt19937 gen(7);
    for (int i = 0; i < 10000; ++i) std::fputc(static_cast<int>(gen() & 0xff), f);
    std::fclose(f);
  }
  MPI_Barrier(comm());
  expect_usage_error([&] { StoreReader r(comm(), path); }, {path, "not an HDF5 file"});
}

TEST(CkptStore, TruncatedStoreIsUsageError) {
  TempDir dir;
  Content c = make_content();
  const std::string good = dir / "good.h5";
  const std::string half = dir / "half.h5";
  write_store(good, StoreMode::SharedFile, c);
  if (rank() == 0) copy_prefix(good, half, 0.5);
  MPI_Barrier(comm());
  expect_usage_error([&] { StoreReader r(comm(), half); }, {half});

  // A per-rank store with its last rank file cut in half, and one with a rank file missing.
  const std::string good_dir = dir / "good";
  write_store(good_dir, StoreMode::PerRank, c);
  const std::string cut_dir = dir / "cut", missing_dir = dir / "missing";
  char last[32];
  std::snprintf(last, sizeof(last), "rank-%05d.h5", size() - 1);
  if (rank() == 0) {
    ::mkdir(cut_dir.c_str(), 0755);
    ::mkdir(missing_dir.c_str(), 0755);
    for (int k = 0; k < size(); ++k) {
      char name[32];
      std::snprintf(name, sizeof(name), "rank-%05d.h5", k);
      copy_prefix(good_dir + "/" + name, cut_dir + "/" + name, k == size() - 1 ? 0.5 : 1.0);
      if (k != size() - 1) copy_prefix(good_dir + "/" + name, missing_dir + "/" + name, 1.0);
    }
  }
  MPI_Barrier(comm());
  expect_usage_error([&] { StoreReader r(comm(), cut_dir); }, {cut_dir + "/" + last});
  if (size() == 1)
    expect_usage_error([&] { StoreReader r(comm(), missing_dir); },
                       {missing_dir, "rank-00000.h5"});
  else
    expect_usage_error([&] { StoreReader r(comm(), missing_dir); },
                       {missing_dir + "/" + last, "missing"});
  // A rank file opened on its own.
  expect_usage_error([&] { StoreReader r(comm(), good_dir + "/rank-00000.h5"); },
                     {"rank-00000.h5", "directory"});
}

TEST(CkptStore, RefusesToOverwrite) {
  TempDir dir;
  Content c = make_content();
  for (StoreMode mode : {StoreMode::SharedFile, StoreMode::PerRank}) {
    const std::string path = dir / (mode == StoreMode::SharedFile ? "o.h5" : "o");
    write_store(path, mode, c);
    expect_usage_error([&] { StoreWriter w(comm(), path, mode); }, {path, "already exists"});
    // The first store is intact.
    StoreReader r(comm(), path);
    check_reads(r, c, 7000u + static_cast<unsigned>(rank()), 2);
  }
}

TEST(CkptStore, MismatchedSlicesAcrossRanks) {
  LFT_REQUIRE_RANKS(2);
  TempDir dir;
  Content c = make_content();
  for (StoreMode mode : {StoreMode::SharedFile, StoreMode::PerRank}) {
    const std::string path = dir / (mode == StoreMode::SharedFile ? "m.h5" : "m");
    StoreWriter w(comm(), path, mode);
    // A different name on rank 1.
    auto bad = c.slices;
    if (rank() == 1) bad[1].name = "model/norm.weight2";
    try {
      w.write(bad);
      ADD_FAILURE() << "no std::invalid_argument";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("#1"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("model/norm.weight"), std::string::npos) << e.what();
    }
    // A different global shape on the last rank.
    bad = c.slices;
    if (rank() == size() - 1) bad[3].global_shape = {6, 6};
    EXPECT_THROW(w.write(bad), std::invalid_argument);
    // Fewer tensors on rank 0.
    bad = c.slices;
    if (rank() == 0) bad.pop_back();
    EXPECT_THROW(w.write(bad), std::invalid_argument);
    // A box outside the tensor on rank 1 only.
    bad = c.slices;
    if (rank() == 1) bad[0] = Slice{"model/embed.weight", {13, 7}, {12, 0}, at::zeros({2, 7})};
    try {
      w.write(bad);
      ADD_FAILURE() << "no std::invalid_argument";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("outside"), std::string::npos) << e.what();
    }
    // Nothing was written; the writer still works.
    w.write(c.slices);
    EXPECT_THROW(w.write({c.slices[0]}), std::invalid_argument);  // already written
    w.close();
    StoreReader r(comm(), path);
    check_reads(r, c, 8000u + static_cast<unsigned>(rank()), 2);
  }
}

// The file offset of dataset `name`'s (contiguous) data in `file`.
int64_t data_offset(const std::string& file, const std::string& name) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  const auto offset = static_cast<int64_t>(H5Dget_offset(d));
  H5Dclose(d);
  H5Fclose(f);
  return offset;
}

std::string read_bytes(const std::string& path) {
  std::string bytes;
  FILE* in = std::fopen(path.c_str(), "rb");
  if (in == nullptr) return bytes;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), in)) > 0) bytes.append(buf, n);
  std::fclose(in);
  return bytes;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  FILE* out = std::fopen(path.c_str(), "wb");
  ASSERT_NE(out, nullptr) << path;
  std::fwrite(bytes.data(), 1, bytes.size(), out);
  std::fclose(out);
}

TEST(CkptStore, ChecksumNamesTheCorruptTensor) {
  TempDir dir;
  Content c = make_content();
  for (StoreMode mode : {StoreMode::SharedFile, StoreMode::PerRank}) {
    const bool shared = mode == StoreMode::SharedFile;
    const std::string path = dir / (shared ? "c.h5" : "c");
    write_store(path, mode, c);
    // The file to damage: the shared one, or the first rank file that holds rows of embed.weight
    // (some ranks hold none at some world sizes).
    std::string file = shared ? path : "";
    int64_t at = -1;
    if (rank() == 0) {
      for (int k = 0; k < size() && at < 0; ++k) {
        char name[32];
        std::snprintf(name, sizeof(name), "/rank-%05d.h5", k);
        const std::string candidate = shared ? path : path + name;
        const int64_t offset = data_offset(candidate, "model/embed.weight");
        if (offset > 0 && offset != static_cast<int64_t>(HADDR_UNDEF)) {
          file = candidate;
          at = offset + 5;
        }
        if (shared) break;
      }
      if (at > 0) {
        std::string bytes = read_bytes(file);
        bytes[static_cast<size_t>(at)] = static_cast<char>(bytes[static_cast<size_t>(at)] ^ 0x10);
        write_bytes(file, bytes);
      }
    }
    bcast_string(file);
    ASSERT_FALSE(file.empty()) << "no file holds data of model/embed.weight";  // the same on every rank
    MPI_Barrier(comm());
    StoreReader r(comm(), path);
    expect_usage_error([&] { r.verify("model/embed.weight"); }, {"'model/embed.weight'", "is corrupt", file});
    expect_usage_error([&] { r.read_full("model/embed.weight"); }, {"'model/embed.weight'", "is corrupt"});
    for (const char* other : {"model/norm.weight", "optim/exp_avg/t3", "model/half"}) {
      EXPECT_NO_THROW(r.verify(other)) << other;
      EXPECT_TRUE(bitwise_equal(r.read_full(other), c.full.at(other))) << other;
    }
  }
}

// Random byte flips anywhere in a store's files (metadata and data): each damaged copy either
// fails to open or read with a UsageError, or reads back every tensor bitwise equal. Never a
// crash, never other values.
TEST(CkptStore, ByteFlipFuzz) {
  TempDir dir;
  Content c = make_content();
  const std::string path = dir / "f.h5";
  write_store(path, StoreMode::SharedFile, c);
  if (rank() != 0) return;
  const std::string good = read_bytes(path), good_sums = read_bytes(path + ".sum");
  ASSERT_FALSE(good_sums.empty()) << "no checksum sidecar " << path << ".sum";
  const std::string copy = dir / "flipped.h5";
  std::mt19937 gen(20261201);
  int detected = 0, intact = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    std::string bytes = good, sums = good_sums;
    std::string& target = trial % 10 == 9 ? sums : bytes;  // now and then the sidecar itself
    const int flips = 1 + static_cast<int>(gen() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = gen() % target.size();
      target[at] = static_cast<char>(target[at] ^ static_cast<char>(1 + gen() % 255));
    }
    write_bytes(copy, bytes);
    write_bytes(copy + ".sum", sums);
    try {
      StoreReader r(MPI_COMM_SELF, copy);
      for (const auto& [name, t] : c.full) {
        const at::Tensor got = r.read_full(name);
        ASSERT_TRUE(bitwise_equal(got, t)) << "trial " << trial << ": '" << name
                                           << "' read back different values without an error";
      }
      ++intact;
    } catch (const UsageError&) {
      ++detected;
    }
  }
  EXPECT_GT(detected, 0);
  std::printf("byte-flip fuzz: %d damaged copies detected, %d read back intact\n", detected, intact);
}

}  // namespace
}  // namespace lft::ckpt
