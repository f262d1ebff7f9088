#include "lft/train/training_data.h"

#include <ATen/ATen.h>
#include <mpi.h>

#include <sys/stat.h>

#include "lft/comm/watchdog.h"
#include "lft/data/chat_template.h"
#include "lft/data/corpus.h"
#include "lft/data/hf_tokenizer.h"
#include "lft/data/sft_cache.h"
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

}  // namespace

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
  const std::vector<std::string> paths = cfg.strings("train_dataset");
  std::string joined;
  for (const auto& p : paths) joined += (joined.empty() ? "" : ", ") + p;
  Watchdog::Scope scope("reading and tokenizing the training data", Watchdog::setup_timeout(),
                        "setup_timeout");
  if (cfg.string("stage") == "pt") {
    if (cfg.real("val_size") > 0)
      fail(cfg.where("val_size") + ": val_size needs stage = \"sft\" in this build (pre-training "
                                   "data is one packed stream)",
           "remove val_size, or train with stage = \"sft\"");
    std::vector<std::string> docs;
    for (const auto& p : paths) {
      auto more = data::read_text_corpus(p);
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
  // Every rank tokenizes its share; rank 0 writes the cache. A set-up phase with its own
  // deadline, not a training collective.
  int rank = 0;
  LFT_MPI_CHECK(MPI_Comm_rank(world, &rank));
  options.parallel = split_tokenizing(world);
  options.write_cache = rank == 0;
  data::SftData loaded = data::load_sft_data(paths, options, *tokenizer_, special);
  train_ = std::make_unique<data::SftDataset>(std::move(loaded.train));
  eval_ = std::make_unique<data::SftDataset>(std::move(loaded.eval));
  segments_ = options.neat_packing;
  summary_ = loaded.summary + " (" + tokenizer_->name() + " tokenizer, template " + chat.name() + ")";
}

std::int64_t TrainingData::num_sequences() const {
  return packed_ ? packed_->num_sequences() : train_->num_sequences();
}

std::int64_t TrainingData::seq_len() const { return packed_ ? packed_->seq_len() : train_->seq_len(); }

double TrainingData::weight_sum(const std::vector<std::int64_t>& indices) const {
  if (!packed_) return train_->weight_sum(indices);
  return static_cast<double>(indices.size()) * static_cast<double>(packed_->seq_len() - 1);
}

data::Batch TrainingData::batch(const std::vector<std::int64_t>& indices) const {
  if (!packed_) {
    data::Batch b = train_->batch(indices);
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
