// The config reader on YAML files (LlamaFactory's format): scalar typing, lists, nested tables,
// located errors, every problem in one message (TOML too), and LlamaFactory's own keys (mapped,
// noted or refused) with the rules on what to train on (train_dataset / dataset, eval_dataset).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "lft/config/config.h"
#include "lft/config/schema.h"
#include "lft/optim/lr_schedule.h"
#include "test_util.h"

namespace lft::config {
namespace {

// An existing training data file (train_dataset must point at one).
const std::string& data_path() {
  static const std::string path = [] {
    std::string p = ::testing::TempDir() + "lft_test_config_yaml_data.jsonl";
    std::ofstream(p) << "{\"text\": \"hello\"}\n";
    return p;
  }();
  return path;
}

// This checkout's root, from this file's path.
std::string repo_root() {
  const std::string here = __FILE__;  // <root>/tests/unit/test_config_yaml.cpp
  return here.substr(0, here.rfind('/')) + "/../..";
}

// Two lines: the data file, and the finetuning_type every LlamaFactory YAML must give.
std::string yaml_head() { return "train_dataset: " + data_path() + "\nfinetuning_type: full\n"; }

// Six lines, "model:" first.
std::string yaml_model() {
  return "model:\n  vocab_size: 128\n  hidden_size: 64\n  intermediate_size: 256\n"
         "  num_hidden_layers: 2\n  num_attention_heads: 4\n";
}

// One line.
std::string toml_data() { return "train_dataset = \"" + data_path() + "\"\n"; }

// Six lines, "[model]" first.
std::string toml_model() {
  return "[model]\nvocab_size = 128\nhidden_size = 64\nintermediate_size = 256\n"
         "num_hidden_layers = 2\nnum_attention_heads = 4\n";
}

Config parse_yaml(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_config(text, "run.yaml", overrides);
}

Config parse_toml(const std::string& text) { return parse_config(text, "run.toml"); }

// The ConfigError message parsing throws, or "" and a test failure.
std::string yaml_error(const std::string& text) {
  return test::message_of<ConfigError>([&] { parse_config(text, "run.yaml"); });
}

std::string toml_error(const std::string& text) {
  return test::message_of<ConfigError>([&] { parse_config(text, "run.toml"); });
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// ---- YAML scalars, lists and tables ----

TEST(ConfigYaml, ScalarsAreTypedAsLlamaFactoryReadsThem) {
  const Config c = parse_yaml(yaml_head() +
                              "learning_rate: 1.0e-5\n"  // 3
                              "adam_epsilon: 1e-5\n"     // 4: a float (plain YAML 1.1: a string)
                              "max_grad_norm: 2\n"       // 5: an int for a float key
                              "seed: 7\n"
                              "bf16: true\n"
                              "template: \"llama3\"\n"
                              "output_dir: \"123\"\n" +  // a quoted number stays a string
                              yaml_model());
  EXPECT_DOUBLE_EQ(c.real("learning_rate"), 1e-5);
  EXPECT_DOUBLE_EQ(c.real("adam_epsilon"), 1e-5);
  EXPECT_DOUBLE_EQ(c.real("max_grad_norm"), 2.0);
  EXPECT_EQ(c.integer("seed"), 7);
  EXPECT_TRUE(c.boolean("bf16"));
  EXPECT_EQ(c.string("template"), "llama3");
  EXPECT_EQ(c.string("output_dir"), "123");
  EXPECT_EQ(c.integer("model.hidden_size"), 64);
  EXPECT_EQ(c.where("learning_rate"), "run.yaml:3:1: key 'learning_rate'");
  ASSERT_NE(c.location("adam_epsilon"), nullptr);
  EXPECT_EQ(c.location("adam_epsilon")->line, 4);
  EXPECT_EQ(c.location("adam_epsilon")->line_text, "adam_epsilon: 1e-5");
  EXPECT_EQ(c.source_name(), "run.yaml");
}

TEST(ConfigYaml, BooleanSpellings) {
  // reshard_after_forward defaults to true, so a false that is read as false is seen.
  const std::string fsdp2 = "distributed: fsdp2\ndist_config:\n  reshard_after_forward: ";
  for (const char* word : {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"}) {
    const Config c = parse_yaml(yaml_head() + "bf16: " + word + "\n" + yaml_model());
    EXPECT_TRUE(c.boolean("bf16")) << word;
  }
  for (const char* word : {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"}) {
    const Config c = parse_yaml(yaml_head() + fsdp2 + word + "\n" + yaml_model());
    EXPECT_TRUE(c.is_set("dist_config.reshard_after_forward")) << word;
    EXPECT_FALSE(c.boolean("dist_config.reshard_after_forward")) << word;
  }
}

TEST(ConfigYaml, QuotedValuesAreStrings) {
  std::string m = yaml_error(yaml_head() + "learning_rate: \"1e-5\"\n" + yaml_model());
  EXPECT_CONTAINS(m,
                  "config error: run.yaml:3:1: key 'learning_rate' must be a float, got string "
                  "\"1e-5\"");
  EXPECT_CONTAINS(m, "\n  3 | learning_rate: \"1e-5\"\n");
  m = yaml_error(yaml_head() + "bf16: \"true\"\n" + yaml_model());
  EXPECT_CONTAINS(m, "run.yaml:3:1: key 'bf16' must be a bool, got string \"true\"");
  m = yaml_error(yaml_head() + "seed: '7'\n" + yaml_model());
  EXPECT_CONTAINS(m, "run.yaml:3:1: key 'seed' must be an int, got string \"7\"");
  // Unquoted digits are a number, which a string key refuses.
  m = yaml_error(yaml_head() + "output_dir: 123\n" + yaml_model());
  EXPECT_CONTAINS(m, "run.yaml:3:1: key 'output_dir' must be a string, got int 123");
}

TEST(ConfigYaml, NullLeavesTheKeyOut) {
  const Config c = parse_yaml(yaml_head() + "tokenized_path: null\nmax_samples: ~\nseed:\n" +
                              "learning_rate: null\n" + yaml_model());
  EXPECT_FALSE(c.is_set("tokenized_path"));
  EXPECT_FALSE(c.is_set("max_samples"));
  EXPECT_FALSE(c.is_set("seed"));
  EXPECT_EQ(c.integer("seed"), 42);
  EXPECT_FALSE(c.is_set("learning_rate"));
  EXPECT_DOUBLE_EQ(c.real("learning_rate"), 5e-5);
  // Quoted, it is the word.
  const Config d = parse_yaml(yaml_head() + "tokenized_path: \"null\"\n" + yaml_model());
  EXPECT_EQ(d.string("tokenized_path"), "null");
}

TEST(ConfigYaml, ResumeFromCheckpointDefaultsAsLlamaFactory) {
  // Neither resume_from_checkpoint nor overwrite_output_dir: resume from the newest checkpoint.
  const Config absent = parse_yaml(yaml_head() + yaml_model());
  EXPECT_TRUE(absent.is_set("resume_from_checkpoint"));
  EXPECT_EQ(absent.string("resume_from_checkpoint"), "auto");
  // null is "absent": the same.
  const Config null_value =
      parse_yaml(yaml_head() + "resume_from_checkpoint: null\n" + yaml_model());
  EXPECT_EQ(null_value.string("resume_from_checkpoint"), "auto");
  // overwrite_output_dir: true starts from scratch: nothing is set, a note says so.
  const Config overwrite = parse_yaml(
      yaml_head() + "overwrite_output_dir: true\nresume_from_checkpoint: null\n" + yaml_model());
  EXPECT_FALSE(overwrite.is_set("resume_from_checkpoint"));
  ASSERT_EQ(overwrite.notes().size(), 1u);
  EXPECT_CONTAINS(overwrite.notes()[0], "run.yaml:3:1: overwrite_output_dir = true");
  // overwrite_output_dir: false: "auto", located at that line.
  const Config keep = parse_yaml(yaml_head() + "overwrite_output_dir: false\n" + yaml_model());
  EXPECT_EQ(keep.string("resume_from_checkpoint"), "auto");
  EXPECT_EQ(keep.where("resume_from_checkpoint"), "run.yaml:3:1: key 'resume_from_checkpoint'");
  // A checkpoint given is kept.
  const Config given =
      parse_yaml(yaml_head() + "resume_from_checkpoint: output/checkpoint-10\n" + yaml_model());
  EXPECT_EQ(given.string("resume_from_checkpoint"), "output/checkpoint-10");
  // TOML gets no LlamaFactory default.
  EXPECT_FALSE(parse_toml(toml_data() + toml_model()).is_set("resume_from_checkpoint"));
}

TEST(ConfigYaml, ListsAndCommaStrings) {
  const std::string rest = "finetuning_type: full\n" + yaml_model();
  const std::vector<std::string> two = {"identity", "alpaca_en_demo"};
  EXPECT_EQ(parse_yaml("dataset: [identity, alpaca_en_demo]\n" + rest).strings("dataset"), two);
  EXPECT_EQ(parse_yaml("dataset:\n  - identity\n  - alpaca_en_demo\n" + rest).strings("dataset"),
            two);
  // A comma-separated string stays one element here (the trainer splits it at the commas).
  const Config comma = parse_yaml("dataset: identity,alpaca_en_demo\n" + rest);
  EXPECT_EQ(comma.strings("dataset"), std::vector<std::string>{"identity,alpaca_en_demo"});
  EXPECT_EQ(comma.string("dataset"), "identity,alpaca_en_demo");
  // train_dataset lists: each file is checked.
  const Config files =
      parse_yaml("train_dataset: [" + data_path() + ", " + data_path() + "]\n" + rest);
  EXPECT_EQ(files.strings("train_dataset"), (std::vector<std::string>{data_path(), data_path()}));
  std::string m =
      yaml_error("train_dataset: [" + data_path() + ", /no/such/lft_file.jsonl]\n" + rest);
  EXPECT_CONTAINS(m,
                  "run.yaml:1:1: key 'train_dataset': file not found: \"/no/such/lft_file.jsonl\"");
  // A list where one value is expected; a list of tables.
  m = yaml_error(yaml_head() + "template: [llama3, qwen]\n" + yaml_model());
  EXPECT_CONTAINS(m, "run.yaml:3:1: key 'template' must be a string, got array");
  m = yaml_error("dataset: [{name: identity}]\n" + rest);
  EXPECT_CONTAINS(m, "run.yaml:1:1: key 'dataset' must be a string, got array");
}

TEST(ConfigYaml, NestedTables) {
  const Config c = parse_yaml(yaml_head() +                                // 1-2
                              "distributed: fsdp2\n"                       // 3
                              "bf16: true\n"                               // 4
                              "dist_config:\n"                             // 5
                              "  mixed_precision: bf16\n"                  // 6
                              "  reshard_after_forward: false\n"           // 7
                              "  offload_params: true\n"                   // 8
                              "lr_scheduler_type: cosine_with_min_lr\n"    // 9
                              "lr_scheduler_kwargs: {min_lr_rate: 0.1}\n"  // 10
                              + yaml_model());                             // 11-16
  EXPECT_EQ(c.string("distributed"), "fsdp2");
  EXPECT_EQ(c.string("dist_config.mixed_precision"), "bf16");
  EXPECT_FALSE(c.boolean("dist_config.reshard_after_forward"));
  EXPECT_TRUE(c.boolean("dist_config.offload_params"));
  EXPECT_FALSE(c.is_set("dist_config.pin_memory"));
  EXPECT_EQ(c.string("lr_scheduler_type"), "cosine_with_min_lr");
  EXPECT_DOUBLE_EQ(c.real("lr_scheduler_kwargs.min_lr_rate"), 0.1);
  EXPECT_FALSE(c.is_set("lr_scheduler_kwargs.min_lr"));
  EXPECT_EQ(c.integer("model.vocab_size"), 128);
  EXPECT_EQ(c.integer("model.num_attention_heads"), 4);
  EXPECT_TRUE(c.has_table("dist_config"));
  EXPECT_TRUE(c.has_table("lr_scheduler_kwargs"));
  EXPECT_TRUE(c.has_table("model"));
  EXPECT_FALSE(c.has_table("mesh"));
  EXPECT_EQ(c.where("dist_config.mixed_precision"),
            "run.yaml:6:3: key 'dist_config.mixed_precision'");
  EXPECT_EQ(c.where("model.vocab_size"), "run.yaml:12:3: key 'model.vocab_size'");
  ASSERT_NE(c.location("lr_scheduler_kwargs.min_lr_rate"), nullptr);
  EXPECT_EQ(c.location("lr_scheduler_kwargs.min_lr_rate")->line, 10);
}

TEST(ConfigYaml, NestedTableErrors) {
  // dist_config keys need their engine.
  std::string m =
      yaml_error(yaml_head() + "dist_config:\n  mixed_precision: bf16\n" + yaml_model());
  EXPECT_CONTAINS(m,
                  "config error: run.yaml:4:3: key 'dist_config.mixed_precision' applies only to "
                  "distributed = \"fsdp2\" or \"fsdp\" (this run has distributed = \"ddp\")");
  // A misspelt key inside a table: located at its column, its line quoted.
  m = yaml_error(yaml_head() + "distributed: fsdp2\ndist_config:\n  mixed_precison: bf16\n" +
                 yaml_model());
  EXPECT_CONTAINS(m,
                  "config error: run.yaml:5:3: unknown key 'dist_config.mixed_precison'; did you "
                  "mean 'dist_config.mixed_precision'?\n  5 |   mixed_precison: bf16\n");
  // A scalar where a table is expected; a table nobody declared.
  m = yaml_error(yaml_head() + "model: llama\n");  // LlamaFactory v1's model key beside the classic finetuning_type
  EXPECT_CONTAINS(m, "run.yaml:3:1: this file mixes LlamaFactory v1's keys ('model') with the classic trainer's ('finetuning_type')");
  m = toml_error(toml_data() + "model = \"llama\"\n");
  EXPECT_CONTAINS(m, "'model' must be a table, got string \"llama\"");
  m = yaml_error(yaml_head() + "lora_config:\n  r: 8\n" + yaml_model());
  EXPECT_CONTAINS(m, "run.yaml:3:1: unknown table [lora_config]");
}

// ---- locations and syntax ----

TEST(ConfigYaml, UnknownKeyIsLocatedAndQuoted) {
  std::string m = yaml_error(yaml_head() + "xyz: 1\n" + yaml_model());
  EXPECT_EQ(m.rfind("config error: run.yaml:3:1: unknown key 'xyz'\n  3 | xyz: 1\n  hint: ", 0), 0u)
      << m;
  EXPECT_CONTAINS(m, "see `lftrain --help-config`");
  EXPECT_EQ(m.find("config errors"), std::string::npos) << m;  // one error, no count
  m = yaml_error(yaml_head() + "seed: 1\nlearning_rat: 1.0e-4\n" + yaml_model());
  EXPECT_CONTAINS(m,
                  "config error: run.yaml:4:1: unknown key 'learning_rat'; did you mean "
                  "'learning_rate'?\n  4 | learning_rat: 1.0e-4\n");
}

TEST(ConfigYaml, SyntaxErrorsAreLocated) {
  std::string m = yaml_error("seed: 1\nbf16: true\n  x: 1\n");
  EXPECT_CONTAINS(m, "config error: run.yaml:3:");
  EXPECT_CONTAINS(m, "YAML syntax error");
  EXPECT_CONTAINS(m, "hint: lftrain reads .yaml/.yml files as YAML");
  m = yaml_error("seed: 1\n\tbf16: true\n");  // a tab as indentation
  EXPECT_CONTAINS(m, "config error: run.yaml:2:");
  EXPECT_CONTAINS(m, "YAML syntax error");
  // Nesting past yaml-cpp's limit: said so, not yaml-cpp's "bad file".
  m = yaml_error("seed: 1\nx: " + std::string(3000, '[') + std::string(3000, ']') + "\n");
  EXPECT_CONTAINS(m, "config error: run.yaml:2:");
  EXPECT_CONTAINS(m, "values nested more than");
  // YAML text in a file that is not .yaml/.yml is read as TOML.
  m = toml_error("seed: 1\n");
  EXPECT_CONTAINS(m, "run.toml: TOML syntax error");
  EXPECT_CONTAINS(m, "hint: lftrain reads .yaml/.yml files as YAML and every other file as TOML");
  // .yml is YAML too (the YAML default stage shows it).
  EXPECT_EQ(parse_config(yaml_head() + yaml_model(), "run.yml").string("stage"), "sft");
}

TEST(ConfigYaml, DuplicateKeyNamesBothLines) {
  std::string m = yaml_error(yaml_head() + "seed: 1\nbf16: true\nseed: 2\n" + yaml_model());
  EXPECT_CONTAINS(m, "config error: run.yaml:5:1: key 'seed' appears twice (also on line 3)");
  EXPECT_CONTAINS(m, "\n  5 | seed: 2\n");
  m = yaml_error(yaml_head() + "distributed: fsdp2\ndist_config:\n  pin_memory: true\n" +
                 "  pin_memory: false\n" + yaml_model());
  EXPECT_CONTAINS(m, "run.yaml:6:3: key 'dist_config.pin_memory' appears twice (also on line 5)");
}

// LlamaFactory's loader refuses a stream of several documents; the keys after '---' were dropped.
TEST(ConfigYaml, ASecondDocumentIsRefusedAtItsLine) {
  std::string m = yaml_error(yaml_head() + "seed: 1\n---\nseed: 2\nlearning_rate: 1.0\n" + yaml_model());
  EXPECT_CONTAINS(m, "config error: run.yaml:4:1: a second YAML document starts here ('---')");
  EXPECT_CONTAINS(m, "hint: merge the documents into one");
  m = yaml_error(yaml_head() + yaml_model() + "---\n");  // an empty second document
  EXPECT_CONTAINS(m, "run.yaml:9:1: a second YAML document starts here");
  // A first document that opens with '---' is one document.
  EXPECT_EQ(parse_yaml("---\n" + yaml_head() + yaml_model()).string("stage"), "sft");
}

TEST(ConfigYaml, TopLevelMustBeAMapping) {
  std::string m = yaml_error("- train_dataset: x\n- finetuning_type: full\n");
  EXPECT_CONTAINS(m, "config error: run.yaml: a YAML config is a mapping of keys to values");
  m = yaml_error("just some words\n");
  EXPECT_CONTAINS(m, "config error: run.yaml: a YAML config is a mapping of keys to values");
}

// ---- every problem in one message ----

TEST(ConfigYaml, AllErrorsAtOnceInToml) {
  const std::string m = toml_error(toml_data() +
                                   "learnin_rate = 1e-4\n"  // 2: unknown key
                                   "seed = \"x\"\n"         // 3: wrong type
                                   "warmup_ratio = 2.0\n"   // 4: out of range
                                   + toml_model());
  const std::string unknown =
      "config error: run.toml:2:1: unknown key 'learnin_rate'; did you mean 'learning_rate'?";
  const std::string type =
      "config error: run.toml:3:1: key 'seed' must be an int, got string \"x\"";
  const std::string range =
      "config error: run.toml:4:1: key 'warmup_ratio' must be between 0 and 1, got 2.0";
  EXPECT_CONTAINS(m, unknown);
  EXPECT_CONTAINS(m, type);
  EXPECT_CONTAINS(m, range);
  EXPECT_LT(m.find(unknown), m.find(type));  // in source order
  EXPECT_LT(m.find(type), m.find(range));
  EXPECT_TRUE(ends_with(m, "\n3 config errors; fix them all and run again")) << m;
}

TEST(ConfigYaml, AllErrorsAtOnceInYaml) {
  const std::string bad =
      "learnin_rate: 1.0e-4\n"  // 3: unknown key
      "seed: x\n"               // 4: wrong type
      "warmup_ratio: 2\n";      // 5: out of range
  std::string m = yaml_error(yaml_head() + bad + yaml_model());
  EXPECT_CONTAINS(m,
                  "config error: run.yaml:3:1: unknown key 'learnin_rate'; did you mean "
                  "'learning_rate'?");
  EXPECT_CONTAINS(m, "config error: run.yaml:4:1: key 'seed' must be an int, got string \"x\"");
  EXPECT_CONTAINS(
      m, "config error: run.yaml:5:1: key 'warmup_ratio' must be between 0 and 1, got 2.0");
  EXPECT_CONTAINS(m, "\n  4 | seed: x\n");
  EXPECT_TRUE(ends_with(m, "\n3 config errors; fix them all and run again")) << m;
  // Without finetuning_type (LlamaFactory's default, lora, applies), still those three.
  m = yaml_error("train_dataset: " + data_path() + "\n" + bad + yaml_model());
  EXPECT_TRUE(ends_with(m, "\n3 config errors; fix them all and run again")) << m;
}

TEST(ConfigYaml, ValueErrorsAndMissingFilesTogether) {
  const std::string m =
      toml_error("train_dataset = \"/no/such/lft_data.jsonl\"\nseed = -3\n" + toml_model());
  EXPECT_CONTAINS(m, "run.toml:2:1: key 'seed' must be >= 0, got -3");
  EXPECT_CONTAINS(m,
                  "run.toml:1:1: key 'train_dataset': file not found: \"/no/such/lft_data.jsonl\"");
  EXPECT_TRUE(ends_with(m, "\n2 config errors; fix them all and run again")) << m;
}

// ---- LlamaFactory's keys ----

TEST(LlamaFactoryKeys, InertKeysBecomeNotes) {
  const Config c = parse_yaml(yaml_head() +
                              "report_to: none\n"                  // 3
                              "ddp_timeout: 1800\n"                // 4
                              "preprocessing_num_workers: 16\n" +  // 5
                              yaml_model());
  ASSERT_EQ(c.notes().size(), 3u);
  EXPECT_CONTAINS(c.notes()[0], "run.yaml:3:1: report_to = \"none\" has no effect");
  EXPECT_CONTAINS(c.notes()[0], "experiment trackers");
  EXPECT_CONTAINS(c.notes()[1], "run.yaml:4:1: ddp_timeout = 1800 has no effect");
  EXPECT_CONTAINS(c.notes()[1], "comm_timeout");
  EXPECT_CONTAINS(c.notes()[2], "run.yaml:5:1: preprocessing_num_workers = 16 has no effect");
  EXPECT_TRUE(parse_yaml(yaml_head() + yaml_model()).notes().empty());
  // TOML files get the same notes.
  const Config t = parse_toml(toml_data() + "report_to = \"none\"\n" + toml_model());
  ASSERT_EQ(t.notes().size(), 1u);
  EXPECT_CONTAINS(t.notes()[0], "run.toml:2:1: report_to = \"none\" has no effect");
}

TEST(LlamaFactoryKeys, DoTrainMustBeTrue) {
  EXPECT_NO_THROW(parse_yaml(yaml_head() + "do_train: true\n" + yaml_model()));
  const std::string m = yaml_error(yaml_head() + "do_train: false\n" + yaml_model());
  EXPECT_CONTAINS(m, "config error: run.yaml:3:1: do_train = false is not supported");
  EXPECT_CONTAINS(m, "hint: remove it, or set do_train = true");
}

TEST(LlamaFactoryKeys, FinetuningTypeDefaultsAndItsKeys) {
  // A classic YAML file without it gets LlamaFactory's default, LoRA; a TOML file lftrain's, full
  // (a YAML without stage, finetuning_type or dataset is v1's, which trains the full model).
  EXPECT_EQ(parse_yaml("stage: sft\ntrain_dataset: " + data_path() + "\n" + yaml_model()).string("finetuning_type"), "lora");
  EXPECT_EQ(parse_yaml("train_dataset: " + data_path() + "\n" + yaml_model()).string("finetuning_type"), "full");
  EXPECT_EQ(parse_toml(toml_data() + toml_model()).string("finetuning_type"), "full");
  const Config c = parse_yaml("train_dataset: " + data_path() + "\nfinetuning_type: lora\nlora_rank: 16\n"
                              "lora_target: q_proj,v_proj\nadditional_target: [lm_head]\n" + yaml_model());
  EXPECT_EQ(c.integer("lora_rank"), 16);
  EXPECT_EQ(c.strings("lora_target"), std::vector<std::string>{"q_proj,v_proj"});
  EXPECT_EQ(c.strings("additional_target"), std::vector<std::string>{"lm_head"});
  std::string m = yaml_error("train_dataset: " + data_path() + "\nfinetuning_type: oft\n" + yaml_model());
  EXPECT_CONTAINS(m, "run.yaml:2:1: key 'finetuning_type' = \"oft\" is not allowed; allowed values: \"full\", \"freeze\", \"lora\"");
  // A key of another finetuning_type: at the key, naming where finetuning_type is set.
  m = yaml_error(yaml_head() + "lora_rank: 8\n" + yaml_model());
  EXPECT_CONTAINS(m, "run.yaml:3:1: key 'lora_rank' applies to finetuning_type = \"lora\", but finetuning_type = \"full\"");
  EXPECT_CONTAINS(m, "finetuning_type is set at run.yaml:2:1");
  EXPECT_CONTAINS(m, "hint: set finetuning_type = \"lora\", or remove lora_rank");
  m = toml_error(toml_data() + "freeze_trainable_layers = 3\n" + toml_model());
  EXPECT_CONTAINS(m, "run.toml:2:1: key 'freeze_trainable_layers' applies to finetuning_type = \"freeze\", but "
                     "finetuning_type = \"full\" (the default)");
}

TEST(LlamaFactoryKeys, DoraIsALoraKey) {
  const Config dora = parse_yaml("train_dataset: " + data_path() + "\nfinetuning_type: lora\nuse_dora: true\n" + yaml_model());
  EXPECT_TRUE(dora.boolean("use_dora"));
  EXPECT_EQ(dora.where("use_dora"), "run.yaml:3:1: key 'use_dora'");
  const std::string m = yaml_error(yaml_head() + "use_dora: true\n" + yaml_model());
  EXPECT_CONTAINS(m, "run.yaml:3:1: key 'use_dora' applies to finetuning_type = \"lora\", but finetuning_type = \"full\"");
}

TEST(LlamaFactoryKeys, LoraVariantsAreRefused) {
  std::string m = yaml_error(yaml_head() + "loraplus_lr_ratio: 16.0\n" + yaml_model());
  EXPECT_CONTAINS(m, "run.yaml:3:1: key 'loraplus_lr_ratio' configures a LoRA variant (or OFT) that lftrain does not implement");
  // With other refusals: every one reported.
  m = yaml_error(yaml_head() + "do_train: false\nloraplus_lr_ratio: 16.0\noptim: sgd\n" + yaml_model());
  EXPECT_CONTAINS(m, "do_train = false");
  EXPECT_CONTAINS(m, "key 'loraplus_lr_ratio'");
  EXPECT_CONTAINS(m, "optim = \"sgd\"");
  EXPECT_TRUE(ends_with(m, "\n3 config errors; fix them all and run again")) << m;
}

TEST(LlamaFactoryKeys, DisableGradientCheckpointing) {
  const Config on =
      parse_yaml(yaml_head() + "disable_gradient_checkpointing: false\n" + yaml_model());
  EXPECT_TRUE(on.boolean("gradient_checkpointing"));
  EXPECT_EQ(on.where("gradient_checkpointing"), "run.yaml:3:1: key 'gradient_checkpointing'");
  const Config off =
      parse_yaml(yaml_head() + "disable_gradient_checkpointing: true\n" + yaml_model());
  EXPECT_TRUE(off.is_set("gradient_checkpointing"));
  EXPECT_FALSE(off.boolean("gradient_checkpointing"));
  // Both keys, agreeing: fine; contradicting: an error quoting both lines.
  EXPECT_NO_THROW(parse_yaml(
      yaml_head() + "disable_gradient_checkpointing: true\ngradient_checkpointing: false\n" +
      yaml_model()));
  std::string m = yaml_error(yaml_head() +
                             "gradient_checkpointing: true\n"          // 3
                             "disable_gradient_checkpointing: true\n"  // 4
                             + yaml_model());
  EXPECT_CONTAINS(m,
                  "config error: run.yaml:4:1: 'disable_gradient_checkpointing' = true means "
                  "gradient_checkpointing = false, but gradient_checkpointing = true is set too");
  EXPECT_CONTAINS(
      m, "\n  3 | gradient_checkpointing: true\n  4 | disable_gradient_checkpointing: true\n");
  m = yaml_error(yaml_head() + "disable_gradient_checkpointing: \"yes\"\n" + yaml_model());
  EXPECT_CONTAINS(m,
                  "run.yaml:3:1: key 'disable_gradient_checkpointing' must be a bool, got string "
                  "\"yes\"");
}

TEST(LlamaFactoryKeys, EvalStrategy) {
  std::string m = yaml_error(yaml_head() + "eval_strategy: epoch\n" + yaml_model());
  EXPECT_CONTAINS(m, "config error: run.yaml:3:1: eval_strategy = \"epoch\" is not supported");
  EXPECT_CONTAINS(m, "use \"steps\" or \"no\"");
  m = yaml_error(yaml_head() + "evaluation_strategy: epoch\n" + yaml_model());
  EXPECT_CONTAINS(m, "run.yaml:3:1: evaluation_strategy = \"epoch\" is not supported");
  // "no": a note that says when lftrain evaluates; eval_steps is left alone.
  const Config no = parse_yaml(yaml_head() + "eval_strategy: \"no\"\n" + yaml_model());
  EXPECT_FALSE(no.is_set("eval_steps"));
  ASSERT_EQ(no.notes().size(), 1u);
  EXPECT_CONTAINS(no.notes()[0], "run.yaml:3:1: eval_strategy = \"no\": lftrain evaluates when val_size or eval_dataset is set");
  // "steps": eval_steps as given.
  const Config steps =
      parse_yaml(yaml_head() + "eval_strategy: steps\neval_steps: 10\n" + yaml_model());
  EXPECT_EQ(steps.integer("eval_steps"), 10);
}

TEST(LlamaFactoryKeys, DeepspeedFileChoosesTheEngine) {
  const std::string ds = repo_root() + "/inputs/ds_z3_config.json";
  ASSERT_TRUE(test::is_regular_file(ds)) << ds;
  const Config c = parse_yaml(yaml_head() + "deepspeed: " + ds + "\n" + yaml_model());
  EXPECT_EQ(c.string("distributed"), "deepspeed");
  EXPECT_EQ(c.string("deepspeed"), ds);
  EXPECT_EQ(c.where("distributed"), "run.yaml:3:1: key 'distributed'");
  // The same in TOML.
  EXPECT_EQ(
      parse_toml(toml_data() + "deepspeed = \"" + ds + "\"\n" + toml_model()).string("distributed"),
      "deepspeed");
  // distributed given: it stays, and deepspeed then belongs to another engine.
  std::string m =
      yaml_error(yaml_head() + "distributed: ddp\ndeepspeed: " + ds + "\n" + yaml_model());
  EXPECT_CONTAINS(m,
                  "run.yaml:4:1: key 'deepspeed' applies only to distributed = \"deepspeed\" "
                  "(this run has distributed = \"ddp\")");
  m = yaml_error(yaml_head() + "deepspeed: /no/such/lft_ds.json\n" + yaml_model());
  EXPECT_CONTAINS(m, "run.yaml:3:1: key 'deepspeed': file not found: \"/no/such/lft_ds.json\"");
}

TEST(LlamaFactoryKeys, StageDefaultsToSftInYaml) {
  const Config y = parse_yaml(yaml_head() + yaml_model());
  EXPECT_EQ(y.string("stage"), "sft");
  EXPECT_EQ(y.where("stage"), "run.yaml: key 'stage'");
  EXPECT_EQ(parse_yaml(yaml_head() + "stage: pt\n" + yaml_model()).string("stage"), "pt");
  const Config t = parse_toml(toml_data() + toml_model());
  EXPECT_EQ(t.string("stage"), "pt");
  EXPECT_FALSE(t.is_set("stage"));
}

TEST(LlamaFactoryKeys, EpochsWithMaxStepsAllowedInYamlOnly) {
  const Config y =
      parse_yaml(yaml_head() + "num_train_epochs: 3.0\nmax_steps: 20\n" + yaml_model());
  EXPECT_EQ(y.integer("max_steps"), 20);
  EXPECT_DOUBLE_EQ(y.real("num_train_epochs"), 3.0);
  const std::string m =
      toml_error(toml_data() + "num_train_epochs = 3.0\nmax_steps = 20\n" + toml_model());
  EXPECT_CONTAINS(m,
                  "run.toml:3:1: max_steps = 20 and num_train_epochs = 3.0 contradict each other");
}

TEST(LlamaFactoryKeys, OptimIsAdamW) {
  EXPECT_NO_THROW(parse_yaml(yaml_head() + "optim: adamw_torch\n" + yaml_model()));
  EXPECT_NO_THROW(parse_yaml(yaml_head() + "optim: adamw_torch_fused\n" + yaml_model()));
  const std::string m = yaml_error(yaml_head() + "optim: sgd\n" + yaml_model());
  EXPECT_CONTAINS(m, "config error: run.yaml:3:1: optim = \"sgd\" is not implemented");
  EXPECT_CONTAINS(m, "use \"adamw_torch\"");
}

TEST(LlamaFactoryKeys, TrainerFsdpSwitchPointsAtFsdp2) {
  std::string m = yaml_error(yaml_head() + "fsdp: full_shard\n" + yaml_model());
  EXPECT_CONTAINS(m,
                  "config error: run.yaml:3:1: key 'fsdp' is the Hugging Face Trainer's FSDP "
                  "switch");
  EXPECT_CONTAINS(m, "distributed = \"fsdp2\"");
  m = yaml_error(yaml_head() + "fsdp_config:\n  min_num_params: 0\n" + yaml_model());
  EXPECT_CONTAINS(m, "run.yaml:3:1: key 'fsdp_config' is the Hugging Face Trainer's FSDP switch");
}

// ---- what to train and evaluate on ----

TEST(ConfigDataSources, TrainDatasetOrDataset) {
  std::string m = toml_error(toml_data() + "dataset = \"identity\"\n" + toml_model());
  EXPECT_CONTAINS(m,
                  "config error: run.toml:2:1: train_dataset (files) and dataset (names) both say "
                  "what to train on; key 'train_dataset' is set at run.toml:1:1");
  m = yaml_error(yaml_head() + "dataset: identity\n" + yaml_model());
  EXPECT_CONTAINS(
      m, "run.yaml:3:1: train_dataset (files) and dataset (names) both say what to train on");
  m = toml_error(toml_model());
  EXPECT_CONTAINS(m, "config error: run.toml: missing required key 'train_dataset' (or 'dataset')");
  m = yaml_error("finetuning_type: full\n" + yaml_model());
  EXPECT_CONTAINS(m, "config error: run.yaml: missing required key 'train_dataset' (or 'dataset')");
  // dataset alone names entries of dataset_info.json; nothing is checked on disk here.
  const Config d = parse_yaml("dataset: identity\nfinetuning_type: full\n" + yaml_model());
  EXPECT_EQ(d.strings("dataset"), std::vector<std::string>{"identity"});
  EXPECT_FALSE(d.is_set("train_dataset"));
}

TEST(ConfigDataSources, EvalDatasetOrValSize) {
  const std::string m =
      yaml_error(yaml_head() + "eval_dataset: identity\nval_size: 0.1\n" + yaml_model());
  EXPECT_CONTAINS(m,
                  "config error: run.yaml:4:1: eval_dataset and val_size both say what to "
                  "evaluate on; key 'eval_dataset' is set at run.yaml:3:1");
  const Config zero =
      parse_yaml(yaml_head() + "eval_dataset: identity\nval_size: 0\n" + yaml_model());
  EXPECT_EQ(zero.strings("eval_dataset"), std::vector<std::string>{"identity"});
  EXPECT_DOUBLE_EQ(parse_yaml(yaml_head() + "val_size: 0.1\n" + yaml_model()).real("val_size"),
                   0.1);
}

TEST(ConfigYaml, LrSchedulerTypes) {
  for (const std::string& name : optim::lr_scheduler_names()) {
    const Config c = parse_yaml(yaml_head() + "lr_scheduler_type: " + name + "\n" + yaml_model());
    EXPECT_EQ(c.string("lr_scheduler_type"), name);
  }
  const Config c = parse_yaml(yaml_head() + "lr_scheduler_type: constant_with_warmup\n" +
                              "warmup_steps: 10\n" + yaml_model());
  EXPECT_EQ(c.string("lr_scheduler_type"), "constant_with_warmup");
  const std::string m = yaml_error(yaml_head() + "lr_scheduler_type: cosin\n" + yaml_model());
  EXPECT_CONTAINS(m,
                  "run.yaml:3:1: key 'lr_scheduler_type' = \"cosin\" is not allowed; allowed "
                  "values: \"linear\", \"cosine\", \"cosine_with_restarts\", \"polynomial\", "
                  "\"constant\", \"constant_with_warmup\", \"inverse_sqrt\", "
                  "\"cosine_with_min_lr\", \"cosine_warmup_with_min_lr\", "
                  "\"warmup_stable_decay\"; did you mean \"cosine\"?");
}

}  // namespace
}  // namespace lft::config
