// Config parsing: valid configs, getters, overrides, and the per-key errors (unknown key, type,
// range, allowed values, engines, syntax). Cross-key rules and paths: test_config_rules.cpp.
#include <gtest/gtest.h>

#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lft/config/config.h"
#include "lft/config/schema.h"
#include "test_util.h"

namespace lft::config {
namespace {

// An existing training data file (train_dataset must point at one).
const std::string& data_path() {
  static const std::string path = [] {
    std::string p = ::testing::TempDir() + "lft_test_config_data.jsonl";
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

// The ConfigError message parsing throws, or "" and a test failure.
std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return test::message_of<ConfigError>([&] { parse_config(text, "run.toml", overrides); });
}

TEST(Config, ValidMinimalWithModelTableAndDefaults) {
  const Config c = parse_config(data_line() + model_table(), "run.toml");
  EXPECT_EQ(c.string("distributed"), "none");
  EXPECT_EQ(c.string("output_dir"), "output");
  EXPECT_DOUBLE_EQ(c.real("learning_rate"), 5e-5);
  EXPECT_EQ(c.integer("per_device_train_batch_size"), 1);
  EXPECT_EQ(c.integer("max_steps"), -1);
  EXPECT_FALSE(c.boolean("bf16"));
  EXPECT_TRUE(c.boolean("dist_config.reshard_after_forward"));
  EXPECT_DOUBLE_EQ(c.real("comm_timeout"), 600);
  EXPECT_EQ(c.integer("model.vocab_size"), 128);
  EXPECT_EQ(c.integer("model.max_position_embeddings"), 2048);
  EXPECT_DOUBLE_EQ(c.real("model.rope_theta"), 10000);
  EXPECT_EQ(c.string("train_dataset"), data_path());
  EXPECT_TRUE(c.is_set("model.hidden_size"));
  EXPECT_FALSE(c.is_set("learning_rate"));
  EXPECT_FALSE(c.is_set("model.num_key_value_heads"));
  EXPECT_TRUE(c.has_table("model"));
  EXPECT_FALSE(c.has_table("mesh"));
  EXPECT_FALSE(c.has_table("mode"));
  EXPECT_EQ(c.where("model.hidden_size"), "run.toml:4:1: key 'model.hidden_size'");
  EXPECT_EQ(c.where("learning_rate"), "key 'learning_rate' (default)");
  EXPECT_EQ(c.where("mesh.tp"), "key 'mesh.tp' (unset)");
  ASSERT_NE(c.location("model.hidden_size"), nullptr);
  EXPECT_EQ(c.location("model.hidden_size")->line_text, "hidden_size = 64");
  EXPECT_EQ(c.location("learning_rate"), nullptr);
  EXPECT_EQ(c.source_name(), "run.toml");
  EXPECT_EQ(c.source_text(), data_line() + model_table());
}

TEST(Config, ValuesOfEveryTypeAndIntegerForFloat) {
  const Config c = parse_config(data_line() +
                                    "distributed = \"fsdp2\"\nlearning_rate = 1\nbf16 = true\n"
                                    "seed = 7\n[mesh]\ndp_shard = -1\ntp = 2\n"
                                    "[dist_config]\nmixed_precision = \"bf16\"\n" +
                                    model_table() + "num_key_value_heads = 2\n",
                                "run.toml");
  EXPECT_EQ(c.string("distributed"), "fsdp2");
  EXPECT_DOUBLE_EQ(c.real("learning_rate"), 1.0);
  EXPECT_TRUE(c.boolean("bf16"));
  EXPECT_EQ(c.integer("seed"), 7);
  EXPECT_EQ(c.integer("mesh.dp_shard"), -1);
  EXPECT_EQ(c.integer("mesh.tp"), 2);
  EXPECT_EQ(c.string("dist_config.mixed_precision"), "bf16");
  EXPECT_EQ(c.integer("model.num_key_value_heads"), 2);
  EXPECT_TRUE(c.has_table("mesh"));
  EXPECT_EQ(c.where("mesh.tp"), "run.toml:8:1: key 'mesh.tp'");
}

TEST(Config, GettersThrowLogicErrorOnMisuse) {
  const Config c = parse_config(data_line() + model_table(), "run.toml");
  EXPECT_THROW(c.real("no_such_key"), std::logic_error);
  EXPECT_THROW(c.integer("learning_rate"), std::logic_error);  // declared float
  EXPECT_THROW(c.string("bf16"), std::logic_error);
  EXPECT_THROW(c.integer("mesh.tp"), std::logic_error);  // no value, no default
  EXPECT_THROW(c.string("deepspeed"), std::logic_error);
  EXPECT_THROW(c.string("model_name_or_path"), std::logic_error);
}

TEST(Config, OverrideReplacesFileValue) {
  const Config c = parse_config(data_line() + "learning_rate = 1e-4\n" + model_table(), "run.toml",
                                {"seed=3", "learning_rate=3e-4"});
  EXPECT_DOUBLE_EQ(c.real("learning_rate"), 3e-4);
  EXPECT_EQ(c.integer("seed"), 3);
  const Location* loc = c.location("learning_rate");
  ASSERT_NE(loc, nullptr);
  EXPECT_EQ(loc->file, "<command line>");
  EXPECT_EQ(loc->line, 2);
  EXPECT_EQ(loc->line_text, "learning_rate=3e-4");
  EXPECT_EQ(loc->str(), "command-line argument 2 'learning_rate=3e-4'");
  EXPECT_EQ(c.where("learning_rate"),
            "command-line argument 2 'learning_rate=3e-4': key 'learning_rate'");
  EXPECT_EQ(c.overrides().size(), 2u);
}

TEST(Config, OverrideBareStringsTablesAndQuotes) {
  const Config c = parse_config(
      data_line() + model_table(), "run.toml",
      {"distributed=ddp", "output_dir=/tmp/x y", "mesh.tp=2", "bf16=true", "model.vocab_size=99",
       "lr_scheduler_type=cosine", "ddp_bucket_cap_mb=50", "seed = 5", "intra_op_threads=0x10"});
  EXPECT_EQ(c.string("distributed"), "ddp");
  EXPECT_EQ(c.string("output_dir"), "/tmp/x y");
  EXPECT_EQ(c.integer("mesh.tp"), 2);
  EXPECT_TRUE(c.boolean("bf16"));
  EXPECT_EQ(c.integer("model.vocab_size"), 99);
  EXPECT_EQ(c.string("lr_scheduler_type"), "cosine");
  EXPECT_DOUBLE_EQ(c.real("ddp_bucket_cap_mb"), 50);
  EXPECT_EQ(c.integer("seed"), 5);
  EXPECT_EQ(c.integer("intra_op_threads"), 16);
  // A string key keeps digits as text; quotes are TOML's.
  const Config d = parse_config(data_line() + model_table(), "run.toml",
                                {"output_dir=123", "distributed='ddp'"});
  EXPECT_EQ(d.string("output_dir"), "123");
  EXPECT_EQ(d.string("distributed"), "ddp");
  // An inline table on the command line is flattened.
  const Config e = parse_config(data_line() + model_table(), "run.toml", {"mesh={tp=2, pp=-1}"});
  EXPECT_EQ(e.integer("mesh.pp"), -1);
  EXPECT_EQ(e.integer("mesh.tp"), 2);
}

TEST(Config, OverrideErrorsNameTheArgument) {
  const std::string text = data_line() + model_table();
  std::string m = error_of(text, {"seed=1", "oops"});
  EXPECT_CONTAINS(m, "config error: command-line argument 2 'oops': expected key=value");
  m = error_of(text, {"=3"});
  EXPECT_CONTAINS(m, "command-line argument 1 '=3': no key before '='");
  m = error_of(text, {"learning_rat=1"});
  EXPECT_CONTAINS(m,
                  "config error: command-line argument 1 'learning_rat=1': unknown key "
                  "'learning_rat'; did you mean 'learning_rate'?");
  m = error_of(text, {"learning_rate=abc"});
  EXPECT_CONTAINS(m,
                  "command-line argument 1 'learning_rate=abc': key 'learning_rate' must be a "
                  "float, got string \"abc\"");
  m = error_of(text, {"mesh.tp=0"});
  EXPECT_CONTAINS(m,
                  "command-line argument 1 'mesh.tp=0': key 'mesh.tp' must be >= 1, or -1 to fill");
}

TEST(Config, UnknownKeySuggestsNearest) {
  const std::string m = error_of(data_line() + "learning_rat = 1e-4\n" + model_table());
  EXPECT_EQ(m.rfind("config error: run.toml:2:1: unknown key 'learning_rat'; did you mean "
                    "'learning_rate'?\n",
                    0),
            0u)
      << m;
  EXPECT_CONTAINS(m, "\n  2 | learning_rat = 1e-4\n");
  EXPECT_CONTAINS(m, "see `lftrain --help-config`");
}

TEST(Config, UnknownKeyInTablesAndWithoutSuggestion) {
  std::string m = error_of(data_line() + "[mesh]\ntpp = 2\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:3:1: unknown key 'mesh.tpp'; did you mean 'mesh.tp'?");
  m = error_of(data_line() + "  tp = 2\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:3: unknown key 'tp'; did you mean 'mesh.tp'?");
  m = error_of(data_line() + "mesh.tpp = 2\n" + model_table());  // dotted key: its start
  EXPECT_CONTAINS(m, "run.toml:2:1: unknown key 'mesh.tpp'; did you mean 'mesh.tp'?");
  m = error_of(data_line() + "mesh = { tp = 2, ppp = 1 }\n" + model_table());  // inline table
  EXPECT_CONTAINS(m, "run.toml:2:18: unknown key 'mesh.ppp'; did you mean 'mesh.pp'?");
  m = error_of(data_line() + "infer_backend = 4\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: unknown key 'infer_backend'\n");
  EXPECT_EQ(m.find("did you mean"), std::string::npos) << m;
  m = error_of(data_line() + "[mesj]\ntp = 2\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: unknown table [mesj]; did you mean [mesh]?");
  m = error_of(data_line() + "[trainer]\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: unknown table [trainer]");
}

TEST(Config, WrongType) {
  std::string m = error_of(data_line() + "learning_rate = \"abc\"\n" + model_table());
  EXPECT_CONTAINS(m,
                  "config error: run.toml:2:1: key 'learning_rate' must be a float, got "
                  "string \"abc\"");
  EXPECT_CONTAINS(m, "  2 | learning_rate = \"abc\"");
  EXPECT_CONTAINS(m, "hint: write e.g. learning_rate = 5e-05");
  m = error_of(data_line() + "seed = 1.5\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: key 'seed' must be an int, got float 1.5");
  m = error_of(data_line() + "bf16 = \"yes\"\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: key 'bf16' must be a bool, got string \"yes\"");
  m = error_of(data_line() + "output_dir = 5\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: key 'output_dir' must be a string, got int 5");
  m = error_of(data_line() + "seed = [1, 2]\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: key 'seed' must be an int, got array");
  m = error_of(data_line() + "seed = 2024-01-01\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: key 'seed' must be an int, got date/time");
  m = error_of(data_line() + "[seed]\nx = 1\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: key 'seed' must be an int, got table");
  m = error_of(data_line() + "mesh = 4\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: 'mesh' must be a table, got int 4");
  EXPECT_CONTAINS(m, "[mesh] header");
  m = error_of(data_line() + "[[model]]\nvocab_size = 1\n");
  EXPECT_CONTAINS(m, "run.toml:2:1: 'model' must be a table, got array");
}

TEST(Config, OutOfRange) {
  std::string m = error_of(data_line() + "adam_beta1 = 1.5\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: key 'adam_beta1' must be between 0 and 1, got 1.5");
  m = error_of(data_line() + "per_device_train_batch_size = 0\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: key 'per_device_train_batch_size' must be >= 1, got 0");
  m = error_of(data_line() + "learning_rate = -1e-4\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: key 'learning_rate' must be >= 0, got -0.0001");
  m = error_of(data_line() + "comm_timeout = 0\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: key 'comm_timeout' must be > 0, got 0.0");
  EXPECT_CONTAINS(m, "Seconds a collective may take");
  m = error_of(data_line() + "max_steps = -2\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: key 'max_steps' must be >= -1, got -2");
  m = error_of(data_line() + "comm_timeout = inf\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: key 'comm_timeout' must be a finite number, got inf");
  m = error_of(data_line() + "learning_rate = nan\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: key 'learning_rate' must be a finite number, got nan");
  m = error_of(data_line() + model_table(), {"model.vocab_size=0"});
  EXPECT_CONTAINS(m,
                  "command-line argument 1 'model.vocab_size=0': key 'model.vocab_size' must "
                  "be >= 1, got 0");
}

TEST(Config, NotInAllowedSetListsValues) {
  std::string m = error_of(data_line() + "lr_scheduler_type = \"cosin\"\n" + model_table());
  EXPECT_CONTAINS(m,
                  "run.toml:2:1: key 'lr_scheduler_type' = \"cosin\" is not allowed; allowed "
                  "values: \"linear\", \"cosine\", \"cosine_with_restarts\", \"polynomial\", "
                  "\"constant\", \"constant_with_warmup\", \"inverse_sqrt\", "
                  "\"cosine_with_min_lr\", \"cosine_warmup_with_min_lr\", "
                  "\"warmup_stable_decay\"; did you mean \"cosine\"?");
  m = error_of(data_line() + "distributed = \"horovod\"\n" + model_table());
  EXPECT_CONTAINS(m,
                  "allowed values: \"none\", \"ddp\", \"fsdp\", \"fsdp2\", \"deepspeed\", "
                  "\"megatron\"");
}

TEST(Config, RayExplainsMpiAndSlurm) {
  const std::string m = error_of(data_line() + "distributed = \"ray\"\n" + model_table());
  EXPECT_CONTAINS(m, "config error: run.toml:2:1: distributed = \"ray\" is not supported");
  EXPECT_CONTAINS(m, "MPI/Slurm");
  EXPECT_CONTAINS(m,
                  "launch with `srun` inside `sbatch slurm/multinode.sbatch`, or `mpirun -np N "
                  "--hostfile HOSTS build/lftrain run.toml`");
}

TEST(Config, KeyNotForEngine) {
  std::string m =
      error_of(data_line() + "distributed = \"ddp\"\ndeepspeed = \"ds.json\"\n" + model_table());
  EXPECT_CONTAINS(m,
                  "config error: run.toml:3:1: key 'deepspeed' applies only to distributed = "
                  "\"deepspeed\" (this run has distributed = \"ddp\")");
  m = error_of(data_line() + "[dist_config]\noffload_params = true\n" + model_table());
  EXPECT_CONTAINS(m,
                  "run.toml:3:1: key 'dist_config.offload_params' applies only to distributed "
                  "= \"fsdp2\" or \"megatron\" (this run has distributed = \"none\")");
  m = error_of(data_line() + "ddp_bucket_cap_mb = 10\n" + model_table(), {"distributed=fsdp"});
  EXPECT_CONTAINS(m,
                  "run.toml:2:1: key 'ddp_bucket_cap_mb' applies only to distributed = "
                  "\"ddp\" or \"megatron\" (this run has distributed = \"fsdp\")");
  // The same key is fine with its engine, and an empty table is fine with any engine.
  EXPECT_NO_THROW(
      parse_config(data_line() + "ddp_bucket_cap_mb = 10\n[dist_config]\n" + model_table(),
                   "run.toml", {"distributed=ddp"}));
}

TEST(Config, Fp8EnginesAndTheFloat8AllGather) {
  EXPECT_NO_THROW(parse_config(data_line() + "fp8 = true\n" + model_table(), "run.toml"));
  std::string m = error_of(data_line() + "distributed = \"fsdp\"\nfp8 = true\n" + model_table());
  EXPECT_CONTAINS(m, "fp8 = true applies to distributed = none, ddp, fsdp2 and megatron, not \"fsdp\"");
  EXPECT_NO_THROW(parse_config(data_line() + "distributed = \"fsdp2\"\nfp8 = true\n[dist_config]\n"
                               "fp8_enable_fsdp_float8_all_gather = true\n" + model_table(), "run.toml"));
  m = error_of(data_line() + "distributed = \"ddp\"\n[dist_config]\nfp8_enable_fsdp_float8_all_gather = true\n" +
               model_table());
  EXPECT_CONTAINS(m, "fp8_enable_fsdp_float8_all_gather");
}

TEST(Config, SyntaxError) {
  const std::string m = error_of(data_line() + "learning_rate = \n" + model_table());
  EXPECT_EQ(m.rfind("run.toml: TOML syntax error", 0), 0u) << m;
  EXPECT_CONTAINS(m, "learning_rate =");
  EXPECT_CONTAINS(m, " 2 | ");  // toml11's own location text
  const std::string dup = error_of(data_line() + "seed = 1\nseed = 2\n" + model_table());
  EXPECT_EQ(dup.rfind("run.toml: TOML syntax error", 0), 0u) << dup;
}

TEST(Config, FirstErrorBySourcePosition) {
  // The table is unordered inside toml11; the report must still be the first line.
  std::string m = error_of(data_line() + "zeta_key = 1\nalpha_key = 2\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:2:1: unknown key 'zeta_key'");
  m = error_of(data_line() + "[mesh]\ntp = 0\npp = 0\n" + model_table());
  EXPECT_CONTAINS(m, "run.toml:3:1: key 'mesh.tp'");
  // File errors come before command-line errors.
  m = error_of(data_line() + "seed = -1\n" + model_table(), {"learning_rat=1"});
  EXPECT_CONTAINS(m, "run.toml:2:1: key 'seed' must be >= 0");
  // Equal input, equal message.
  EXPECT_EQ(error_of(data_line() + "b_key = 1\na_key = 2\nc_key = 3\n" + model_table()),
            error_of(data_line() + "b_key = 1\na_key = 2\nc_key = 3\n" + model_table()));
}

}  // namespace
}  // namespace lft::config
