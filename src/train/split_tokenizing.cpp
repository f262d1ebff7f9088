#include "lft/train/split_tokenizing.h"

#include <cstring>
#include <stdexcept>

#include "lft/runtime/check.h"
#include "lft/runtime/error.h"

namespace lft::train {
namespace {

int rank_of(MPI_Comm comm) {
  int r = 0;
  LFT_MPI_CHECK(MPI_Comm_rank(comm, &r));
  return r;
}

int size_of(MPI_Comm comm) {
  int n = 1;
  LFT_MPI_CHECK(MPI_Comm_size(comm, &n));
  return n;
}

// Every rank's int32 buffer, concatenated in rank order, with each rank's length.
std::vector<std::int32_t> all_gather_v(MPI_Comm comm, const std::vector<std::int32_t>& mine,
                                       std::vector<int>& counts) {
  const int n = size_of(comm);
  if (mine.size() > static_cast<std::size_t>(INT32_MAX))
    throw UsageError("a rank's share of the tokenized data exceeds 2^31 tokens; use more ranks");
  int count = static_cast<int>(mine.size());
  counts.assign(static_cast<std::size_t>(n), 0);
  LFT_MPI_CHECK(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm));
  std::vector<int> displs(static_cast<std::size_t>(n), 0);
  std::size_t total = 0;
  for (int r = 0; r < n; ++r) {
    if (total > static_cast<std::size_t>(INT32_MAX))
      throw UsageError("the tokenized dataset exceeds 2^31 tokens in one all-gather");
    displs[static_cast<std::size_t>(r)] = static_cast<int>(total);
    total += static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]);
  }
  std::vector<std::int32_t> all(total);
  LFT_MPI_CHECK(MPI_Allgatherv(mine.data(), count, MPI_INT32_T, all.data(), counts.data(), displs.data(),
                               MPI_INT32_T, comm));
  return all;
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
  p.rank = rank_of(comm);
  p.ranks = size_of(comm);
  p.all_true = [comm](bool mine) {
    int v = mine ? 1 : 0;
    LFT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_LAND, comm));
    return v != 0;
  };
  p.gather = [comm](std::vector<data::TokenizedExample> mine, const std::string& error) {
    // The first failing rank's message, on every rank.
    std::vector<int> counts;
    std::vector<std::int32_t> text(error.begin(), error.end());
    const std::vector<std::int32_t> errors = all_gather_v(comm, text, counts);
    std::size_t at = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      if (counts[r] > 0)
        throw UsageError("rank " + std::to_string(r) + " while tokenizing: " +
                         std::string(errors.begin() + static_cast<std::ptrdiff_t>(at),
                                     errors.begin() + static_cast<std::ptrdiff_t>(at) + counts[r]));
      at += static_cast<std::size_t>(counts[r]);
    }
    const std::vector<std::int32_t> all = all_gather_v(comm, pack_examples(mine), counts);
    std::vector<std::vector<data::TokenizedExample>> per_rank;
    std::size_t offset = 0, total = 0;
    for (int c : counts) {
      per_rank.push_back(unpack_examples(all.data() + offset, static_cast<std::size_t>(c)));
      offset += static_cast<std::size_t>(c);
      total += per_rank.back().size();
    }
    // Conversation i was encoded by rank i % ranks, as its (i / ranks)-th example.
    std::vector<data::TokenizedExample> out;
    out.reserve(total);
    for (std::size_t i = 0; i < total; ++i)
      out.push_back(std::move(per_rank[i % per_rank.size()][i / per_rank.size()]));
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
    for (auto& ex : parallel.gather(std::move(mine), error)) out.push_back(std::move(ex.ids));
    return out;
  };
}

}  // namespace lft::train
