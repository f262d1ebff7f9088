// Where each rank's shard of a unit (a group of parameters gathered and reduced together) lives.
//
// A unit's shard on every rank is one flat buffer of `shard_numel` elements (equal on every rank,
// so the all-gather and reduce-scatter take equal counts; the tail is padding). Rank r's buffer
// holds, for every parameter p of the unit, rows [row_begin, row_begin + rows) of p's dim 0 at
// `local_offset` (a box of the global tensor, possibly empty). Two ways to cut:
//   per_parameter  each parameter's dim 0 split in ceil(d0 / S) rows per rank (FSDP2's Shard(0));
//   flat           the unit's parameters flattened back to back and cut in S nearly equal ranges
//                  (FSDP1's FlatParameter, ZeRO's partitions), the cuts moved to the nearest row
//                  start so every piece is still a box of its tensor (a 1-d tensor's rows are
//                  its elements; a range is at most one row longer than the even cut).
// Padding never reaches a parameter or a checkpoint: only pieces are copied in and out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lft::engine {

struct ShardPiece {
  std::size_t param = 0;  // index into the unit's shapes
  std::int64_t row_begin = 0;
  std::int64_t rows = 0;
  std::int64_t local_offset = 0;  // in elements, inside the rank's shard buffer
};

struct UnitLayout {
  std::int64_t shard_numel = 0;
  std::vector<std::vector<ShardPiece>> pieces;  // [rank][parameter], every parameter on every rank
};

using Shape = std::vector<std::int64_t>;

UnitLayout per_parameter_layout(const std::vector<Shape>& shapes, int ranks);
UnitLayout flat_layout(const std::vector<Shape>& shapes, int ranks);

// The layout of the parameters `keep` (positions in `layout`'s parameters, whose shapes are
// `shapes`) cut exactly as in `layout`, packed back to back in each rank's buffer: the gradient
// shards of the parameters that train, cut as their parameter shards are.
UnitLayout sub_layout(const UnitLayout& layout, const std::vector<std::size_t>& keep, const std::vector<Shape>& shapes);

// Elements in one dim-0 row of `shape` (1 for a 1-d tensor).
std::int64_t row_numel(const Shape& shape);

}  // namespace lft::engine
