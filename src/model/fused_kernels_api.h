// The fused CPU kernels' declarations (fused_kernels.h includes this once per instruction-set
// namespace; no include guard on purpose). Raw contiguous buffers.

// RMSNorm over rows of n: y = w * (x * rstd), rstd = 1 / sqrt(mean(x^2) + eps); for bfloat16 x,
// x * rstd is rounded to bfloat16 before the fp32 weight multiplies it (y stays fp32).
template <typename T>
void rmsnorm_forward(const T* x, const float* w, float* y, float* rstd, std::int64_t rows, std::int64_t n,
                     float eps);
// dx (in x's type), and dw accumulated into `dw` (n floats, zeroed by the caller).
template <typename T>
void rmsnorm_backward(const float* dy, const T* x, const float* w, const float* rstd, T* dx, float* dw,
                      std::int64_t rows, std::int64_t n);

// SwiGLU: h = silu(g) * u, elementwise over n, in T (float or bfloat16), computed in fp32.
template <typename T>
void swiglu_forward(const T* g, const T* u, T* h, std::int64_t n);
template <typename T>
void swiglu_backward(const T* dh, const T* g, const T* u, T* dg, T* du, std::int64_t n);
// The same over `rows` rows whose gate and up halves sit side by side (gu and dgu rows of
// 2 x width: [g | u]), h and dh rows of width: the experts' fused gate-up GEMM's layout.
template <typename T>
void swiglu_forward_paired(const T* gu, T* h, std::int64_t rows, std::int64_t width);
template <typename T>
void swiglu_backward_paired(const T* dh, const T* gu, T* dgu, std::int64_t rows, std::int64_t width);

// Rotary embedding on x [rows = b*t*heads, d] (t-major: row r has position (r / heads) % t),
// cos/sin [t, d] in fp32; y in fp32 (the promotion of x * cos).
template <typename T>
void rotary_forward(const T* x, const float* cos, const float* sin, float* y, std::int64_t b,
                    std::int64_t t, std::int64_t heads, std::int64_t d);
template <typename T>
void rotary_backward(const float* dy, const float* cos, const float* sin, T* dx, std::int64_t b,
                     std::int64_t t, std::int64_t heads, std::int64_t d);

// Causal-LM cross-entropy on logits [b, t, v]: row (i, j < t-1) predicts ids[i, j+1]; loss and
// logsumexp [b, t-1] (0 where the target is ignore_id). Returns the first out-of-range target,
// or -1.
template <typename T>
std::int64_t cross_entropy_forward(const T* logits, const std::int64_t* ids, float* loss, float* lse,
                                   std::int64_t b, std::int64_t t, std::int64_t v,
                                   std::int64_t ignore_id);
// dlogits = grad * (softmax - onehot) on the predicting rows, 0 on the last position and ignored rows.
template <typename T>
void cross_entropy_backward(const float* grad, const T* logits, const std::int64_t* ids,
                            const float* lse, T* dlogits, std::int64_t b, std::int64_t t,
                            std::int64_t v, std::int64_t ignore_id);

// The blocked causal attention's softmax over `rows` score rows of `keys`, bf16 or fp32
// (attention_kernels_simd.cpp): row r is query position first + r % block_rows and sees keys
// [0, first + r % block_rows]; the rest of its row is 0 in p. Forward: p = softmax(T(scores *
// scale)) computed in fp32, stored as T.
template <typename T>
void causal_softmax_forward(const T* scores, T* p, std::int64_t rows, std::int64_t block_rows, std::int64_t first,
                            std::int64_t keys, float scale);
// The scores' gradient: T(T(p * (dp - <p, dp>)) * scale).
template <typename T>
void causal_softmax_backward(const T* p, const T* dp, T* ds, std::int64_t rows, std::int64_t block_rows,
                             std::int64_t first, std::int64_t keys, float scale);

// Row i of dst (n rows of width) = row rows[i] of src converted from S to D, or zeros where
// rows[i] < 0: the grouped experts' padded layout and back (float/bfloat16 either way).
template <typename S, typename D>
void gather_rows(const S* src, const std::int64_t* rows, D* dst, std::int64_t n, std::int64_t width);

// The routed experts' outputs back to their tokens: y[t] = sum over token t's rows (rows[starts[t]]
// .. rows[starts[t + 1] - 1], ascending) of out[r] * w[r], each product rounded to fp32 (to bf16
// with bf16_products: bf16 rows times bf16 weights) and added in fp32 in that order (index_add's
// arithmetic).
template <typename T>
void combine_rows_forward(const T* out, const float* w, const std::int64_t* starts, const std::int64_t* rows,
                          float* y, std::int64_t tokens, std::int64_t width, bool bf16_products);
// dout[r] = g[token_of[r]] * w[r] rounded to T, dw[r] = <g[token_of[r]], out[r]>; with
// bf16_products g is rounded to bf16 first (the products' dtype).
template <typename T>
void combine_rows_backward(const float* g, const T* out, const float* w, const std::int64_t* token_of, T* dout,
                           float* dw, std::int64_t rows, std::int64_t width, bool bf16_products);

// sum(x^2) over n floats, accumulated in double.
double sum_squares(const float* x, std::int64_t n);
