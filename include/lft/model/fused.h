// Fused CPU kernels for the decoder's memory-bound operations (config `fused_kernels`): RMSNorm,
// SwiGLU, rotary embedding, the causal-LM cross-entropy, the blocked attention's softmax and the
// mixture of experts' combine, each one pass forward and one pass backward with its own autograd
// function, instead of the 4-8 ATen operations (and their intermediate tensors) of the plain
// formulas. Same arithmetic in fp32, in another order, so results differ from the plain path by
// rounding (a few ulp; tests/unit/test_fused.cpp); where values are bf16, exp is ATen's 20-ulp
// exp_u20. Each applies where its inputs are CPU tensors of the dtypes it handles and the CPU has
// AVX2 + FMA; elsewhere (CUDA, other dtypes) the plain formula runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace lft::model {

enum FusedKernel : unsigned {
  kFusedRmsNorm = 1,
  kFusedSwiGlu = 2,
  kFusedRotary = 4,
  kFusedCrossEntropy = 8,
  kFusedAttention = 16,  // the blocked causal attention's softmax (bf16, fp32; model/blocked_attention.h)
  kFusedMoeCombine = 32,  // the routed experts' outputs, weighted, back to their tokens (model/moe.cpp)
  kFusedAll = 63,
};

// "all", "none" or a comma list of rmsnorm, swiglu, rotary, cross_entropy, attention, moe_combine; throws
// std::invalid_argument naming what is not one of those.
unsigned parse_fused_kernels(const std::string& value);
std::string fused_kernels_name(unsigned mask);
// The process-wide choice (the session sets it from the config; default none).
void set_fused_kernels(unsigned mask);
unsigned fused_kernels();
// Whether this CPU runs the fused kernels (AVX2 and FMA).
bool fused_kernels_supported();
// Which build of the kernels runs: "avx512" where the CPU has AVX-512 F, BW, VL and DQ (16 lanes),
// else "avx2". set_kernel_isa takes "auto" (that choice), "avx2" or "avx512" (tests compare the
// builds); throws std::invalid_argument for another name or an AVX-512 the CPU lacks.
std::string kernel_isa();
void set_kernel_isa(const std::string& isa);

// Each returns an undefined tensor where the fused kernel does not apply (not enabled, not this
// device or dtype): the caller then runs the plain formula.
at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up);
// x [b, t, heads, d] contiguous, cos/sin [t, d] fp32: the rotated x as [b, heads, t, d].
at::Tensor fused_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// sum(t^2) accumulated in double, without a double copy of t: the AVX2 kernel for contiguous fp32
// CPU tensors where the CPU has it (whatever fused_kernels says: the result is the same sum in
// another order), else t.to(double).pow(2).sum().
double sum_of_squares(const at::Tensor& t);
// Row i of the result is row index[i] of the 2-D `rows` (zeros where index[i] < 0), in `dtype`:
// one pass with the cast where the CPU runs the fused kernels (whatever fused_kernels says: the
// same values; index_copy_ on bf16 rows is 4x slower), else index_select and masked_fill_ (also
// with allow_kernel false, for the tests).
at::Tensor gather_rows(const at::Tensor& rows, const at::Tensor& index, at::ScalarType dtype, bool allow_kernel = true);
// out [R, H] (fp32 or bf16, the routed rows' expert outputs), weights [R] (fp32 or bf16), token_of
// [R] int64: the [tokens, H] fp32 sum of out * weights into each row's token, as zeros + index_add
// of the products (each product rounded to its dtype, the promotion of out's and weights', a
// token's rows added in fp32 in row order), in one pass and without the [R, H] products.
// Undefined where it does not apply (not enabled, not these dtypes, a result dtype other than
// fp32): the caller runs the formula.
at::Tensor fused_combine_rows(const at::Tensor& out, const at::Tensor& weights, const at::Tensor& token_of,
                              std::int64_t tokens, at::ScalarType result_dtype);
// logits [b, t, v]: the per-token losses [b, t - 1] (0 where the target is ignore_id).
at::Tensor fused_token_losses(const at::Tensor& logits, const at::Tensor& input_ids, std::int64_t ignore_id);

}  // namespace lft::model
