// Causal attention in blocks of query rows on a CPU, for bf16 (and fp32 with the fused softmax).
// LibTorch's CPU flash attention runs its block products through MKL's bf16 GEMM, which on a CPU
// that MKL does not recognise as Intel's (AMD Zen 4 here) converts both operands to fp32 and runs
// fp32 GEMMs, at half the bf16 rate or less. This keeps the products in at::matmul (oneDNN's bf16
// kernels), and skips the keys above the diagonal block by block. The arithmetic is transformers'
// eager attention in bf16 (scores from a bf16 GEMM, scaled and masked in bf16, softmax in fp32,
// probabilities back to bf16), block by block; autograd differentiates it, so under gradient
// checkpointing its saved scores live for one layer's recomputation only. In fp32 (fused softmax only) it replaces
// LibTorch's flash attention, whose backward alone took 2.4x the blocked forward and backward
// together on the MoE bench's shape (AVX2 build, MKL's fp32 GEMMs).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace lft::model {

// Whether blocked_causal_attention serves these inputs: a CPU, a query length worth cutting
// (beyond one block), and bf16 (also fp32 under bf16 autocast), or fp32 with the fused softmax
// (fused_kernels "attention" on a CPU that runs the kernels).
bool blocked_attention_applies(const at::Tensor& q);
// The same decision from the compute dtype, the sequence length and whether the fused softmax is
// on (the memory estimate's, before any tensor exists).
bool blocked_attention_serves(at::ScalarType compute, std::int64_t t, bool fused_softmax);

// Bytes of probabilities the blocked attention keeps for backward per token of a t-token
// sequence and per query head: each block's rows over the keys up to the block's end, in dtype
// with the fused softmax; without it autograd keeps the fp32 softmax and its copy in dtype.
double blocked_attention_saved_bytes_per_token(std::int64_t t, at::ScalarType dtype, bool fused_softmax);

// q [B, heads, T, d], k and v [B, kv_heads, T, d], kv head g serving query heads g*r .. g*r+r-1 ->
// [B, heads, T, d]: softmax(q k^T * scale, causal) v, in bf16 (fp32 inputs cast to it under
// autocast, as scaled_dot_product_attention casts them).
at::Tensor blocked_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale);

}  // namespace lft::model
