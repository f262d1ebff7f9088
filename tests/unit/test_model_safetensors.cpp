// safetensors: round trip of every supported dtype, the Python-made fixture, and the errors for
// malformed files (each naming the file and, where it applies, the tensor).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <ATen/ATen.h>

#include "lft/model/safetensors.h"
#include "test_util.h"

namespace lft::model {
namespace {

std::string fixture_dir(const std::string& name) {
  const std::string here = __FILE__;
  return here.substr(0, here.rfind('/')) + "/../fixtures/" + name;
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "lft_safetensors_" + std::to_string(::getpid()) + "_" + name;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A file made of the given header JSON (padded) and `data_bytes` zero bytes.
std::string make_file(const std::string& name, std::string header, std::size_t data_bytes) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  bytes += header;
  bytes.append(data_bytes, '\0');
  const std::string path = temp_path(name);
  write_bytes(path, bytes);
  return path;
}

std::string error_of(const std::string& path) {
  return test::message_of<SafetensorsError>([&] { read_safetensors(path); });
}

TEST(Safetensors, RoundTripEveryDtype) {
  std::map<std::string, at::Tensor> in;
  const at::Tensor base = at::randn({3, 5}) * 10;
  in["f64"] = base.to(at::kDouble);
  in["f32"] = base;
  in["f16"] = base.to(at::kHalf);
  in["bf16"] = base.to(at::kBFloat16);
  in["i64"] = base.to(at::kLong);
  in["i32"] = base.to(at::kInt);
  in["i16"] = base.to(at::kShort);
  in["i8"] = base.to(at::kChar);
  in["u8"] = base.abs().to(at::kByte);
  in["bool"] = base > 0;
  in["f8_e4m3"] = base.to(at::kFloat8_e4m3fn);
  in["f8_e5m2"] = base.to(at::kFloat8_e5m2);
  in["scalar"] = at::scalar_tensor(2.5);
  in["empty"] = at::zeros({0, 4});
  in["strided"] = base.t();  // written contiguous
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "x\"y"}};
  const std::string path = temp_path("roundtrip.safetensors");
  write_safetensors(path, in, meta);

  const std::string bytes = read_bytes(path);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.substr(8, 16), "{\"__metadata__\":");

  std::map<std::string, std::string> meta_back;
  const auto out = read_safetensors(path, &meta_back);
  EXPECT_EQ(meta_back, meta);
  ASSERT_EQ(out.size(), in.size());
  for (const auto& [name, t] : in) {
    ASSERT_EQ(out.count(name), 1u) << name;
    const at::Tensor& u = out.at(name);
    EXPECT_EQ(u.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(u.sizes(), t.sizes()) << name;
    if (t.is_floating_point() && t.element_size() == 1) {
      EXPECT_TRUE(at::equal(u.to(at::kFloat), t.to(at::kFloat))) << name;
    } else {
      EXPECT_TRUE(at::equal(u, t)) << name;
    }
  }
  // Tensors are stored largest element first, then by name: f64 begins at offset 0.
  const SafetensorsHeader h = read_safetensors_header(path);
  EXPECT_EQ(h.tensors.front().name, "f64");
  EXPECT_EQ(h.find("f64")->begin, 0u);
  EXPECT_EQ(h.data_start, 8 + n);
  EXPECT_EQ(read_safetensors_tensor(path, h, "bf16").scalar_type(), at::kBFloat16);
  ::unlink(path.c_str());
}

TEST(Safetensors, ReadsPythonFixture) {
  std::map<std::string, std::string> meta;
  const auto io = read_safetensors(fixture_dir("llama-tiny") + "/io.safetensors", &meta);
  EXPECT_EQ(meta.at("pad_id"), "0");
  const at::Tensor ids = io.at("input_ids");
  EXPECT_EQ(ids.scalar_type(), at::kLong);
  EXPECT_EQ(ids.sizes(), (std::vector<std::int64_t>{2, 9}));
  EXPECT_EQ(ids[0][0].item<std::int64_t>(), 16);
  EXPECT_EQ(ids[1][8].item<std::int64_t>(), 0);
  EXPECT_EQ(io.at("logits").sizes(), (std::vector<std::int64_t>{2, 9, 61}));
  EXPECT_EQ(io.at("loss").dim(), 0);

  std::map<std::string, std::string> model_meta;
  const auto weights =
      read_safetensors(fixture_dir("llama-tiny") + "/model.safetensors", &model_meta);
  EXPECT_EQ(model_meta.at("format"), "pt");  // save_pretrained's marker
  EXPECT_EQ(weights.at("model.layers.1.self_attn.k_proj.weight").sizes(),
            (std::vector<std::int64_t>{16, 32}));
  EXPECT_EQ(weights.at("lm_head.weight").scalar_type(), at::kFloat);
}

TEST(Safetensors, Errors) {
  EXPECT_CONTAINS(error_of("/nonexistent.safetensors"), "/nonexistent.safetensors: cannot open");

  const std::string tiny = temp_path("tiny");
  write_bytes(tiny, "abc");
  EXPECT_CONTAINS(error_of(tiny), tiny + ": truncated: 3 bytes");

  const std::string huge = temp_path("huge");
  write_bytes(huge, std::string("\xff\xff\xff\xff\xff\xff\x00\x00", 8) + "{}");
  EXPECT_CONTAINS(error_of(huge), "exceeds the limit");

  // A real file cut short: its data runs past the end.
  std::map<std::string, at::Tensor> t = {{"a.weight", at::ones({64})}, {"b", at::ones({3})}};
  const std::string good = temp_path("good");
  write_safetensors(good, t);
  const std::string bytes = read_bytes(good);
  const std::string cut = temp_path("cut");
  write_bytes(cut, bytes.substr(0, bytes.size() - 100));
  EXPECT_CONTAINS(error_of(cut), cut + ": tensor 'a.weight': truncated file");
  write_bytes(cut, bytes.substr(0, 20));
  EXPECT_CONTAINS(error_of(cut), cut + ": truncated: the header needs");
  write_bytes(cut, bytes + "xx");
  EXPECT_CONTAINS(error_of(cut), "2 trailing bytes");

  EXPECT_CONTAINS(error_of(make_file("badjson", "{\"a\": [", 0)), "header is not valid JSON");
  EXPECT_CONTAINS(error_of(make_file("dtype", R"({"w":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", 8)),
                  "tensor 'w': dtype 'C64' is not supported");
  EXPECT_CONTAINS(error_of(make_file("size", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)),
                  "tensor 'w': data_offsets [0,8] hold 8 bytes, but F32 [3] needs 12");
  EXPECT_CONTAINS(error_of(make_file("range", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8)),
                  "tensor 'w': truncated file: data ends at 16 but the data buffer has 8 bytes");
  EXPECT_CONTAINS(
      error_of(make_file("gap", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8)),
      "tensor 'w': data_offsets begin at 4, expected 0 (gap)");
  EXPECT_CONTAINS(
      error_of(make_file("overlap", R"({"v":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         8)),
      "(overlap)");
  EXPECT_CONTAINS(error_of(make_file("neg", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0)),
                  "tensor 'w': shape [-1] is not a list of non-negative integers");
  EXPECT_CONTAINS(error_of(make_file("meta", R"({"__metadata__":{"a":1}})", 0)),
                  "__metadata__ value of 'a' is not a string");
  EXPECT_CONTAINS(error_of(make_file("offs", R"({"w":{"dtype":"F32","shape":[1]}})", 4)),
                  "tensor 'w': 'data_offsets' must be [begin, end]");

  const SafetensorsHeader h = read_safetensors_header(good);
  try {
    read_safetensors_tensor(good, h, "nope");
    ADD_FAILURE() << "expected SafetensorsError";
  } catch (const SafetensorsError& e) {
    EXPECT_CONTAINS(e.what(), "tensor 'nope': not in the file");
  }
  for (const std::string& p : {tiny, huge, good, cut}) ::unlink(p.c_str());
}

}  // namespace
}  // namespace lft::model
