#include "lft/engine/shard_layout.h"

#include <algorithm>

namespace lft::engine {

std::int64_t row_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::size_t d = 1; d < shape.size(); ++d) n *= shape[d];
  return n;
}

UnitLayout per_parameter_layout(const std::vector<Shape>& shapes, int ranks) {
  UnitLayout layout;
  layout.pieces.assign(static_cast<std::size_t>(ranks), {});
  std::int64_t offset = 0;
  for (std::size_t p = 0; p < shapes.size(); ++p) {
    const std::int64_t rows = shapes[p].empty() ? 1 : shapes[p][0];
    const std::int64_t chunk = (rows + ranks - 1) / ranks;
    for (int r = 0; r < ranks; ++r) {
      const std::int64_t begin = std::min(rows, chunk * r);
      const std::int64_t end = std::min(rows, chunk * (r + 1));
      layout.pieces[static_cast<std::size_t>(r)].push_back({p, begin, end - begin, offset});
    }
    offset += chunk * row_numel(shapes[p]);
  }
  layout.shard_numel = offset;
  return layout;
}

UnitLayout flat_layout(const std::vector<Shape>& shapes, int ranks) {
  std::int64_t total = 0;
  for (const auto& s : shapes) total += (s.empty() ? 1 : s[0]) * row_numel(s);
  // A row goes to the rank whose even range [r*total/S, (r+1)*total/S) holds the row's first
  // element: ranks get contiguous, nearly equal ranges that start at row boundaries.
  auto owner = [&](std::int64_t flat) {
    return static_cast<int>(std::min<std::int64_t>(ranks - 1, flat * ranks / std::max<std::int64_t>(total, 1)));
  };
  UnitLayout layout;
  layout.pieces.assign(static_cast<std::size_t>(ranks), {});
  std::vector<std::int64_t> filled(static_cast<std::size_t>(ranks), 0);
  std::int64_t flat = 0;
  for (std::size_t p = 0; p < shapes.size(); ++p) {
    const std::int64_t rows = shapes[p].empty() ? 1 : shapes[p][0], width = row_numel(shapes[p]);
    std::vector<ShardPiece> piece(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) piece[static_cast<std::size_t>(r)] = {p, rows, 0, 0};
    for (std::int64_t row = 0; row < rows; ++row, flat += width) {
      ShardPiece& mine = piece[static_cast<std::size_t>(owner(flat))];
      mine.row_begin = std::min(mine.row_begin, row);
      ++mine.rows;
    }
    for (int r = 0; r < ranks; ++r) {
      ShardPiece& mine = piece[static_cast<std::size_t>(r)];
      if (mine.rows == 0) mine.row_begin = 0;
      mine.local_offset = filled[static_cast<std::size_t>(r)];
      filled[static_cast<std::size_t>(r)] += mine.rows * width;
      layout.pieces[static_cast<std::size_t>(r)].push_back(mine);
    }
  }
  layout.shard_numel = *std::max_element(filled.begin(), filled.end());
  return layout;
}

UnitLayout sub_layout(const UnitLayout& layout, const std::vector<std::size_t>& keep, const std::vector<Shape>& shapes) {
  UnitLayout out;
  out.pieces.assign(layout.pieces.size(), {});
  for (std::size_t r = 0; r < layout.pieces.size(); ++r) {
    std::int64_t filled = 0;
    for (std::size_t j = 0; j < keep.size(); ++j) {
      ShardPiece piece = layout.pieces[r][keep[j]];
      piece.param = j;
      piece.local_offset = filled;
      filled += piece.rows * row_numel(shapes[keep[j]]);
      out.pieces[r].push_back(piece);
    }
    out.shard_numel = std::max(out.shard_numel, filled);
  }
  return out;
}

}  // namespace lft::engine
