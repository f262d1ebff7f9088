// The caching allocator's count of GPU tensor memory (what torch.cuda.max_memory_allocated reads).
#pragma once

#include <cstdint>

namespace lft {

// Peak bytes of tensor storage on CUDA device `index` since the start (0 without CUDA).
std::int64_t cuda_peak_bytes_in_use(int index);

}  // namespace lft
