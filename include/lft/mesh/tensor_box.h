// Where a tensor a rank holds sits in its global (logical) tensor: what engines report of their
// parameters and checkpoints save and load.
#pragma once

#include <cstdint>
#include <vector>

namespace lft {

// A box of a global tensor: [offset, offset + the local sizes).
struct TensorBox {
  std::vector<std::int64_t> global_shape;
  std::vector<std::int64_t> offset;
  // How many data-parallel ranks hold this same box, and which of them this rank is (a save
  // splits the writing of a box among its holders).
  int replicas = 1;
  int replica = 0;
};

}  // namespace lft
