// bitsandbytes' 4-bit formats, computed with the same float32 operations as its CPU path (the
// torch reference kernel for quantize_4bit, the native one for the 8-bit absmax quantization), so
// that the bytes and the dequantized weights are equal to bitsandbytes' (job_quantize_bnb:
// tools/check-bnb.py compares them).
#include "lft/model/quantize_4bit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

namespace lft::model {
namespace {

// NF4: the quantiles of a standard normal distribution normalised to [-1, 1], with an exact zero
// (the QLoRA paper, appendix E), as bitsandbytes lists them.
const std::array<float, 16> kNf4 = {-1.0f,
                                    -0.6961928009986877f,
                                    -0.5250730514526367f,
                                    -0.39491748809814453f,
                                    -0.28444138169288635f,
                                    -0.18477343022823334f,
                                    -0.09105003625154495f,
                                    0.0f,
                                    0.07958029955625534f,
                                    0.16093020141124725f,
                                    0.24611230194568634f,
                                    0.33791524171829224f,
                                    0.44070982933044434f,
                                    0.5626170039176941f,
                                    0.7229568362236023f,
                                    1.0f};
// FP4 (1 sign, 2 exponent, 1 mantissa bits) by code index, divided by its largest value, 12.
const std::array<float, 16> kFp4Unscaled = {0, 0.0625f, 8, 12, 4, 6, 2, 3, -0.0f, -0.0625f, -8, -12, -4, -6, -2, -3};

}  // namespace

const at::Tensor& quant4_code(Quant4Type type) {
  // Made once: dequantize_4bit runs in every forward and backward of a quantized linear.
  static const at::Tensor nf4 = at::tensor(std::vector<float>(kNf4.begin(), kNf4.end()));
  static const at::Tensor fp4 = [] {
    const at::Tensor data = at::tensor(std::vector<float>(kFp4Unscaled.begin(), kFp4Unscaled.end()));
    return data / data.abs().max();
  }();
  return type == Quant4Type::NF4 ? nf4 : fp4;
}

namespace {

// absmax per block of the flattened float32 tensor (the last block may be short).
at::Tensor blockwise_absmax(const at::Tensor& flat, std::int64_t blocksize) {
  const std::int64_t n = flat.numel(), full = n - n % blocksize;
  at::Tensor absmax = flat.narrow(0, 0, full).view({full / blocksize, blocksize}).abs().amax(-1);
  if (full < n) absmax = at::cat({absmax, flat.narrow(0, full, n - full).abs().max().clamp_min(1e-38).view({1})});
  return absmax;
}

// The elements scaled into [-1, 1] by their block's absmax, as bitsandbytes' reference kernel
// (x * (1 / absmax), clamped; 1e-38 for an all-zero block).
at::Tensor scaled_by_block(const at::Tensor& flat, const at::Tensor& absmax, std::int64_t blocksize) {
  const std::int64_t n = flat.numel(), full = n - n % blocksize, blocks = full / blocksize;
  at::Tensor scaled = at::clamp(flat.narrow(0, 0, full).view({blocks, blocksize}) *
                                    (1.0 / absmax.narrow(0, 0, blocks).clamp_min(1e-38).view({-1, 1})),
                                -1, 1)
                          .reshape({-1});
  if (full < n) scaled = at::cat({scaled, at::clamp(flat.narrow(0, full, n - full) / absmax[blocks], -1, 1)});
  return scaled;
}

// bitsandbytes' native 8-bit blockwise quantization (cpu_ops.cpp): the normalised value picks one
// of 65536 bins over [-1, 1], each bin the nearest code value by the midpoints.
struct Dynamic8bitQuantizer {
  static constexpr int kBins = 65536;
  std::vector<std::uint8_t> bin_code = std::vector<std::uint8_t>(kBins);

  explicit Dynamic8bitQuantizer(const at::Tensor& code) {
    const float* c = code.data_ptr<float>();
    std::array<float, 255> midpoints{};
    for (int i = 0; i < 255; ++i) midpoints[static_cast<std::size_t>(i)] = 0.5f * (c[i] + c[i + 1]);
    int index = 0;
    for (int i = 0; i < kBins; ++i) {
      const float value = -1.0f + (2.0f * static_cast<float>(i)) / static_cast<float>(kBins - 1);
      while (index < 255 && midpoints[static_cast<std::size_t>(index)] < value) ++index;
      bin_code[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(index);
    }
  }

  std::uint8_t operator()(float normalised) const {
    const float v = std::clamp(normalised, -1.0f, 1.0f);
    // bitsandbytes builds this with -mfma, where GCC contracts the multiply-add into one FMA.
    const float bin = std::fma((v + 1.0f) * 0.5f, static_cast<float>(kBins - 1), 0.5f);
    return bin_code[static_cast<std::size_t>(static_cast<std::uint16_t>(bin))];
  }
};

}  // namespace

Quant4Type quant4_type_of(const std::string& name) {
  if (name == "nf4") return Quant4Type::NF4;
  if (name == "fp4") return Quant4Type::FP4;
  throw std::invalid_argument("4-bit quantization type '" + name + "' is not nf4 or fp4");
}

const char* quant4_name(Quant4Type type) { return type == Quant4Type::NF4 ? "nf4" : "fp4"; }

std::int64_t Quantized4bit::bytes() const {
  std::int64_t total = packed.numel();
  for (const at::Tensor& t : {absmax, quantized_absmax, absmax_scale})
    if (t.defined()) total += t.numel() * static_cast<std::int64_t>(t.element_size());
  return total;
}

const at::Tensor& dynamic_8bit_code() {
  static const at::Tensor code = [] {
    // bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for each
    // exponent i, the midpoints of 2^i + 1 float32 steps over [0.1, 1], times +-10^(i - 6) in
    // float32 (a torch tensor times a Python number); then 0 and 1, sorted.
    std::vector<double> data;
    for (int i = 0; i < 7; ++i) {
      const at::Tensor bounds = at::linspace(0.1, 1, (1 << i) + 1, at::kFloat);
      const at::Tensor means = (bounds.narrow(0, 0, bounds.numel() - 1) + bounds.narrow(0, 1, bounds.numel() - 1)) / 2.0;
      const double scale = std::pow(10.0, static_cast<double>(i - 6));
      for (const at::Tensor& signed_means : {means * scale, means * -scale})
        for (std::int64_t k = 0; k < signed_means.numel(); ++k) data.push_back(signed_means[k].item<float>());
    }
    data.push_back(0);
    data.push_back(1.0);
    std::sort(data.begin(), data.end());
    std::vector<float> values(data.begin(), data.end());
    return at::tensor(values);
  }();
  return code;
}

Quantized4bit quantize_4bit(const at::Tensor& weight, Quant4Type type, bool double_quant, std::int64_t blocksize) {
  c10::NoGradGuard no_grad;
  Quantized4bit q;
  q.type = type;
  q.blocksize = blocksize;
  q.shape = weight.sizes().vec();
  const at::Tensor flat = weight.detach().reshape({-1}).to(at::kFloat).contiguous();
  const at::Tensor absmax = blockwise_absmax(flat, blocksize);
  at::Tensor scaled = scaled_by_block(flat, absmax, blocksize);
  if (scaled.numel() % 2 != 0) scaled = at::constant_pad_nd(scaled, {0, 1});
  // The nearest code value, by the midpoints of the sorted code (a value on a midpoint takes the
  // lower one); FP4's code is not sorted, so the sorted position maps back to its index.
  const at::Tensor code = quant4_code(type);
  const at::Tensor order = at::argsort(code);
  const at::Tensor sorted = code.index_select(0, order);
  const at::Tensor midpoints = (sorted.narrow(0, 0, 15) + sorted.narrow(0, 1, 15)) / 2;
  at::Tensor index = at::bucketize(scaled, midpoints, /*out_int32=*/true);
  if (type != Quant4Type::NF4) index = order.index_select(0, index.to(at::kLong));
  const at::Tensor nibbles = index.to(at::kByte);
  q.packed = at::bitwise_or(at::bitwise_left_shift(nibbles.slice(0, 0, at::indexing::None, 2), 4),
                            nibbles.slice(0, 1, at::indexing::None, 2));
  if (!double_quant) {
    q.absmax = absmax;
    return q;
  }
  // Double quantization (compress_statistics): the absmax values less their mean, 8 bits each.
  const float offset = absmax.mean().item<float>();
  const at::Tensor centred = (absmax - offset).contiguous();
  const std::int64_t n = centred.numel(), blocks = (n + 255) / 256;
  static const Dynamic8bitQuantizer quantizer(dynamic_8bit_code());
  q.quantized_absmax = at::empty({n}, at::kByte);
  q.absmax_scale = at::empty({blocks}, at::kFloat);
  const float* x = centred.data_ptr<float>();
  std::uint8_t* out = q.quantized_absmax.data_ptr<std::uint8_t>();
  float* scale = q.absmax_scale.data_ptr<float>();
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t begin = b * 256, end = std::min(begin + 256, n);
    float block_max = 0.0f;
    for (std::int64_t i = begin; i < end; ++i) block_max = std::max(block_max, std::fabs(x[i]));
    scale[b] = block_max;
    const float inverse = block_max == 0.0f ? 0.0f : 1.0f / block_max;
    for (std::int64_t i = begin; i < end; ++i) out[i] = block_max == 0.0f ? 0 : quantizer(x[i] * inverse);
  }
  q.absmax_offset = offset;
  return q;
}

namespace {

// TYPE's values of the two nibbles of every byte value, high nibble first: [256, 2] float32.
const at::Tensor& byte_code(Quant4Type type) {
  static const auto make = [](Quant4Type t) {
    const at::Tensor bytes = at::arange(256, at::kInt);
    const at::Tensor& code = quant4_code(t);
    return at::stack({code.index_select(0, bytes.div(16, "floor")), code.index_select(0, bytes.remainder(16))}, 1)
        .contiguous();
  };
  static const at::Tensor nf4 = make(Quant4Type::NF4), fp4 = make(Quant4Type::FP4);
  return type == Quant4Type::NF4 ? nf4 : fp4;
}

// CODE on DEVICE. Off the host, each table is copied there once per device and kept: a copy from
// pageable host memory waits for the GPU, and dequantize runs for every quantized linear in the
// forward, its recompute and the backward. The tables are never freed (a process-long cache of a
// few hundred bytes; no destructor runs at exit, after CUDA may be gone).
const at::Tensor& code_on(const at::Tensor& code, const at::Device& device) {
  if (device.is_cpu()) return code;
  static std::mutex mutex;
  static auto* copies = new std::map<std::pair<const void*, std::string>, at::Tensor>();
  const std::lock_guard<std::mutex> lock(mutex);
  at::Tensor& copy = (*copies)[{code.data_ptr(), device.str()}];
  if (!copy.defined()) copy = code.to(device);
  return copy;
}

}  // namespace

at::Tensor block_absmax(const Quantized4bit& q) {
  if (!q.double_quantized()) return q.absmax;
  // dequantize_blockwise (code * block scale, float32), then + offset.
  const std::int64_t n = q.quantized_absmax.numel();
  at::Tensor values = code_on(dynamic_8bit_code(), q.quantized_absmax.device())
                          .index_select(0, q.quantized_absmax.to(at::kInt));
  const at::Tensor scales = q.absmax_scale.repeat_interleave(256).narrow(0, 0, n);
  return values * scales + q.absmax_offset;
}

at::Tensor dequantize_4bit(const Quantized4bit& q, c10::ScalarType dtype) {
  c10::NoGradGuard no_grad;
  std::int64_t n = 1;
  for (std::int64_t d : q.shape) n *= d;
  // Each packed byte looked up whole, its two values (high nibble first) at once: one int32 index
  // per byte and the float32 values are all a weight's dequantization holds beside its result.
  at::Tensor pairs =
      code_on(byte_code(q.type), q.packed.device()).index_select(0, q.packed.to(at::kInt));  // [bytes, 2]
  at::Tensor values = pairs.view({-1}).narrow(0, 0, n);
  const at::Tensor absmax = block_absmax(q);
  const std::int64_t full = n - n % q.blocksize, blocks = full / q.blocksize;
  values.narrow(0, 0, full).view({blocks, q.blocksize}).mul_(absmax.narrow(0, 0, blocks).view({-1, 1}));
  if (full < n) values.narrow(0, full, n - full).mul_(absmax[blocks]);
  return values.view(q.shape).to(dtype);
}

}  // namespace lft::model
