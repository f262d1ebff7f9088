#include "lft/train/split_tokenizing.h"

#include <cstring>
#include <stdexcept>

#include "lft/comm/mpi_util.h"
#include "lft/runtime/check.h"
#include "lft/runtime/error.h"

namespace lft::train {
namespace {

// Every rank's int32 buffer, in rank order.
std::vector<std::vector<std::int32_t>> all_gather_ints(MPI_Comm comm, const std::vector<std::int32_t>& mine) {
  std::string bytes(mine.size() * sizeof(std::int32_t), '\0');
  std::memcpy(bytes.data(), mine.data(), bytes.size());
  std::vector<std::vector<std::int32_t>> out;
  for (const std::string& theirs : all_gather_bytes(comm, bytes)) {
    out.emplace_back(theirs.size() / sizeof(std::int32_t));
    std::memcpy(out.back().data(), theirs.data(), theirs.size());
  }
  return out;
}

}  // namespace

std::vector<std::int32_t> pack_examples(const std::vector<data::TokenizedExample>& examples) {
  std::vector<std::int32_t> out;
  for (const auto& ex : examples) {
    out.push_back(static_cast<std::int32_t>(ex.ids.size()));
    out.push_back(ex.truncated ? 1 : 0);
    out.insert(out.end(), ex.ids.begin(), ex.ids.end());
    const std::size_t at = out.size();
    out.resize(at + ex.weights.size());
    std::memcpy(out.data() + at, ex.weights.data(), ex.weights.size() * sizeof(float));
  }
  return out;
}

std::vector<data::TokenizedExample> unpack_examples(const std::int32_t* data, std::size_t size) {
  std::vector<data::TokenizedExample> out;
  std::size_t i = 0;
  while (i < size) {
    if (i + 2 > size) throw std::logic_error("tokenized examples: truncated header");
    const auto len = static_cast<std::size_t>(data[i]);
    data::TokenizedExample ex;
    ex.truncated = data[i + 1] != 0;
    i += 2;
    if (i + 2 * len > size) throw std::logic_error("tokenized examples: truncated example");
    ex.ids.assign(data + i, data + i + len);
    ex.weights.resize(len);
    std::memcpy(ex.weights.data(), data + i + len, len * sizeof(float));
    i += 2 * len;
    out.push_back(std::move(ex));
  }
  return out;
}

data::SftParallel split_tokenizing(MPI_Comm comm) {
  data::SftParallel p;
  p.rank = mpi_rank(comm);
  p.ranks = mpi_size(comm);
  p.all_true = [comm](bool mine) {
    int v = mine ? 1 : 0;
    LFT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_LAND, comm));
    return v != 0;
  };
  p.gather = [comm](std::vector<data::TokenizedExample> mine, const std::string& error, std::size_t per_item) {
    // The first failing rank's message, on every rank.
    const std::vector<std::string> errors = all_gather_bytes(comm, error);
    for (std::size_t r = 0; r < errors.size(); ++r)
      if (!errors[r].empty()) throw UsageError("rank " + std::to_string(r) + " while tokenizing: " + errors[r]);
    std::vector<std::vector<data::TokenizedExample>> per_rank;
    std::size_t total = 0;
    for (const auto& buffer : all_gather_ints(comm, pack_examples(mine))) {
      per_rank.push_back(unpack_examples(buffer.data(), buffer.size()));
      total += per_rank.back().size();
    }
    // Item i (a conversation, or a pair's per_item examples) was encoded by rank i % ranks, as its
    // (i / ranks)-th item.
    std::vector<data::TokenizedExample> out;
    out.reserve(total);
    const std::size_t ranks = per_rank.size();
    for (std::size_t j = 0; j < total; ++j) {
      const std::size_t item = j / per_item;
      out.push_back(std::move(per_rank[item % ranks][item / ranks * per_item + j % per_item]));
    }
    return out;
  };
  return p;
}

data::DocumentEncoder split_document_encoder(MPI_Comm comm, const data::Tokenizer& tok) {
  return [parallel = split_tokenizing(comm), &tok](const std::vector<std::string>& docs) {
    std::vector<data::TokenizedExample> mine;
    std::string error;
    try {
      for (std::size_t i = static_cast<std::size_t>(parallel.rank); i < docs.size();
           i += static_cast<std::size_t>(parallel.ranks)) {
        data::TokenizedExample ex;
        ex.ids = tok.encode(docs[i]);
        ex.weights.assign(ex.ids.size(), 0.0f);  // the wire form carries a weight per id
        mine.push_back(std::move(ex));
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::vector<std::vector<std::int32_t>> out;
    for (auto& ex : parallel.gather(std::move(mine), error, 1)) out.push_back(std::move(ex.ids));
    return out;
  };
}

}  // namespace lft::train
