// Causal attention in blocks of query rows, for bf16 on a CPU. LibTorch's CPU flash attention
// runs its block products through MKL's bf16 GEMM, which on a CPU that MKL does not recognise as
// Intel's (AMD Zen 4 here) converts both operands to fp32 and runs fp32 GEMMs, at half the bf16
// rate or less. This keeps the products in at::matmul (oneDNN's bf16 kernels), and skips the
// keys above the diagonal block by block. The arithmetic is transformers' eager attention in bf16
// (scores from a bf16 GEMM, scaled and masked in bf16, softmax in fp32, probabilities back to
// bf16), block by block; autograd differentiates it, so under gradient checkpointing its saved
// scores live for one layer's recomputation only.
#pragma once

#include <ATen/core/Tensor.h>

namespace lft::model {

// Whether blocked_causal_attention serves these inputs (a CPU, bf16 or fp32 under bf16 autocast,
// and a query length worth cutting: beyond one block).
bool blocked_attention_applies(const at::Tensor& q);

// q [B, heads, T, d], k and v [B, kv_heads, T, d], kv head g serving query heads g*r .. g*r+r-1 ->
// [B, heads, T, d]: softmax(q k^T * scale, causal) v, in bf16 (fp32 inputs cast to it under
// autocast, as scaled_dot_product_attention casts them).
at::Tensor blocked_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale);

}  // namespace lft::model
