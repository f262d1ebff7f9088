// Float8 training with tensorwise dynamic scaling (the recipe of torchao's Float8Linear that
// torchtitan and LlamaFactory use; docs/fp8.md). A float8 linear computes its three matmuls in
// float8: the forward and the input gradient from e4m3 inputs and weights, the output gradient in
// e5m2; each tensor is cast with one scale from its absolute maximum:
//   scale = fmax / max(amax, 1e-12)   (fmax: 448 for e4m3, 57344 for e5m2; fp32)
//   data  = saturate(x * scale)       (clamped to +-fmax, then LibTorch's rounding cast)
// and the products run through at::_scaled_mm with the inverse scales, outputs in the compute
// dtype. Master weights, their gradients and the optimizer stay fp32.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace lft::model {

class CausalLM;

struct Float8Tensor {
  at::Tensor data;       // float8_e4m3fn or float8_e5m2, the shape of the source
  at::Tensor inv_scale;  // fp32 scalar: source ~= data * inv_scale
};

// _scaled_mm on CUDA needs every dimension of both operands to be a multiple of this: the linear
// widths are checked when the run is planned, the token count is padded with zero rows.
constexpr std::int64_t kFloat8Multiple = 16;

// While one lives, the float8 GEMMs of this thread append their operand shapes (tests).
struct Float8GemmLog {
  Float8GemmLog();
  ~Float8GemmLog();
  Float8GemmLog(const Float8GemmLog&) = delete;
  Float8GemmLog& operator=(const Float8GemmLog&) = delete;
  std::vector<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> gemms;  // (a, b)

 private:
  Float8GemmLog* previous_;
};

// The largest finite value of e4m3fn (448) or e5m2 (57344).
double float8_max(at::ScalarType dtype);

// A float8 linear whose weight is split over a tensor-parallel group (megatron): the amax of each
// split tensor is agreed, the largest over the group, so that every shard is cast with the whole
// tensor's scale, as torchao's tensorwise scaling of a sharded tensor does.
struct Float8Sharding {
  std::function<void(const at::Tensor& amax)> max_over_group;  // in place, collective
  bool input = false;        // row-parallel: the input's features are split too
  bool grad_output = false;  // column-parallel: the output gradient's features are split too
};

// `x` cast to `dtype` with its tensorwise scale; `amax` (an fp32 scalar), when given, replaces x's
// own absolute maximum (a weight shard cast with the whole weight's scale).
Float8Tensor to_float8(const at::Tensor& x, at::ScalarType dtype, const at::Tensor& amax = {});

// y = x W^T (+ b) with the three matmuls in float8; x [..., in], weight [out, in]. The output (and
// the input gradient) in the autocast dtype when autocast is on, else x's dtype.
// `weight8`, when its data is defined, is the weight already in e4m3 (an fsdp2 float8 all-gather).
// `sharding`, when given, must outlive the backward.
at::Tensor float8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                         const Float8Tensor& weight8 = {}, const Float8Sharding* sharding = nullptr);

// Makes the linears of the decoder layers (q, k, v, o, gate, up, down; not LoRA adapters, the
// embedding or the head, as torchao leaves them) float8 linears. Returns how many.
int use_float8_linears(CausalLM& model);

}  // namespace lft::model
