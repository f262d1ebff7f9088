// The training data's decoder: the configuration's data keys read into DataOptions
// (data_options.h). TrainingData builds from these.
#include "lft/train/data_options.h"

#include "lft/config/batching.h"
#include "lft/config/list_names.h"

namespace lft::train {

DataOptions data_options(const config::Config& cfg) {
  DataOptions o;
  o.stage = cfg.string("stage");
  if (cfg.is_set("model_name_or_path")) {
    o.model_folder = cfg.string("model_name_or_path");
    o.model_folder_where = cfg.where("model_name_or_path");
  }
  o.bytes_tokenizer = cfg.string("tokenizer") == "bytes";
  o.template_name = cfg.string("template");
  if (cfg.is_set("custom_chat_template")) o.custom_chat_template = cfg.string("custom_chat_template");
  o.dataset_format = cfg.string("dataset_format");
  o.use_dataset = cfg.is_set("dataset");
  if (o.use_dataset) {
    o.dataset_names = config::list_names(cfg.strings("dataset"));
  } else {
    o.train_files = cfg.strings("train_dataset");
  }
  o.dataset_dir = cfg.string("dataset_dir");
  o.has_eval_dataset = cfg.is_set("eval_dataset");
  if (o.has_eval_dataset) {
    o.eval_entries = cfg.strings("eval_dataset");
    o.eval_names = config::list_names(cfg.strings("eval_dataset"));
  }
  if (cfg.is_set("max_samples")) o.max_samples = cfg.integer("max_samples");
  o.cutoff_len = cfg.integer("cutoff_len");
  o.packing = cfg.boolean("packing") || cfg.boolean("neat_packing");
  o.packing_set = cfg.is_set("packing");
  o.neat_packing = cfg.boolean("neat_packing");
  o.join_micro_batches = config::joins_micro_batches(cfg.string("batching_strategy"));
  o.val_size = cfg.real("val_size");
  o.seed = static_cast<std::uint64_t>(cfg.integer("seed"));
  if (cfg.is_set("tokenized_path")) o.tokenized_path = cfg.string("tokenized_path");
  o.eval_key = o.val_size > 0 ? "val_size" : cfg.is_set("eval_dataset") ? "eval_dataset" : "";
  if (!o.eval_key.empty()) o.eval_where = cfg.where(o.eval_key);
  return o;
}

}  // namespace lft::train
