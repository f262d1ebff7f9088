// The collectives each algorithm runs, with the payloads and call counts the communicators count
// (src/engine's engines, as tests/mpi/test_sharded_engines.cpp and test_megatron.cpp check them).
// Internal to src/plan: cost_model.cpp times them.
#pragma once

#include <cstdint>
#include <vector>

#include "lft/plan/cost_model.h"

namespace lft::plan::detail {

// The tokens of a sequence one rank holds: its cp chunk (cutoff_len padded to a multiple of cp).
double chunk_tokens(const StepInput& in);

// Per step, on every rank: gradient and parameter collectives over the data-parallel dims, and
// megatron's data-parallel reduction (and its sequence-parallel norms' over tp).
std::vector<Collective> data_parallel_collectives(const StepInput& in);

// Megatron's tensor-parallel collectives of ONE micro-batch on a stage of `layers` decoder
// layers; the first stage adds the embedding's, the last the head's and the loss's.
std::vector<Collective> tensor_parallel_collectives(const StepInput& in, std::int64_t layers, bool first, bool last);

// Context parallelism's exchanges of ONE micro-batch on a stage of `layers` decoder layers
// (Ulysses' all-to-alls or ring attention's shifts); the last stage adds the loss gather.
std::vector<Collective> context_parallel_collectives(const StepInput& in, std::int64_t layers, bool last);

// Expert parallelism's exchanges of ONE micro-batch over a stage of `layers` decoder layers (its
// share of the MoE layers), routing spread evenly over the experts.
std::vector<Collective> expert_parallel_collectives(const StepInput& in, std::int64_t layers);

// Megatron's pipeline sends and receives of ONE micro-batch on pipeline stage `stage`.
std::vector<Collective> pipeline_collectives(const StepInput& in, int stage);

// Sets group_size, inter_node and seconds of each collective from the mesh and the cluster.
void time_collectives(const StepInput& in, std::vector<Collective>& collectives);

}  // namespace lft::plan::detail
