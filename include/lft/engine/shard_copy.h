// Copies between whole parameters and shard buffers laid out by a UnitLayout (shard_layout.h):
// the one place the engines that shard (sharded.cpp, megatron's distributed optimizer) move a
// parameter's rows into and out of every rank's flat shard.
#pragma once

#include <cstddef>
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "lft/engine/shard_layout.h"

namespace lft::engine {

// `global` with dim 0 cut to `rows` ([rows] for a 0-d tensor).
Shape piece_shape(const Shape& global, std::int64_t rows);
// The piece (rows of a tensor of `shape`) inside `buffer`, `base` elements in (0 for a rank's own
// shard; rank r's in a buffer of every rank's shards: r * layout.shard_numel), as a view of the
// piece's shape.
at::Tensor piece_in(const at::Tensor& buffer, std::int64_t base, const ShardPiece& piece, const Shape& shape);
// Parameter j's rows (of `whole`, shape `shape`) into every rank's place in `all_ranks` (every
// rank's shard back to back).
void scatter_rows(const UnitLayout& layout, std::size_t j, const Shape& shape, const at::Tensor& whole,
                  const at::Tensor& all_ranks);
// And back: parameter j's rows from every rank's place in `all_ranks` into `whole`, except rank
// `skip` (-1: none; a rank whose rows are already there).
void gather_rows(const UnitLayout& layout, std::size_t j, const Shape& shape, const at::Tensor& all_ranks,
                 const at::Tensor& whole, int skip = -1);

}  // namespace lft::engine
