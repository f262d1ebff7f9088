// Rows between whole parameters and UnitLayout shard buffers.
#include "lft/engine/shard_copy.h"

#include <ATen/ATen.h>

namespace lft::engine {

Shape piece_shape(const Shape& global, std::int64_t rows) {
  Shape s = global;
  if (s.empty()) return {rows};
  s[0] = rows;
  return s;
}

at::Tensor piece_in(const at::Tensor& buffer, std::int64_t base, const ShardPiece& piece, const Shape& shape) {
  return buffer.narrow(0, base + piece.local_offset, piece.rows * row_numel(shape)).view(piece_shape(shape, piece.rows));
}

void scatter_rows(const UnitLayout& layout, std::size_t j, const Shape& shape, const at::Tensor& whole,
                  const at::Tensor& all_ranks) {
  for (std::size_t r = 0; r < layout.pieces.size(); ++r) {
    const ShardPiece& piece = layout.pieces[r][j];
    if (piece.rows == 0) continue;
    piece_in(all_ranks, static_cast<std::int64_t>(r) * layout.shard_numel, piece, shape)
        .copy_(whole.narrow(0, piece.row_begin, piece.rows));
  }
}

void gather_rows(const UnitLayout& layout, std::size_t j, const Shape& shape, const at::Tensor& all_ranks,
                 const at::Tensor& whole, int skip) {
  for (std::size_t r = 0; r < layout.pieces.size(); ++r) {
    const ShardPiece& piece = layout.pieces[r][j];
    if (piece.rows == 0 || static_cast<int>(r) == skip) continue;
    whole.narrow(0, piece.row_begin, piece.rows)
        .copy_(piece_in(all_ranks, static_cast<std::int64_t>(r) * layout.shard_numel, piece, shape));
  }
}

}  // namespace lft::engine
