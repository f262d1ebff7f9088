#include "lft/train/training_data.h"

#include <ATen/ATen.h>
#include <mpi.h>

#include <sys/stat.h>

#include <algorithm>

#include "lft/comm/watchdog.h"
#include "lft/data/chat_template.h"
#include "lft/data/corpus.h"
#include "lft/data/dataset_registry.h"
#include "lft/data/hf_tokenizer.h"
#include "lft/data/model_chat_template.h"
#include "lft/data/sft_cache.h"
#include "lft/data/v1_dataset_file.h"
#include "lft/runtime/check.h"
#include "lft/runtime/log.h"
#include "lft/train/split_tokenizing.h"
#include "lft/runtime/stage.h"

namespace lft::train {
namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

[[noreturn]] void fail(const std::string& what, const std::string& hint) {
  throw config::ConfigError("config error: " + what + "\n  hint: " + hint);
}

data::SftOptions sft_options(const DataOptions& d, const std::string& tokenizer_file) {
  data::SftOptions o;
  o.stage = d.stage;
  o.records.format = d.dataset_format;
  o.records.columns.ranking = trains_on_pairs(o.stage);  // train_dataset files hold pairs (chosen, rejected)
  o.template_name = d.template_name;
  o.cutoff_len = d.cutoff_len;
  o.packing = d.packing;
  o.neat_packing = d.neat_packing;
  o.val_size = d.val_size;
  o.seed = d.seed;
  o.tokenized_path = d.tokenized_path;
  if (!tokenizer_file.empty()) o.tokenizer_fingerprint = data::file_fingerprint(tokenizer_file);
  o.log = [](const std::string& line) { log0(line); };
  return o;
}

// The files of a train_dataset / eval_dataset list: LlamaFactory v1 dataset files (.yaml) give
// their entries, other files are read with `records`.
std::vector<data::DatasetSource> file_sources(const std::vector<std::string>& paths, const data::RecordOptions& records,
                                              std::int64_t limit) {
  std::vector<data::DatasetSource> out;
  for (const std::string& path : paths) {
    std::vector<data::DatasetSource> more = data::is_v1_dataset_file(path) ? data::read_v1_dataset_file(path)
                                                                           : data::sources_of_files({path}, records, limit);
    for (data::DatasetSource& s : more) {
      s.max_samples = limit;
      // A v1 entry without a converter holds v1's own records: pairs when the stage trains on them.
      if (s.options.format == "messages") s.options.columns.ranking = records.columns.ranking;
    }
    out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  return out;
}

// What to train on: the files of train_dataset, or the dataset_info.json entries of `dataset`.
std::vector<data::DatasetSource> train_sources(const DataOptions& d, const data::RecordOptions& records) {
  if (d.use_dataset) return data::resolve_datasets(d.dataset_names, d.dataset_dir, d.stage, d.max_samples);
  return file_sources(d.train_files, records, d.max_samples);
}

// eval_dataset: dataset_info.json names, or (as LlamaFactory v1) files and v1 dataset files.
std::vector<data::DatasetSource> eval_sources(const DataOptions& d, const data::RecordOptions& records) {
  const std::vector<std::string>& entries = d.eval_entries;
  const bool files = std::all_of(entries.begin(), entries.end(), [](const std::string& e) {
    return data::is_v1_dataset_file(e) || is_file(e);
  });
  if (files) return file_sources(entries, records, d.max_samples);
  return data::resolve_datasets(d.eval_names, d.dataset_dir, d.stage, d.max_samples);
}

std::string names_of(const std::vector<data::DatasetSource>& sources) {
  std::string joined;
  for (const auto& s : sources) joined += (joined.empty() ? "" : ", ") + (s.name.empty() ? s.path : s.name);
  return joined;
}

}  // namespace

std::string check_training_data(const DataOptions& d) {
  data::RecordOptions records;
  records.format = d.dataset_format;
  records.columns.ranking = trains_on_pairs(d.stage);
  if (d.stage == "pt" && !d.use_dataset) {
    std::string out;
    for (const std::string& p : d.train_files)
      out += (out.empty() ? "" : "\n") + p + ": " + std::to_string(data::read_text_corpus(p).size()) + " documents";
    return out;
  }
  std::string out = data::read_sft_records(train_sources(d, records)).summary();
  if (d.has_eval_dataset) out += "\neval: " + data::read_sft_records(eval_sources(d, records)).summary();
  return out;
}

TrainingData::TrainingData(const DataOptions& d, MPI_Comm world) {
  std::string tokenizer_file;
  const data::HfTokenizer* hf = nullptr;
  const bool bytes = d.bytes_tokenizer;
  if (!bytes && !d.model_folder.empty() && !is_file(d.model_folder + "/tokenizer.json"))
    fail(d.model_folder_where + ": model folder \"" + d.model_folder +
             "\" has no tokenizer.json, so its token ids are unknown",
         "copy the model's tokenizer.json (and tokenizer_config.json) into the folder, or set tokenizer = "
         "\"bytes\" to train it on raw bytes (ids 0-258) on purpose");
  if (!bytes && !d.model_folder.empty()) {
    auto t = data::HfTokenizer::load(d.model_folder);
    hf = t.get();
    tokenizer_file = d.model_folder + "/tokenizer.json";
    tokenizer_ = std::move(t);
  } else {
    tokenizer_ = std::make_unique<data::ByteTokenizer>();
  }
  Watchdog::Scope scope("reading and tokenizing the training data", Watchdog::setup_timeout(),
                        "setup_timeout");
  const bool pretrain = d.stage == "pt";
  if (pretrain && !d.eval_key.empty())
    fail(d.eval_where + ": " + d.eval_key + " needs stage = \"sft\" in this build (pre-training "
                        "data is one packed stream)",
         "remove " + d.eval_key + ", or train with stage = \"sft\"");
  if (pretrain && !d.use_dataset) {
    const std::vector<std::string>& paths = d.train_files;
    std::string joined;
    for (const auto& p : paths) joined += (joined.empty() ? "" : ", ") + p;
    std::vector<std::string> docs;
    for (const auto& p : paths) {
      auto more = data::read_text_corpus(p);
      if (d.max_samples >= 0 && static_cast<std::int64_t>(more.size()) > d.max_samples)
        more.resize(static_cast<std::size_t>(d.max_samples));
      docs.insert(docs.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
    }
    packed_ = std::make_unique<data::PackedDataset>(docs, *tokenizer_, d.cutoff_len, joined,
                                                    split_document_encoder(world, *tokenizer_));
    summary_ = joined + ": " + std::to_string(packed_->num_documents()) + " documents, " +
               std::to_string(packed_->num_sequences()) + " sequences of " +
               std::to_string(packed_->seq_len()) + " tokens (" + tokenizer_->name() + " tokenizer)";
    return;
  }
  // The model's own Jinja template writes every token itself; padding takes the tokenizer's pad
  // (else eos), as the "default" template resolves them.
  const bool own = d.template_name == data::kModelTemplate;
  const data::ChatTemplate chat(own ? "default" : d.template_name);
  data::TokenIdFn token_id;
  if (hf) token_id = [hf](const std::string& s) { return hf->token_id(s); };
  const data::SpecialTokens special = chat.resolve_special_tokens(*tokenizer_, token_id);
  data::SftOptions options = sft_options(d, tokenizer_file);
  if (pretrain && !d.packing_set) options.packing = true;  // LlamaFactory packs pt by default
  if (own)
    options.jinja = std::make_shared<const data::JinjaChatEncoder>(
        data::read_model_chat_template(bytes ? "" : d.model_folder, d.custom_chat_template));
  // Every rank tokenizes its share; rank 0 writes the cache. A set-up phase with its own
  // deadline, not a training collective.
  int rank = 0;
  LFT_MPI_CHECK(MPI_Comm_rank(world, &rank));
  options.parallel = split_tokenizing(world);
  options.write_cache = rank == 0;
  const std::vector<data::DatasetSource> sources = train_sources(d, options.records);
  data::SftData loaded = data::load_sft_data(sources, options, *tokenizer_, special);
  train_ = std::make_unique<data::SftDataset>(std::move(loaded.train));
  eval_ = std::make_unique<data::SftDataset>(std::move(loaded.eval));
  if (d.has_eval_dataset) {
    data::SftOptions eval_options = options;
    eval_options.tokenized_path.clear();
    eval_options.val_size = 0;
    const auto eval_from = eval_sources(d, options.records);
    data::SftData eval = data::load_sft_data(eval_from, eval_options, *tokenizer_, special);
    eval_ = std::make_unique<data::SftDataset>(std::move(eval.train));
    loaded.summary += "\neval: " + names_of(eval_from) + ": " + eval.summary;
  }
  join_ = d.join_micro_batches;
  own_template_ = own;
  segments_ = options.neat_packing || join_;
  pairs_ = trains_on_pairs(options.stage);
  summary_ = loaded.summary + " (" + tokenizer_->name() + " tokenizer, template " +
             (own ? "model: " + options.jinja->source() : chat.name()) + ")";
}

std::int64_t TrainingData::num_sequences() const {
  return packed_ ? packed_->num_sequences() : train_->num_sequences();
}

std::vector<std::int64_t> TrainingData::sequences(const std::vector<std::int64_t>& samples) const {
  if (!pairs_) return samples;
  std::vector<std::int64_t> out;
  out.reserve(samples.size() * 2);
  for (const std::int64_t i : samples) {
    out.push_back(2 * i);
    out.push_back(2 * i + 1);
  }
  return out;
}

std::int64_t TrainingData::seq_len() const { return packed_ ? packed_->seq_len() : train_->seq_len(); }

double TrainingData::weight_sum(const std::vector<std::int64_t>& indices) const {
  if (!packed_) return train_->weight_sum(indices);
  return static_cast<double>(indices.size()) * static_cast<double>(packed_->seq_len() - 1);
}

std::vector<bool> TrainingData::samples_main_leaves_out() const {
  if (!own_template_ || pairs_ || !train_) return {};
  std::vector<bool> out(static_cast<std::size_t>(train_->num_sequences()));
  for (std::int64_t i = 0; i < train_->num_sequences(); ++i)
    out[static_cast<std::size_t>(i)] = train_->length(i) >= train_->seq_len() && train_->weight_sum({i}) == 0;
  return out;
}

std::int64_t TrainingData::real_tokens(const std::vector<std::int64_t>& indices) const {
  std::int64_t n = 0;
  for (const std::int64_t i : indices) n += packed_ ? packed_->seq_len() : train_->length(i);
  return n;
}

std::int64_t TrainingData::attention_pairs(const std::vector<std::int64_t>& indices) const {
  std::int64_t n = 0;
  for (const std::int64_t i : indices) n += packed_ ? packed_->seq_len() * packed_->seq_len() : train_->attention_pairs(i);
  return n;
}

std::int64_t TrainingData::padded_tokens(const std::vector<std::int64_t>& indices) const {
  if (join_) return train_->joined_length(indices, pad_multiple_);
  const auto count = static_cast<std::int64_t>(indices.size());
  return count * (packed_ ? packed_->seq_len() : train_->padded_length(indices, pad_multiple_));
}

data::Batch TrainingData::batch(const std::vector<std::int64_t>& indices) const {
  if (!packed_) {
    data::Batch b = join_ ? train_->joined_batch(indices, pad_multiple_) : train_->batch(indices, pad_multiple_);
    b.token_mask = b.segment_ids != 0;
    if (!segments_) b.segment_ids = at::Tensor();
    return b;
  }
  data::Batch b;
  b.input_ids = packed_->batch(indices);
  // One unbroken token stream: every next token is a target.
  b.weights = at::ones({b.input_ids.size(0), b.input_ids.size(1) - 1}, at::kFloat);
  return b;
}

}  // namespace lft::train

namespace lft::train {

TrainingExample TrainingData::example(std::int64_t i) const {
  if (i < 0 || i >= num_sequences())
    throw std::out_of_range("training sequence " + std::to_string(i) + " does not exist: there are " +
                            std::to_string(num_sequences()));
  TrainingExample e;
  if (packed_) {
    const std::int32_t* tokens = packed_->sequence_data(i);
    e.ids.assign(tokens, tokens + packed_->seq_len());
    return e;
  }
  const data::Batch b = train_->batch({i});
  const std::int64_t n = train_->length(i) < b.input_ids.size(1) ? train_->length(i) : b.input_ids.size(1);
  const at::Tensor ids = b.input_ids[0].slice(0, 0, n).to(at::kLong).contiguous();
  e.ids.assign(ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + n);
  if (n > 1) {
    const at::Tensor w = b.weights[0].slice(0, 0, n - 1).to(at::kFloat).contiguous();
    e.weights.assign(w.data_ptr<float>(), w.data_ptr<float>() + (n - 1));
  }
  return e;
}

}  // namespace lft::train
