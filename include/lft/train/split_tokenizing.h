// Tokenizing a dataset split across the ranks of a communicator (data::SftParallel over MPI):
// each rank encodes every ranks-th conversation, then one all-gather gives every rank all of them.
#pragma once

#include <mpi.h>

#include "lft/data/packed_dataset.h"
#include "lft/data/sft_dataset.h"

namespace lft::train {

// The communicator must outlive the returned functions.
data::SftParallel split_tokenizing(MPI_Comm comm);

// Pre-training documents encoded the same way: rank r encodes documents r, r + n, ..., one
// all-gather gives every rank all of them in order. `tok` must outlive the encoder.
data::DocumentEncoder split_document_encoder(MPI_Comm comm, const data::Tokenizer& tok);

// The wire form of examples, for the all-gather: per example its length, truncated flag, ids
// and weights (as float bits), all int32.
std::vector<std::int32_t> pack_examples(const std::vector<data::TokenizedExample>& examples);
std::vector<data::TokenizedExample> unpack_examples(const std::int32_t* data, std::size_t size);

}  // namespace lft::train
