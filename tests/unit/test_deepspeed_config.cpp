// The DeepSpeed JSON reader: the example files in inputs/, "auto" filled from the TOML, explicit
// values that contradict it, unknown keys, malformed JSON, types and ranges, unsupported
// features, and the notes for keys accepted without effect.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "lft/config/config.h"
#include "lft/config/deepspeed.h"
#include "test_util.h"

namespace lft::config {
namespace {

// The source tree, found from this file: ctest runs the tests in the build directory.
std::string repo_root() {
  const std::string here = __FILE__;
  return here.substr(0, here.rfind('/')) + "/../..";
}

const std::string& temp_dir() {
  static const std::string dir = [] {
    std::string pattern = ::testing::TempDir() + "lft_test_deepspeed_XXXXXX";
    const char* made = mkdtemp(pattern.data());
    if (made == nullptr) ADD_FAILURE() << "mkdtemp failed for " << pattern;
    return pattern;
  }();
  return dir;
}

// Writes `json` to <temp>/ds.json and returns the path.
std::string write_json(const std::string& json) {
  const std::string path = temp_dir() + "/ds.json";
  std::ofstream(path) << json;
  return path;
}

// The TOML: lines 1-3 select the engine, the file and the data; `extra` starts at line 4.
Config toml(const std::string& ds_path, const std::string& extra = "") {
  return parse_config("distributed = \"deepspeed\"\ndeepspeed = \"" + ds_path +
                          "\"\ntrain_dataset = \"" + repo_root() +
                          "/inputs/data/arithmetic.txt\"\n" + extra +
                          "[model]\nvocab_size = 128\nhidden_size = 64\nintermediate_size = 256\n"
                          "num_hidden_layers = 2\nnum_attention_heads = 4\n",
                      "run.toml");
}

DeepSpeedConfig read(const std::string& json, const std::string& extra = "", int dp_size = 1) {
  return read_deepspeed_config(toml(write_json(json), extra), dp_size);
}

std::string error_of(const std::string& json, const std::string& extra = "", int dp_size = 1) {
  const Config cfg = toml(write_json(json), extra);
  return test::message_of<ConfigError>([&] { read_deepspeed_config(cfg, dp_size); });
}

bool has_note(const DeepSpeedConfig& ds, const std::string& text) {
  for (const std::string& note : ds.notes) {
    if (note.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(DeepSpeedConfig, ExampleFilesParse) {
  struct Expected {
    const char* file;
    int stage;
    bool offload_optimizer;
    bool offload_param;
  };
  const Expected cases[] = {{"ds_z0_config.json", 0, false, false},
                            {"ds_z2_config.json", 2, false, false},
                            {"ds_z2_offload_config.json", 2, true, false},
                            {"ds_z3_config.json", 3, false, false},
                            {"ds_z3_offload_config.json", 3, true, true}};
  for (const Expected& e : cases) {
    SCOPED_TRACE(e.file);
    const std::string path = repo_root() + "/inputs/" + e.file;
    const DeepSpeedConfig ds = read_deepspeed_config(toml(path, "bf16 = true\n"), 2);
    EXPECT_EQ(ds.path, path);
    EXPECT_EQ(ds.zero_stage, e.stage);
    EXPECT_EQ(ds.offload_optimizer, e.offload_optimizer);
    EXPECT_EQ(ds.offload_param, e.offload_param);
    EXPECT_EQ(ds.pin_memory, e.offload_optimizer);
    EXPECT_TRUE(ds.bf16);
    EXPECT_FALSE(ds.fp16);
    EXPECT_DOUBLE_EQ(ds.gradient_clipping, 1.0);
    EXPECT_EQ(ds.reduce_bucket_size, 500000000);  // 5e8, or "auto": the default
    EXPECT_EQ(ds.stage3_prefetch_bucket_size, 50000000);
    EXPECT_FALSE(ds.overlap_comm);
    EXPECT_TRUE(ds.reduce_scatter);
    EXPECT_TRUE(ds.contiguous_gradients);
    EXPECT_EQ(ds.loss_scale, 0.0);
    EXPECT_EQ(ds.loss_scale_window, 1000);
    EXPECT_EQ(ds.initial_scale_power, 16);
    EXPECT_EQ(ds.hysteresis, 2);
    EXPECT_EQ(ds.min_loss_scale, 1.0);
    EXPECT_TRUE(has_note(ds, "zero_allow_untested_optimizer = true has no effect"));
  }
}

TEST(DeepSpeedConfig, AutoValuesFilledFromToml) {
  const std::string json = R"({
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
    "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 12, "hysteresis": 3,
             "loss_scale_window": 500, "min_loss_scale": 0.5},
    "bf16": {"enabled": "auto"},
    "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto", "allgather_bucket_size": 2e8,
                          "overlap_comm": true, "reduce_scatter": false}
  })";
  const std::string extra =
      "per_device_train_batch_size = 4\ngradient_accumulation_steps = 2\nmax_grad_norm = 0.5\n"
      "fp16 = true\n";
  const DeepSpeedConfig ds = read(json, extra, 4);
  EXPECT_TRUE(ds.fp16);
  EXPECT_FALSE(ds.bf16);
  EXPECT_DOUBLE_EQ(ds.gradient_clipping, 0.5);
  EXPECT_EQ(ds.initial_scale_power, 12);
  EXPECT_EQ(ds.hysteresis, 3);
  EXPECT_EQ(ds.loss_scale_window, 500);
  EXPECT_DOUBLE_EQ(ds.min_loss_scale, 0.5);
  EXPECT_EQ(ds.reduce_bucket_size, 500000000);
  EXPECT_EQ(ds.allgather_bucket_size, 200000000);
  EXPECT_TRUE(ds.overlap_comm);
  EXPECT_FALSE(ds.reduce_scatter);
  // Bucket sizes and overlap are lftrain's own choice (one layer per call, always overlapped).
  for (const auto& note : ds.notes)
    EXPECT_TRUE(note.find("bucket_size") != std::string::npos ||
                note.find("overlap_comm") != std::string::npos ||
                note.find("reduce_scatter") != std::string::npos)
        << note;

  // Explicit values that agree with the TOML: 4 x 2 x 4 ranks = 32.
  const DeepSpeedConfig same = read(
      R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
          "gradient_accumulation_steps": 2, "gradient_clipping": 0.5, "fp16": {"enabled": true}})",
      extra, 4);
  EXPECT_TRUE(same.fp16);
  EXPECT_DOUBLE_EQ(same.gradient_clipping, 0.5);

  // No fp16/bf16 blocks: the TOML decides; an empty file is every default.
  const DeepSpeedConfig empty = read("{}", "bf16 = true\nmax_grad_norm = 0.0\n");
  EXPECT_TRUE(empty.bf16);
  EXPECT_EQ(empty.zero_stage, 0);
  EXPECT_DOUBLE_EQ(empty.gradient_clipping, 0.0);
}

TEST(DeepSpeedConfig, ExplicitValueContradictingTomlNamesBoth) {
  std::string m =
      error_of(R"({"train_micro_batch_size_per_gpu": 8})", "per_device_train_batch_size = 4\n");
  EXPECT_CONTAINS(m, "config error: " + temp_dir() +
                         "/ds.json: key 'train_micro_batch_size_per_gpu' = 8 contradicts "
                         "run.toml:4:1: key 'per_device_train_batch_size' = 4\n");
  EXPECT_CONTAINS(m, "  4 | per_device_train_batch_size = 4\n");
  EXPECT_CONTAINS(m, "hint: write \"auto\" for train_micro_batch_size_per_gpu");

  m = error_of(R"({"gradient_clipping": 0.3})");
  EXPECT_CONTAINS(m,
                  "ds.json: key 'gradient_clipping' = 0.3 contradicts key 'max_grad_norm' "
                  "(default) = 1.0");

  m = error_of(R"({"gradient_accumulation_steps": 3})", "gradient_accumulation_steps = 2\n");
  EXPECT_CONTAINS(m,
                  "key 'gradient_accumulation_steps' = 3 contradicts run.toml:4:1: key "
                  "'gradient_accumulation_steps' = 2");

  m = error_of(R"({"train_batch_size": 16})", "per_device_train_batch_size = 2\n", 3);
  EXPECT_CONTAINS(m,
                  "key 'train_batch_size' = 16 contradicts run.toml:4:1: key "
                  "'per_device_train_batch_size' = 2 times key 'gradient_accumulation_steps' "
                  "(default) = 1 times 3 data-parallel ranks = 6");

  m = error_of(R"({"bf16": {"enabled": false}})", "bf16 = true\n");
  EXPECT_CONTAINS(m, "key 'bf16.enabled' = false contradicts run.toml:4:1: key 'bf16' = true");

  m = error_of(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})");
  EXPECT_CONTAINS(m, "keys 'fp16.enabled' and 'bf16.enabled' are both true");
}

TEST(DeepSpeedConfig, UnknownKeyWithNearest) {
  std::string m = error_of(R"({"gradient_clipping": "auto", "gradient_cliping": 1.0})");
  EXPECT_CONTAINS(m,
                  "ds.json: unknown key 'gradient_cliping'; did you mean 'gradient_clipping'?\n"
                  "  hint: remove it");
  m = error_of(R"({"stage": 2})");
  EXPECT_CONTAINS(m, "unknown key 'stage'; did you mean 'zero_optimization.stage'?");
  m = error_of(R"({"steps_per_print": 10})");
  EXPECT_CONTAINS(m, "unknown key 'steps_per_print'\n");
}

TEST(DeepSpeedConfig, NestedUnknownKey) {
  std::string m = error_of(R"({"zero_optimization": {"stage": 3, "stage3_prefetch_bucket": 1}})");
  EXPECT_CONTAINS(m,
                  "unknown key 'zero_optimization.stage3_prefetch_bucket'; did you mean "
                  "'zero_optimization.stage3_prefetch_bucket_size'?");
  m = error_of(R"({"zero_optimization": {"stage": 3,
                   "offload_param": {"device": "cpu", "buffer_count": 4}}})");
  EXPECT_CONTAINS(m, "unknown key 'zero_optimization.offload_param.buffer_count'");
  m = error_of(R"({"fp16": {"enabled": "auto", "auto_cast": false}})");
  EXPECT_CONTAINS(m, "unknown key 'fp16.auto_cast'");
}

TEST(DeepSpeedConfig, MalformedJsonNamesLineAndColumn) {
  std::string m = error_of("{\n  \"train_batch_size\": \"auto\",\n  \"b\": ,\n}\n");
  EXPECT_CONTAINS(m, "config error: " + temp_dir() + "/ds.json:3:8: malformed JSON: ");
  EXPECT_CONTAINS(m, "unexpected ','");
  EXPECT_CONTAINS(m, "\n  3 |   \"b\": ,\n  hint: a DeepSpeed config is strict JSON");

  m = error_of("{\n  \"zero_optimization\": {\"stage\": 2},\n}\n");  // trailing comma
  EXPECT_CONTAINS(m, "/ds.json:3:1: malformed JSON: ");

  m = error_of("{\"zero_optimization\": {\"stage\": 2, \"stage\": 3}}");
  EXPECT_CONTAINS(m, "ds.json: key 'zero_optimization.stage' is given twice");

  m = error_of("[1, 2]");
  EXPECT_CONTAINS(m, "ds.json: the DeepSpeed config must be a JSON object, got array");
}

TEST(DeepSpeedConfig, StageOutOfRange) {
  std::string m = error_of(R"({"zero_optimization": {"stage": 4}})");
  EXPECT_CONTAINS(m, "ds.json: key 'zero_optimization.stage' must be between 0 and 3, got 4\n");
  EXPECT_CONTAINS(m, "hint: ZeRO stages: 0 (no sharding)");
  m = error_of(R"({"zero_optimization": {"stage": -1}})");
  EXPECT_CONTAINS(m, "key 'zero_optimization.stage' must be between 0 and 3, got -1");
  m = error_of(R"({"fp16": {"hysteresis": 0}})");
  EXPECT_CONTAINS(m, "key 'fp16.hysteresis' must be between 1 and 2147483647, got 0");
  m = error_of(R"({"fp16": {"min_loss_scale": 0}})");
  EXPECT_CONTAINS(m, "key 'fp16.min_loss_scale' must be > 0, got 0");
}

TEST(DeepSpeedConfig, WrongTypes) {
  std::string m = error_of(R"({"zero_optimization": {"stage": "2"}})");
  EXPECT_CONTAINS(m,
                  "key 'zero_optimization.stage' must be an integer, got string \"2\"\n"
                  "  hint: write e.g. \"stage\": 2");
  m = error_of(R"({"zero_optimization": {"stage": 2.5}})");
  EXPECT_CONTAINS(m, "key 'zero_optimization.stage' must be an integer, got number 2.5");
  m = error_of(R"({"zero_optimization": {"overlap_comm": "true"}})");
  EXPECT_CONTAINS(m,
                  "key 'zero_optimization.overlap_comm' must be true or false, got string "
                  "\"true\"");
  m = error_of(R"({"zero_optimization": {"stage": "auto"}})");
  EXPECT_CONTAINS(m, "key 'zero_optimization.stage' does not take \"auto\"");
  m = error_of(R"({"fp16": true})");
  EXPECT_CONTAINS(m, "key 'fp16' must be a JSON object, got boolean true");
  m = error_of(R"({"train_batch_size": null})");
  EXPECT_CONTAINS(m, "key 'train_batch_size' must be an integer or \"auto\", got null");
  m = error_of(R"({"zero_optimization": {"offload_optimizer": {"device": "gpu"}, "stage": 2}})");
  EXPECT_CONTAINS(m,
                  "key 'zero_optimization.offload_optimizer.device' = \"gpu\" is not allowed; "
                  "allowed values: \"none\", \"cpu\"; did you mean \"cpu\"?");

  // Integral floats are integers (5e8); the bucket sizes take "auto" (the default).
  const DeepSpeedConfig ds = read(
      R"({"zero_optimization": {"stage": 3.0, "reduce_bucket_size": 2e8,
          "stage3_prefetch_bucket_size": "auto"}})");
  EXPECT_EQ(ds.zero_stage, 3);
  EXPECT_EQ(ds.reduce_bucket_size, 200000000);
  EXPECT_EQ(ds.stage3_prefetch_bucket_size, 50000000);
}

TEST(DeepSpeedConfig, OffloadRules) {
  std::string m =
      error_of(R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})");
  EXPECT_CONTAINS(m,
                  "key 'zero_optimization.offload_param.device' = \"cpu\" applies to ZeRO stage "
                  "3 only; this file has zero_optimization.stage = 2");
  m = error_of(R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})");
  EXPECT_CONTAINS(m,
                  "key 'zero_optimization.offload_optimizer.device' = \"cpu\" applies to ZeRO "
                  "stage 1, 2 or 3 only; this file has zero_optimization.stage = 0");
  m = error_of(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})");
  EXPECT_CONTAINS(m, "offload to NVMe is not implemented in this build");

  const DeepSpeedConfig ds = read(
      R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "none", "pin_memory": true},
          "offload_optimizer": {"device": "cpu"}}})");
  EXPECT_TRUE(ds.offload_optimizer);
  EXPECT_FALSE(ds.offload_param);
  EXPECT_FALSE(ds.pin_memory);
  EXPECT_TRUE(has_note(ds, "zero_optimization.offload_param.pin_memory = true has no effect"));
}

TEST(DeepSpeedConfig, AutoTpPointsAtMegatron) {
  const std::string m = error_of(
      R"({"_comment": "AutoTP", "zero_optimization": {"stage": 2},
          "tensor_parallel": {"autotp_size": 2}})");
  EXPECT_CONTAINS(m,
                  "ds.json: key 'tensor_parallel.autotp_size' = 2: DeepSpeed AutoTP is not "
                  "implemented in lftrain\n");
  EXPECT_CONTAINS(m, "set distributed = \"megatron\" with [mesh] tp = 2 in the TOML");
}

TEST(DeepSpeedConfig, Fp8OptimizerAndSchedulerRejected) {
  std::string m = error_of(
      R"({"zero_force_ds_cpu_optimizer": true, "fp8": {"enabled": true, "hysteresis": 2}})");
  EXPECT_CONTAINS(m,
                  "ds.json: key 'fp8' asks for FP8 training, which is not implemented in this "
                  "build");
  m = error_of(R"({"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})");
  EXPECT_CONTAINS(m, "key 'optimizer': lftrain's optimizer is its AdamW, set in the TOML");
  EXPECT_CONTAINS(m, "learning_rate");
  m = error_of(R"({"scheduler": {"type": "WarmupLR"}})");
  EXPECT_CONTAINS(m, "lr_scheduler_type");
}

TEST(DeepSpeedConfig, NotesNameKeysAcceptedWithoutEffect) {
  const std::string path = repo_root() + "/inputs/ds_z3_config.json";
  const DeepSpeedConfig ds = read_deepspeed_config(toml(path, "bf16 = true\n"), 1);
  EXPECT_TRUE(has_note(ds, "deepspeed " + path +
                               ": zero_allow_untested_optimizer = true has no effect in lftrain: "
                               "lftrain's optimizer is its own AdamW"));
  for (const char* key :
       {"zero_optimization.contiguous_gradients", "zero_optimization.sub_group_size",
        "zero_optimization.stage3_param_persistence_threshold",
        "zero_optimization.stage3_max_live_parameters",
        "zero_optimization.stage3_max_reuse_distance", "zero_optimization.overlap_comm"}) {
    EXPECT_TRUE(has_note(ds, std::string(": ") + key + " = ")) << key;
  }
  EXPECT_TRUE(has_note(ds,
                       "zero_optimization.stage3_gather_16bit_weights_on_model_save = true has "
                       "no effect in lftrain: lftrain checkpoints are sharded HDF5 that lfmerge "
                       "exports"));
  EXPECT_TRUE(has_note(ds,
                       ": the fp16 loss-scaling keys have no effect in lftrain: this run does not "
                       "train in fp16"));
  EXPECT_FALSE(has_note(ds, "fp16.loss_scale_window")) << "one note for the fp16 block";
  EXPECT_FALSE(has_note(ds, "zero_optimization.stage = "));
  EXPECT_FALSE(has_note(ds, "bf16.enabled"));

  // The ZeRO-2 file: round_robin_gradients and allgather_partitions; in an fp16 run the loss
  // scaling keys take effect.
  const DeepSpeedConfig z2 =
      read_deepspeed_config(toml(repo_root() + "/inputs/ds_z2_config.json", "fp16 = true\n"), 1);
  EXPECT_TRUE(has_note(z2, "zero_optimization.round_robin_gradients = true has no effect"));
  EXPECT_TRUE(has_note(z2, "zero_optimization.allgather_partitions = true has no effect"));
  EXPECT_FALSE(has_note(z2, "fp16."));
}

}  // namespace
}  // namespace lft::config
