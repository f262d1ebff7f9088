// Config rules across keys (model source, contradictions, mesh, model shape), path checks, the
// schema helpers and the generated reference (help_text, reference_markdown).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "lft/config/config.h"
#include "lft/config/schema.h"
#include "test_util.h"

namespace lft::config {
namespace {

const std::string& data_path() {
  static const std::string path = [] {
    std::string p = ::testing::TempDir() + "lft_test_config_rules_data.jsonl";
    std::ofstream(p) << "{\"text\": \"hello\"}\n";
    return p;
  }();
  return path;
}

// One line.
std::string data_line() { return "train_dataset = \"" + data_path() + "\"\n"; }

// Six lines, "[model]" first.
std::string model_table() {
  return "[model]\nvocab_size = 128\nhidden_size = 64\nintermediate_size = 256\n"
         "num_hidden_layers = 2\nnum_attention_heads = 4\n";
}

std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return test::message_of<ConfigError>([&] { parse_config(text, "run.toml", overrides); });
}

// A fresh, empty temporary directory.
std::string temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / ("lft_test_config_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// batching_strategy = "dynamic_batching" needs max_steps, sequences (not dpo pairs) and no pipeline.
TEST(ConfigRules, DynamicBatchingRefusesWhatItCannotServe) {
  const std::string head = data_line() + "batching_strategy = \"dynamic_batching\"\n";
  EXPECT_NO_THROW(parse_config(head + "max_steps = 5\n" + model_table(), "run.toml"));
  std::string m = error_of(head + model_table());
  EXPECT_NE(m.find("run.toml:2:1: batching_strategy = \"dynamic_batching\" needs max_steps"), std::string::npos) << m;
  EXPECT_NE(m.find("needs max_steps"), std::string::npos) << m;
  m = error_of(head + "max_steps = 5\nstage = \"dpo\"\n" + model_table());
  EXPECT_NE(m.find("stage = \"dpo\" batches preference pairs"), std::string::npos) << m;
  m = error_of(head + "max_steps = 5\ndistributed = \"megatron\"\n" + model_table() + "[mesh]\npp = 2\n");
  EXPECT_NE(m.find("run.toml:12:1: batching_strategy = \"dynamic_batching\" gives micro-batches of varying shapes"),
            std::string::npos) << m;
  EXPECT_NE(m.find("key 'batching_strategy' is set at run.toml:2:1"), std::string::npos) << m;
}

TEST(EngineCapabilities, EveryEngineDeclaresItsAndTheRulesReadThem) {
  EXPECT_EQ(engine_names().size(), engine_capabilities().size());
  for (const std::string& name : engine_names()) EXPECT_EQ(capabilities_of(name).name, name);
  EXPECT_THROW(capabilities_of("zero"), std::logic_error);
  EXPECT_EQ(engines_with(&EngineCapabilities::float8), "none, ddp, fsdp2 and megatron");
  EXPECT_EQ(engines_with(&EngineCapabilities::deepspeed_config), "deepspeed");
  // The run plan reads a DeepSpeed file for the engine that declares one, whatever its name.
  EXPECT_TRUE(capabilities_of("deepspeed").deepspeed_config);
  EXPECT_FALSE(capabilities_of("fsdp").float8);
  const std::string m = error_of(data_line() + "distributed = \"fsdp\"\nfp8 = true\n" + model_table());
  EXPECT_NE(m.find("fp8 = true applies to distributed = " + engines_with(&EngineCapabilities::float8)),
            std::string::npos) << m;
}

TEST(ConfigRules, Bf16AndFp16Contradict) {
  const std::string m = error_of(data_line() + "bf16 = true\nfp16 = true\n" + model_table());
  EXPECT_CONTAINS(m,
                  "config error: run.toml:3:1: bf16 = true and fp16 = true contradict each "
                  "other; key 'bf16' is set at run.toml:2:1");
  EXPECT_CONTAINS(m, "\n  2 | bf16 = true\n  3 | fp16 = true\n");
  EXPECT_NO_THROW(parse_config(data_line() + "bf16 = true\nfp16 = false\n" + model_table(), "r"));
}

TEST(ConfigRules, WarmupRatioAndStepsContradict) {
  const std::string m =
      error_of(data_line() + "warmup_steps = 100\nseed = 1\nwarmup_ratio = 0.1\n" + model_table());
  EXPECT_CONTAINS(m,
                  "config error: run.toml:4:1: warmup_ratio = 0.1 and warmup_steps = 100 "
                  "contradict each other; key 'warmup_steps' is set at run.toml:2:1");
  EXPECT_CONTAINS(m, "set one of warmup_ratio and warmup_steps");
  // Zero is "not used": no contradiction.
  EXPECT_NO_THROW(
      parse_config(data_line() + "warmup_steps = 0\nwarmup_ratio = 0.1\n" + model_table(), "r"));
}

TEST(ConfigRules, MaxStepsAndEpochsContradict) {
  const std::string m =
      error_of(data_line() + "num_train_epochs = 2\n" + model_table(), {"max_steps=100"});
  EXPECT_CONTAINS(m,
                  "config error: command-line argument 1 'max_steps=100': max_steps = 100 and "
                  "num_train_epochs = 2.0 contradict each other; key 'num_train_epochs' is "
                  "set at run.toml:2:1");
  EXPECT_CONTAINS(m, "set one of max_steps and num_train_epochs");
  // max_steps = -1 means "use num_train_epochs".
  EXPECT_NO_THROW(
      parse_config(data_line() + "max_steps = -1\nnum_train_epochs = 2\n" + model_table(), "r"));
}

// max_steps = 0 trained num_train_epochs (3) epochs; in lftrain's files -1 says that, so 0 is an
// error. A LlamaFactory YAML keeps the Hugging Face Trainer's meaning (0: num_train_epochs).
TEST(ConfigRules, MaxStepsZeroIsRefusedOutsideLlamaFactoryYaml) {
  EXPECT_CONTAINS(error_of(data_line() + "max_steps = 0\n" + model_table()),
                  "config error: run.toml:2:1: max_steps = 0 would train no step");
  EXPECT_CONTAINS(error_of(data_line() + model_table(), {"max_steps=0"}), "max_steps = 0 would train no step");
  const Config yaml = parse_config("train_dataset: " + data_path() + "\nfinetuning_type: full\nmax_steps: 0\n"
                                   "model:\n  vocab_size: 128\n  hidden_size: 64\n  intermediate_size: 256\n"
                                   "  num_hidden_layers: 2\n  num_attention_heads: 4\n", "run.yaml");
  EXPECT_EQ(yaml.integer("max_steps"), 0);
}

TEST(ConfigRules, ModelTableAndModelFolderContradict) {
  const std::string m =
      error_of(data_line() + "model_name_or_path = \"/nonexistent/m\"\n" + model_table());
  EXPECT_CONTAINS(m,
                  "config error: run.toml:3:1: key 'model_name_or_path' and an inline [model] "
                  "table both give the model; key 'model_name_or_path' is set at run.toml:2:1");
  EXPECT_CONTAINS(m, "  3 | [model]");
}

TEST(ConfigRules, NeitherModelSource) {
  const std::string m = error_of(data_line() + "seed = 1\n");
  EXPECT_CONTAINS(m,
                  "config error: run.toml: no model: set model_name_or_path (a Hugging Face "
                  "model folder) or an inline [model] table");
}

TEST(ConfigRules, MissingRequiredKeys) {
  std::string m = error_of(data_line() +
                           "[model]\nvocab_size = 128\nhidden_size = 64\n"
                           "intermediate_size = 256\nnum_attention_heads = 4\n");
  EXPECT_CONTAINS(m,
                  "config error: run.toml:2:1: table [model] is missing required key "
                  "'model.num_hidden_layers'");
  EXPECT_CONTAINS(m, "add num_hidden_layers = <int> under [model]");
  m = error_of(data_line() + "[model]\n");
  EXPECT_CONTAINS(m, "run.toml:2:1: table [model] is missing required key 'model.vocab_size'");
  m = error_of(model_table());
  EXPECT_CONTAINS(m, "config error: run.toml: missing required key 'train_dataset' (or 'dataset')");
  m = error_of(data_line() + model_table(), {"distributed=deepspeed"});
  EXPECT_CONTAINS(m,
                  "config error: command-line argument 1 'distributed=deepspeed': distributed = "
                  "\"deepspeed\" needs key 'deepspeed'");
}

TEST(ConfigRules, HeadsMustDivide) {
  std::string m = error_of(data_line() +
                           "[model]\nvocab_size = 128\nhidden_size = 100\n"
                           "intermediate_size = 256\nnum_hidden_layers = 2\n"
                           "num_attention_heads = 3\n");
  EXPECT_CONTAINS(m,
                  "config error: run.toml:7:1: model.hidden_size = 100 is not divisible by "
                  "model.num_attention_heads = 3; key 'model.hidden_size' is set at "
                  "run.toml:4:1");
  m = error_of(data_line() + model_table() + "num_key_value_heads = 3\n");
  EXPECT_CONTAINS(m,
                  "config error: run.toml:8:1: model.num_attention_heads = 4 is not divisible "
                  "by model.num_key_value_heads = 3; key 'model.num_attention_heads' is set "
                  "at run.toml:7:1");
}

TEST(ConfigRules, MeshSizes) {
  std::string m = error_of(data_line() + "[mesh]\ndp_shard = -1\ntp = -1\n" + model_table());
  EXPECT_CONTAINS(m,
                  "config error: run.toml:4:1: keys 'mesh.dp_shard' and 'mesh.tp' are both -1, "
                  "but at most one mesh size may be -1 (fill); key 'mesh.dp_shard' is set at "
                  "run.toml:3:1");
  m = error_of(data_line() + "[mesh]\ntp = 0\n" + model_table());
  EXPECT_CONTAINS(m,
                  "config error: run.toml:3:1: key 'mesh.tp' must be >= 1, or -1 to fill, got 0");
  m = error_of(data_line() + "[mesh]\npp = -2\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:3:1: key 'mesh.pp' must be >= 1, or -1 to fill, got -2");
}

TEST(ConfigRules, MissingTrainDatasetFile) {
  const std::string m =
      error_of("train_dataset = \"/nonexistent/lft/data.jsonl\"\n" + model_table());
  EXPECT_CONTAINS(m,
                  "config error: run.toml:1:1: key 'train_dataset': file not found: "
                  "\"/nonexistent/lft/data.jsonl\"");
  const std::string dir = temp_dir("not_a_file");
  EXPECT_CONTAINS(error_of("train_dataset = \"" + dir + "\"\n" + model_table()),
                  "is a directory, not a file");
  // A symbolic link loop is there but cannot be followed: said so, not "not found" (issue 50).
  const std::string loop = dir + "/loop.jsonl";
  std::filesystem::remove(loop);
  std::filesystem::create_symlink(loop, loop);
  const std::string looped = error_of("train_dataset = \"" + loop + "\"\n" + model_table());
  EXPECT_CONTAINS(looped, "run.toml:1:1: key 'train_dataset': cannot reach \"" + loop + "\": ");
  EXPECT_CONTAINS(looped, "symbolic link");
}

TEST(ConfigRules, ModelFolderNeedsConfigJson) {
  const std::string dir = temp_dir("model");
  const std::string text = data_line() + "model_name_or_path = \"" + dir + "\"\n";
  std::string m = error_of(text);
  EXPECT_CONTAINS(m, "config error: run.toml:2:1: key 'model_name_or_path': model folder \"" + dir +
                         "\" has no config.json");
  EXPECT_CONTAINS(m, "Hugging Face model folder");
  std::ofstream(dir + "/config.json") << "{\"model_type\": \"llama\", ";
  EXPECT_CONTAINS(error_of(text), "config.json\" is not a JSON object");
  std::ofstream(dir + "/config.json") << "{\"model_type\": \"llama\"}";
  const Config c = parse_config(text, "run.toml");
  EXPECT_EQ(c.string("model_name_or_path"), dir);
  EXPECT_FALSE(c.has_table("model"));
  m = error_of(data_line() + "model_name_or_path = \"/nonexistent/lft/model\"\n");
  EXPECT_CONTAINS(m,
                  "run.toml:2:1: key 'model_name_or_path': model folder not found: "
                  "\"/nonexistent/lft/model\"");
}

TEST(ConfigRules, DeepspeedFileWithItsEngine) {
  const std::string dir = temp_dir("ds");
  std::ofstream(dir + "/ds.json") << "{}";
  const Config c = parse_config(data_line() + "distributed = \"deepspeed\"\ndeepspeed = \"" + dir +
                                    "/ds.json\"\n" + model_table(),
                                "run.toml");
  EXPECT_EQ(c.string("deepspeed"), dir + "/ds.json");
}

TEST(ConfigSchema, Helpers) {
  EXPECT_EQ(edit_distance("learning_rat", "learning_rate"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  ASSERT_NE(find_key("mesh.tp"), nullptr);
  EXPECT_EQ(find_key("mesh.tp")->type, ValueType::Int);
  EXPECT_EQ(find_key("nope"), nullptr);
  EXPECT_EQ(engine_names(),
            (std::vector<std::string>{"none", "ddp", "fsdp", "fsdp2", "deepspeed", "megatron"}));
  EXPECT_STREQ(type_name(ValueType::Float), "float");
  EXPECT_EQ(format_value(Value{true}), "true");
  EXPECT_EQ(format_value(Value{std::int64_t{-3}}), "-3");
  EXPECT_EQ(format_value(Value{600.0}), "600.0");
  EXPECT_EQ(format_value(Value{5e-5}), "5e-05");
  EXPECT_EQ(format_value(Value{0.999}), "0.999");
  EXPECT_EQ(format_value(Value{std::string("a\"b")}), "\"a\\\"b\"");
  Location loc{"run.toml", 12, 1, "x = 1"};
  EXPECT_EQ(loc.str(), "run.toml:12:1");
  Location arg{"<command line>", 3, 0, "lr=1"};
  EXPECT_EQ(arg.str(), "command-line argument 3 'lr=1'");
  // Every key is unique, typed defaults match, and the distributed values are the engines.
  std::set<std::string> seen;
  for (const KeySpec& spec : schema()) {
    EXPECT_TRUE(seen.insert(spec.path).second) << spec.path;
    EXPECT_FALSE(spec.help.empty()) << spec.path;
    if (spec.default_value) {
      EXPECT_EQ(spec.default_value->index(), static_cast<std::size_t>(spec.type)) << spec.path;
    }
  }
  EXPECT_EQ(find_key("distributed")->allowed, engine_names());
}

TEST(ConfigReference, HelpTextHasEveryKey) {
  const std::string text = help_text();
  for (const KeySpec& spec : schema()) EXPECT_CONTAINS(text, "\n  " + spec.path + " (");
  EXPECT_CONTAINS(text, "[mesh]");
  EXPECT_CONTAINS(text, "[model]");
  EXPECT_CONTAINS(text, "[dist_config]");
  EXPECT_CONTAINS(text, "learning_rate (float, default 5e-05, >= 0)");
  EXPECT_CONTAINS(text,
                  "distributed (string, default \"none\", one of: none, ddp, fsdp, fsdp2, "
                  "deepspeed, megatron)");
  EXPECT_CONTAINS(text,
                  "deepspeed (string, unset, an existing file, only with distributed = "
                  "\"deepspeed\")");
  EXPECT_CONTAINS(text, "model.vocab_size (int, required in table, >= 1)");
  EXPECT_EQ(text, help_text());
}

TEST(ConfigReference, MarkdownHasEveryKey) {
  const std::string md = reference_markdown();
  for (const KeySpec& spec : schema()) EXPECT_CONTAINS(md, "| `" + spec.path + "` |");
  EXPECT_CONTAINS(md, "lftrain --help-config --markdown");
  EXPECT_CONTAINS(md, "do not edit it by hand");
  EXPECT_CONTAINS(md, "lftrain run.toml key=value table.key=value");
  EXPECT_CONTAINS(md, "exit status 2");
  EXPECT_CONTAINS(md, "| key | type | default | allowed | engines | description |");
  EXPECT_CONTAINS(md, "## [mesh]");
  EXPECT_CONTAINS(md, "| `ddp_bucket_cap_mb` | float | `25.0` | > 0 | `ddp`, `megatron` |");
  EXPECT_EQ(md, reference_markdown());
}

}  // namespace
}  // namespace lft::config
