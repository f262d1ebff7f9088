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
#include "lft/data/sft_cache.h"
#include "lft/data/v1_dataset_file.h"
#include "lft/runtime/check.h"
#include "lft/runtime/log.h"
#include "lft/train/split_tokenizing.h"

namespace lft::train {
namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

[[noreturn]] void fail(const std::string& what, const std::string& hint) {
  throw config::ConfigError("config error: " + what + "\n  hint: " + hint);
}

data::SftOptions sft_options(const config::Config& cfg, const std::string& tokenizer_file) {
  data::SftOptions o;
  o.stage = cfg.string("stage");
  o.records.format = cfg.string("dataset_format");
  o.records.columns.ranking = o.stage == "dpo";  // train_dataset files hold pairs (chosen, rejected)
  o.template_name = cfg.string("template");
  o.cutoff_len = cfg.integer("cutoff_len");
  o.packing = cfg.boolean("packing") || cfg.boolean("neat_packing");
  o.neat_packing = cfg.boolean("neat_packing");
  o.val_size = cfg.real("val_size");
  o.seed = static_cast<std::uint64_t>(cfg.integer("seed"));
  if (cfg.is_set("tokenized_path")) o.tokenized_path = cfg.string("tokenized_path");
  if (!tokenizer_file.empty()) o.tokenizer_fingerprint = data::file_fingerprint(tokenizer_file);
  o.log = [](const std::string& line) { log0(line); };
  return o;
}

std::int64_t max_samples(const config::Config& cfg) {
  return cfg.is_set("max_samples") ? cfg.integer("max_samples") : -1;
}

// Dataset names: list elements, each also split at commas (LlamaFactory's "identity,alpaca_en_demo").
std::vector<std::string> dataset_names(const config::Config& cfg, const std::string& key) {
  std::vector<std::string> names;
  for (const std::string& element : cfg.strings(key)) {
    std::size_t start = 0;
    while (start <= element.size()) {
      const std::size_t comma = std::min(element.find(',', start), element.size());
      const std::size_t b = element.find_first_not_of(" \t", start);
      std::size_t e = comma;
      while (e > start && (element[e - 1] == ' ' || element[e - 1] == '\t')) --e;
      if (b != std::string::npos && b < e) names.push_back(element.substr(b, e - b));
      start = comma + 1;
    }
  }
  return names;
}

// The files of a train_dataset / eval_dataset list: LlamaFactory v1 dataset files (.yaml) give
// their entries, other files are read with `records`.
std::vector<data::DatasetSource> file_sources(const std::vector<std::string>& paths, const data::RecordOptions& records,
                                              std::int64_t limit) {
  std::vector<data::DatasetSource> out;
  for (const std::string& path : paths) {
    std::vector<data::DatasetSource> more = data::is_v1_dataset_file(path) ? data::read_v1_dataset_file(path)
                                                                           : data::sources_of_files({path}, records, limit);
    for (data::DatasetSource& s : more) s.max_samples = limit;
    out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  return out;
}

// What to train on: the files of train_dataset, or the dataset_info.json entries of `dataset`.
std::vector<data::DatasetSource> train_sources(const config::Config& cfg, const data::RecordOptions& records) {
  if (cfg.is_set("dataset"))
    return data::resolve_datasets(dataset_names(cfg, "dataset"), cfg.string("dataset_dir"), cfg.string("stage"),
                                  max_samples(cfg));
  return file_sources(cfg.strings("train_dataset"), records, max_samples(cfg));
}

// eval_dataset: dataset_info.json names, or (as LlamaFactory v1) files and v1 dataset files.
std::vector<data::DatasetSource> eval_sources(const config::Config& cfg, const data::RecordOptions& records) {
  const std::vector<std::string> entries = cfg.strings("eval_dataset");
  const bool files = std::all_of(entries.begin(), entries.end(), [](const std::string& e) {
    return data::is_v1_dataset_file(e) || is_file(e);
  });
  if (files) return file_sources(entries, records, max_samples(cfg));
  return data::resolve_datasets(dataset_names(cfg, "eval_dataset"), cfg.string("dataset_dir"), cfg.string("stage"),
                                max_samples(cfg));
}

std::string names_of(const std::vector<data::DatasetSource>& sources) {
  std::string joined;
  for (const auto& s : sources) joined += (joined.empty() ? "" : ", ") + (s.name.empty() ? s.path : s.name);
  return joined;
}

}  // namespace

std::string check_training_data(const config::Config& cfg) {
  data::RecordOptions records;
  records.format = cfg.string("dataset_format");
  records.columns.ranking = cfg.string("stage") == "dpo";
  if (cfg.string("stage") == "pt" && !cfg.is_set("dataset")) {
    std::string out;
    for (const std::string& p : cfg.strings("train_dataset"))
      out += (out.empty() ? "" : "\n") + p + ": " + std::to_string(data::read_text_corpus(p).size()) + " documents";
    return out;
  }
  std::string out = data::read_sft_records(train_sources(cfg, records)).summary();
  if (cfg.is_set("eval_dataset")) out += "\neval: " + data::read_sft_records(eval_sources(cfg, records)).summary();
  return out;
}

TrainingData::TrainingData(const config::Config& cfg, MPI_Comm world) {
  std::string tokenizer_file;
  const data::HfTokenizer* hf = nullptr;
  const bool bytes = cfg.string("tokenizer") == "bytes";
  if (!bytes && cfg.is_set("model_name_or_path") && !is_file(cfg.string("model_name_or_path") + "/tokenizer.json"))
    fail(cfg.where("model_name_or_path") + ": model folder \"" + cfg.string("model_name_or_path") +
             "\" has no tokenizer.json, so its token ids are unknown",
         "copy the model's tokenizer.json (and tokenizer_config.json) into the folder, or set tokenizer = "
         "\"bytes\" to train it on raw bytes (ids 0-258) on purpose");
  if (!bytes && cfg.is_set("model_name_or_path")) {
    auto t = data::HfTokenizer::load(cfg.string("model_name_or_path"));
    hf = t.get();
    tokenizer_file = cfg.string("model_name_or_path") + "/tokenizer.json";
    tokenizer_ = std::move(t);
  } else {
    tokenizer_ = std::make_unique<data::ByteTokenizer>();
  }
  Watchdog::Scope scope("reading and tokenizing the training data", Watchdog::setup_timeout(),
                        "setup_timeout");
  const bool pretrain = cfg.string("stage") == "pt";
  const std::string eval_key = cfg.real("val_size") > 0 ? "val_size" : cfg.is_set("eval_dataset") ? "eval_dataset" : "";
  if (pretrain && !eval_key.empty())
    fail(cfg.where(eval_key) + ": " + eval_key + " needs stage = \"sft\" in this build (pre-training "
                               "data is one packed stream)",
         "remove " + eval_key + ", or train with stage = \"sft\"");
  if (pretrain && !cfg.is_set("dataset")) {
    const std::vector<std::string> paths = cfg.strings("train_dataset");
    std::string joined;
    for (const auto& p : paths) joined += (joined.empty() ? "" : ", ") + p;
    std::vector<std::string> docs;
    for (const auto& p : paths) {
      auto more = data::read_text_corpus(p);
      if (max_samples(cfg) >= 0 && static_cast<std::int64_t>(more.size()) > max_samples(cfg))
        more.resize(static_cast<std::size_t>(max_samples(cfg)));
      docs.insert(docs.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
    }
    packed_ = std::make_unique<data::PackedDataset>(docs, *tokenizer_, cfg.integer("cutoff_len"), joined,
                                                    split_document_encoder(world, *tokenizer_));
    summary_ = joined + ": " + std::to_string(packed_->num_documents()) + " documents, " +
               std::to_string(packed_->num_sequences()) + " sequences of " +
               std::to_string(packed_->seq_len()) + " tokens (" + tokenizer_->name() + " tokenizer)";
    return;
  }
  const data::ChatTemplate chat(cfg.string("template"));
  data::TokenIdFn token_id;
  if (hf) token_id = [hf](const std::string& s) { return hf->token_id(s); };
  const data::SpecialTokens special = chat.resolve_special_tokens(*tokenizer_, token_id);
  data::SftOptions options = sft_options(cfg, tokenizer_file);
  if (pretrain && !cfg.is_set("packing")) options.packing = true;  // LlamaFactory packs pt by default
  // Every rank tokenizes its share; rank 0 writes the cache. A set-up phase with its own
  // deadline, not a training collective.
  int rank = 0;
  LFT_MPI_CHECK(MPI_Comm_rank(world, &rank));
  options.parallel = split_tokenizing(world);
  options.write_cache = rank == 0;
  const std::vector<data::DatasetSource> sources = train_sources(cfg, options.records);
  data::SftData loaded = data::load_sft_data(sources, options, *tokenizer_, special);
  train_ = std::make_unique<data::SftDataset>(std::move(loaded.train));
  eval_ = std::make_unique<data::SftDataset>(std::move(loaded.eval));
  if (cfg.is_set("eval_dataset")) {
    data::SftOptions eval_options = options;
    eval_options.tokenized_path.clear();
    eval_options.val_size = 0;
    const auto eval_from = eval_sources(cfg, options.records);
    data::SftData eval = data::load_sft_data(eval_from, eval_options, *tokenizer_, special);
    eval_ = std::make_unique<data::SftDataset>(std::move(eval.train));
    loaded.summary += "\neval: " + names_of(eval_from) + ": " + eval.summary;
  }
  segments_ = options.neat_packing;
  pairs_ = options.stage == "dpo";
  summary_ = loaded.summary + " (" + tokenizer_->name() + " tokenizer, template " + chat.name() + ")";
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
  const auto count = static_cast<std::int64_t>(indices.size());
  return count * (packed_ ? packed_->seq_len() : train_->padded_length(indices, pad_multiple_));
}

data::Batch TrainingData::batch(const std::vector<std::int64_t>& indices) const {
  if (!packed_) {
    data::Batch b = train_->batch(indices, pad_multiple_);
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
