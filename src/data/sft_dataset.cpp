#include "lft/data/sft_dataset.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "lft/data/sampler.h"
#include "lft/runtime/error.h"

namespace lft::data {

SftDataset::SftDataset(std::shared_ptr<const PackedSequences> seqs, std::vector<std::int64_t> rows,
                       std::int32_t pad_id)
    : seqs_(std::move(seqs)), rows_(std::move(rows)), pad_id_(pad_id) {
  for (const std::int64_t r : rows_) {
    if (r < 0 || r >= seqs_->num_sequences()) {
      throw std::out_of_range("SftDataset: row " + std::to_string(r) + " is outside [0, " +
                              std::to_string(seqs_->num_sequences()) + ")");
    }
  }
}

std::int64_t SftDataset::length(std::int64_t i) const {
  if (i < 0 || i >= num_sequences()) {
    throw std::out_of_range("SftDataset: sequence " + std::to_string(i) + " is outside [0, " +
                            std::to_string(num_sequences()) + ")");
  }
  return seqs_->length(rows_[static_cast<std::size_t>(i)]);
}

std::int64_t SftDataset::attention_pairs(std::int64_t i) const {
  const std::int64_t row = rows_.at(static_cast<std::size_t>(i));
  const auto begin = static_cast<std::size_t>(seqs_->offsets[row]), end = static_cast<std::size_t>(seqs_->offsets[row + 1]);
  if (seqs_->segments.size() < end) return static_cast<std::int64_t>((end - begin) * (end - begin));  // one span
  std::int64_t pairs = 0, span = 0;
  for (std::size_t t = begin; t < end; ++t) {
    if (t > begin && seqs_->segments[t] != seqs_->segments[t - 1]) {
      pairs += span * span;
      span = 0;
    }
    ++span;
  }
  return pairs + span * span;
}

double SftDataset::weight_sum(const std::vector<std::int64_t>& indices) const {
  double sum = 0.0;
  for (const std::int64_t i : indices) {
    const std::int64_t begin = seqs_->offsets[static_cast<std::size_t>(row(i))];
    for (std::int64_t k = begin + 1; k < begin + length(i); ++k)
      if (seqs_->segments[k] == seqs_->segments[k - 1]) sum += seqs_->weights[k];
  }
  return sum;
}

std::int64_t SftDataset::padded_length(const std::vector<std::int64_t>& indices,
                                       std::int64_t pad_to_multiple_of) const {
  if (pad_to_multiple_of <= 0) return seq_len();
  std::int64_t longest = 2;
  for (const std::int64_t i : indices) longest = std::max(longest, length(i));
  const std::int64_t rounded = (longest + pad_to_multiple_of - 1) / pad_to_multiple_of * pad_to_multiple_of;
  return std::min(rounded, seq_len());
}

namespace {

// Padding everywhere: rows x T of the pad id, segment 0, no weight.
Batch padded_batch(std::int64_t rows, std::int64_t T, std::int32_t pad_id) {
  Batch b;
  b.input_ids = at::full({rows, T}, pad_id, at::TensorOptions().dtype(at::kLong));
  b.weights = at::zeros({rows, T - 1}, at::TensorOptions().dtype(at::kFloat));
  b.segment_ids = at::zeros({rows, T}, at::TensorOptions().dtype(at::kInt));
  b.position_ids = at::zeros({rows, T}, at::TensorOptions().dtype(at::kLong));
  return b;
}

}  // namespace

std::int32_t SftDataset::put_sequence(std::int64_t i, Batch& b, std::int64_t at, std::int32_t segment_base) const {
  const std::int64_t n = length(i), begin = seqs_->offsets[static_cast<std::size_t>(row(i))];
  auto* ids = b.input_ids.data_ptr<std::int64_t>() + at;
  auto* seg = b.segment_ids.data_ptr<std::int32_t>() + at;
  auto* pos = b.position_ids.data_ptr<std::int64_t>() + at;
  // The weight of predicting token t from t - 1 (row r of [B, T] starts at r * T, its weights at r * (T - 1)).
  const std::int64_t T = b.input_ids.size(1), row_index = at / T;
  float* w = b.weights.data_ptr<float>() + row_index * (T - 1) + (at - row_index * T);
  std::int32_t last = segment_base;
  for (std::int64_t t = 0; t < n; ++t) {
    const std::int64_t k = begin + t;
    ids[t] = seqs_->tokens[k];
    seg[t] = seqs_->segments[k] + segment_base;
    last = std::max(last, seg[t]);
    const bool same = t > 0 && seqs_->segments[k] == seqs_->segments[k - 1];
    pos[t] = same ? pos[t - 1] + 1 : 0;
    if (same) w[t - 1] = seqs_->weights[k];
  }
  return last;
}

Batch SftDataset::batch(const std::vector<std::int64_t>& indices, std::int64_t pad_to_multiple_of) const {
  const std::int64_t T = padded_length(indices, pad_to_multiple_of);
  const auto B = static_cast<std::int64_t>(indices.size());
  Batch b = padded_batch(B, T, pad_id_);
  for (std::int64_t r = 0; r < B; ++r) put_sequence(indices[static_cast<std::size_t>(r)], b, r * T, 0);
  return b;
}

std::int64_t SftDataset::joined_length(const std::vector<std::int64_t>& indices, std::int64_t pad_to_multiple_of) const {
  std::int64_t total = 0;
  for (const std::int64_t i : indices) total += length(i);
  total = std::max<std::int64_t>(total, 2);
  if (pad_to_multiple_of <= 0) return total;
  return (total + pad_to_multiple_of - 1) / pad_to_multiple_of * pad_to_multiple_of;
}

Batch SftDataset::joined_batch(const std::vector<std::int64_t>& indices, std::int64_t pad_to_multiple_of) const {
  Batch b = padded_batch(1, joined_length(indices, pad_to_multiple_of), pad_id_);
  std::int64_t at = 0;
  std::int32_t segments = 0;
  for (const std::int64_t i : indices) {
    segments = put_sequence(i, b, at, segments);
    at += length(i);
  }
  return b;
}

double SftDataset::total_weight() const {
  double sum = 0;
  for (const std::int64_t r : rows_) {
    for (std::int64_t k = seqs_->offsets[r] + 1; k < seqs_->offsets[r + 1]; ++k) {
      if (seqs_->segments[k] == seqs_->segments[k - 1]) sum += seqs_->weights[k];
    }
  }
  return sum;
}

std::int64_t SftDataset::trained_tokens() const {
  std::int64_t count = 0;
  for (const std::int64_t r : rows_) {
    for (std::int64_t k = seqs_->offsets[r] + 1; k < seqs_->offsets[r + 1]; ++k) {
      count += seqs_->segments[k] == seqs_->segments[k - 1] && seqs_->weights[k] > 0.0f;
    }
  }
  return count;
}

std::int64_t SftDataset::num_tokens() const {
  std::int64_t count = 0;
  for (const std::int64_t r : rows_) count += seqs_->length(r);
  return count;
}

std::string SftDataset::describe() const {
  if (num_sequences() == 0) return "no sequences";
  const std::int64_t tokens = num_tokens();
  const double slots = static_cast<double>(num_sequences()) * static_cast<double>(seq_len());
  char padding[32];
  std::snprintf(padding, sizeof padding, "%.1f%%",
                100.0 * (1.0 - static_cast<double>(tokens) / slots));
  return std::to_string(num_sequences()) + " sequences of <= " + std::to_string(seq_len()) +
         " tokens, " + std::to_string(tokens) + " tokens (" + padding + " would be padding at cutoff_len; batches pad less, see the step lines), " +
         std::to_string(trained_tokens()) + " trained";
}

std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> split_train_eval(
    std::int64_t n, double val_size, std::uint64_t seed) {
  if (!(val_size >= 0) || (val_size >= 1 && std::floor(val_size) != val_size)) {
    throw UsageError(
        "val_size must be 0, a fraction in (0, 1) or a whole number of sequences, "
        "got " +
        std::to_string(val_size));
  }
  const auto count = static_cast<std::int64_t>(
      val_size < 1 ? std::ceil(val_size * static_cast<double>(n)) : val_size);
  if (count >= n && count > 0) {
    throw UsageError("val_size = " + std::to_string(val_size) + " takes " + std::to_string(count) +
                     " of the " + std::to_string(n) +
                     " sequences for evaluation and leaves none for training; use a smaller "
                     "val_size or more data");
  }
  std::vector<std::int64_t> train, eval;
  if (count == 0) {
    for (std::int64_t i = 0; i < n; ++i) train.push_back(i);
    return {train, eval};
  }
  // A stream of its own: the sampler's permutation of a seed no training epoch uses.
  const std::vector<std::int64_t> order =
      GlobalSampler::epoch_permutation(n, seed ^ 0x76616c5f73706c74ULL /* "val_splt" */, -1);
  eval.assign(order.begin(), order.begin() + count);
  train.assign(order.begin() + count, order.end());
  std::sort(eval.begin(), eval.end());
  std::sort(train.begin(), train.end());
  return {train, eval};
}

}  // namespace lft::data
