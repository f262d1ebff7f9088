// The position-keyed checksum every dataset of a tensor store carries (format 2 onwards; see
// tensor_store.h): the sum (mod 2^64) over the elements of a box of
//   mix64(bits ^ mix64(index * 0x9e3779b97f4a7c15 + 1))
// where index is the element's row-major index in the global tensor, bits its bytes read as an
// unsigned integer and mix64 splitmix64's finalizer. Being a sum, the checksums of disjoint boxes
// add up to that of the whole tensor: ranks that each write a box add theirs, and a reader of the
// whole tensor recomputes it with offset 0.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace lft::ckpt {

// `data` is contiguous (1, 2, 4 or 8 bytes an element) and holds the box at `offset` of a tensor of
// shape `global_shape`. Vectorized (AVX-512 or AVX2 where the CPU has it): about the speed of
// reading the memory, so a save or load costs what its I/O costs.
uint64_t box_checksum(const at::Tensor& data, const std::vector<int64_t>& offset,
                      const std::vector<int64_t>& global_shape);

}  // namespace lft::ckpt
