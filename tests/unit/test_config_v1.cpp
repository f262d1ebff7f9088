// LlamaFactory v1's config files (and the guide's): told apart from the classic trainer's by their
// keys, mapped onto lftrain's with v1's defaults, noted or refused with why.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "lft/config/config.h"
#include "lft/config/schema.h"
#include "test_util.h"

namespace lft::config {
namespace {

std::string repo_root() {
  const std::string here = __FILE__;  // <root>/tests/unit/test_config_v1.cpp
  return here.substr(0, here.rfind('/')) + "/../..";
}

const std::string& data_path() {
  static const std::string path = [] {
    std::string p = ::testing::TempDir() + "lft_test_config_v1_data.yaml";
    std::ofstream(p) << "identity:\n  path: x.json\n  source: local\n  converter: alpaca\n";
    return p;
  }();
  return path;
}

std::string v1_head() {
  return "model: " + repo_root() + "/tests/fixtures/qwen3-tiny\ntrain_dataset: " + data_path() + "\n";
}

Config parse_yaml(const std::string& text) { return parse_config(text, "job.yaml"); }
std::string yaml_error(const std::string& text) {
  return test::message_of<ConfigError>([&] { parse_config(text, "job.yaml"); });
}
bool noted(const Config& c, const std::string& part) {
  for (const std::string& n : c.notes())
    if (n.find(part) != std::string::npos) return true;
  return false;
}

TEST(ConfigV1, DefaultsAreV1s) {
  const Config c = parse_yaml(v1_head());
  EXPECT_EQ(c.format().rfind("a LlamaFactory v1 YAML (key 'model' at job.yaml:1:1)", 0), 0u) << c.format();
  EXPECT_EQ(c.string("model_name_or_path"), repo_root() + "/tests/fixtures/qwen3-tiny");
  EXPECT_EQ(c.string("stage"), "sft");
  EXPECT_EQ(c.string("template"), "model");  // main's: the model's own chat template
  EXPECT_EQ(parse_yaml(v1_head() + "template: qwen3_nothink\n").string("template"), "qwen3_nothink");  // 0.9.5's
  EXPECT_EQ(c.string("finetuning_type"), "full");
  EXPECT_EQ(c.string("distributed"), "ddp");
  EXPECT_EQ(c.string("lr_scheduler_type"), "constant");
  EXPECT_DOUBLE_EQ(c.real("learning_rate"), 1e-4);
  EXPECT_DOUBLE_EQ(c.real("weight_decay"), 0.01);
  EXPECT_TRUE(c.boolean("decay_all_parameters"));
  EXPECT_TRUE(c.boolean("gradient_checkpointing"));
  EXPECT_EQ(c.string("sample_order"), "per_rank");
  EXPECT_EQ(c.integer("logging_steps"), 1);
  EXPECT_FALSE(c.boolean("bf16"));  // no dist_config: v1 trains in fp32
  EXPECT_FALSE(c.is_set("resume_from_checkpoint"));  // v1 does not resume unless asked
}

TEST(ConfigV1, PeftAndDistConfigMapOntoLftrainsKeys) {
  const Config c = parse_yaml(v1_head() +
                              "peft_config:\n  name: lora\n  r: 16\n  lora_alpha: 32\n  target_modules: [q_proj, v_proj]\n"
                              "dist_config:\n  name: fsdp2\n  dcp_path: null\n  reshard_after_forward: false\n  timeout: 90\n"
                              "micro_batch_size: 2\nglobal_batch_size: 8\n");
  EXPECT_EQ(c.string("finetuning_type"), "lora");
  EXPECT_EQ(c.integer("lora_rank"), 16);
  EXPECT_EQ(c.integer("lora_alpha"), 32);
  EXPECT_DOUBLE_EQ(c.real("lora_dropout"), 0.05);  // v1's default
  EXPECT_EQ(c.strings("lora_target"), (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(c.string("distributed"), "fsdp2");
  EXPECT_FALSE(c.boolean("dist_config.reshard_after_forward"));
  EXPECT_DOUBLE_EQ(c.real("comm_timeout"), 90.0);
  EXPECT_TRUE(c.boolean("bf16"));  // v1's default, through FSDP2's mixed precision
  EXPECT_EQ(c.string("dist_config.mixed_precision"), "bf16");
  EXPECT_EQ(c.integer("per_device_train_batch_size"), 2);
  EXPECT_EQ(c.integer("global_batch_size"), 8);
  EXPECT_EQ(c.with_global_batch(2).integer("gradient_accumulation_steps"), 2);
  EXPECT_NE(test::message_of<ConfigError>([&] { (void)c.with_global_batch(3); }).find("not a multiple"), std::string::npos);
}

TEST(ConfigV1, LoraDefaultsAreV1s) {
  const Config c = parse_yaml(v1_head() + "peft_config:\n  name: lora\n");
  EXPECT_EQ(c.integer("lora_rank"), 8);
  EXPECT_EQ(c.integer("lora_alpha"), 16);
  EXPECT_DOUBLE_EQ(c.real("lora_dropout"), 0.05);
  EXPECT_EQ(c.string("lora_target"), "all");
}

TEST(ConfigV1, FreezeAndBf16Off) {
  const Config c = parse_yaml(v1_head() + "peft_config:\n  name: freeze\n  freeze_trainable_layers: 1\n"
                                          "dist_config:\n  name: fsdp2\nbf16: false\n");
  EXPECT_EQ(c.string("finetuning_type"), "freeze");
  EXPECT_EQ(c.integer("freeze_trainable_layers"), 1);
  EXPECT_FALSE(c.boolean("bf16"));
  EXPECT_EQ(c.string("dist_config.mixed_precision"), "fp32");
}

TEST(ConfigV1, TheGuidesFsdp2FileTurnsBf16OnAndTrainsTheFullModel) {
  const Config c = parse_yaml("model_name_or_path: " + repo_root() + "/tests/fixtures/qwen3-tiny\ndistributed: fsdp2\n"
                              "dist_config:\n  mixed_precision: bf16\n  offload_params: false\n  reshard_after_forward: true\n  pin_memory: true\n"
                              "train_dataset: " + data_path() + "\noutput_dir: out\n");
  EXPECT_EQ(c.format().rfind("a LlamaFactory v1 YAML (train_dataset without", 0), 0u) << c.format();
  EXPECT_TRUE(c.boolean("bf16"));
  EXPECT_EQ(c.string("finetuning_type"), "full");
  EXPECT_EQ(c.string("template"), "model");
  EXPECT_TRUE(noted(c, "pin_memory = true: no effect without offload_params: true"));
}

TEST(ConfigV1, ContextParallelKeysAreLftrainsMesh) {
  const Config c = parse_yaml(v1_head() + "dist_config:\n  name: fsdp2\n  cp_mode: ulysses\n  cp_size: 2\n");
  EXPECT_EQ(c.integer("mesh.cp"), 2);
  EXPECT_EQ(c.string("dist_config.cp_mode"), "ulysses");
  EXPECT_NE(yaml_error(v1_head() + "dist_config:\n  name: fsdp2\n  cp_mode: zigzag\n  cp_size: 2\n").find("cp_mode"),
            std::string::npos);
}

// v1's fsdpturbo (FSDP2 with FSDPTurbo's expert parallelism) is fsdp2 with [mesh] ep; its eager
// dispatcher is lftrain's all-to-all, another is refused, as are its module patterns.
TEST(ConfigV1, FsdpturboIsFsdp2WithExpertParallelism) {
  const Config c = parse_yaml(v1_head() + "dist_config:\n  name: fsdpturbo\n  ep_size: 2\n  ep_dispatcher: eager\n");
  EXPECT_EQ(c.string("distributed"), "fsdp2");
  EXPECT_EQ(c.integer("mesh.ep"), 2);
  EXPECT_TRUE(c.boolean("bf16"));
  EXPECT_TRUE(noted(c, "ep_dispatcher = \"eager\": lftrain's all-to-all of the routed rows, dropless"));
  EXPECT_EQ(parse_yaml(v1_head() + "dist_config:\n  name: fsdpturbo\nep_size: 4\n").integer("mesh.ep"), 4);
  EXPECT_CONTAINS(yaml_error(v1_head() + "dist_config:\n  name: fsdpturbo\n  ep_size: 2\n  ep_dispatcher: moonep\n"),
                  "ep_dispatcher = \"moonep\": lftrain's expert parallelism exchanges");
  EXPECT_CONTAINS(yaml_error(v1_head() + "dist_config:\n  name: fsdpturbo\n  ep_size: 2\n  ep_modules: [x]\n"),
                  "dist_config.ep_modules");
}

// LlamaFactory main (#10641) reads the topology keys at the top level; 0.9.5 inside dist_config.
TEST(ConfigV1, TopologyKeysAtTheTopLevelAsMainReadsThem) {
  const Config c = parse_yaml(v1_head() + "dist_config:\n  name: fsdp2\ncp_mode: ring\ncp_size: 2\ndist_timeout: 120\n");
  EXPECT_EQ(c.integer("mesh.cp"), 2);
  EXPECT_EQ(c.string("dist_config.cp_mode"), "ring");
  EXPECT_DOUBLE_EQ(c.real("comm_timeout"), 120.0);
  const Config m = parse_yaml(v1_head() + "dist_config:\n  name: fsdp2\nmp_replicate_size: 2\nmp_shard_size: 2\n");
  EXPECT_EQ(m.integer("mesh.dp_replicate"), 2);
  EXPECT_EQ(m.integer("mesh.dp_shard"), 2);
  EXPECT_EQ(parse_yaml(v1_head() + "dist_config:\n  name: fsdp2\ndp_size: 2\n").integer("mesh.dp_shard"), 2);
  // Both places alike: one value; unlike: an error naming both lines.
  EXPECT_EQ(parse_yaml(v1_head() + "dist_config:\n  name: fsdp2\n  cp_size: 2\ncp_size: 2\n").integer("mesh.cp"), 2);
  const std::string m2 = yaml_error(v1_head() + "dist_config:\n  name: fsdp2\n  cp_size: 4\ncp_size: 2\n");
  EXPECT_CONTAINS(m2, "job.yaml:6:1");
  EXPECT_CONTAINS(m2, "5 |   cp_size: 4");
  EXPECT_CONTAINS(m2, "'cp_size' and 'dist_config.cp_size' both set dist_config.cp_size");
}

// One rule for a key given through two names: the file's two values must agree (else both places
// are named); a command-line override wins over the file whichever name either uses.
TEST(ConfigV1, AKeyUnderTwoNamesAgreesOrTheCommandLineWins) {
  const std::string file = v1_head() + "dist_config:\n  name: fsdp2\n  timeout: 7\n  cp_size: 2\nmicro_batch_size: 2\n";
  const std::string both = yaml_error(file + "comm_timeout: 900\n");
  EXPECT_CONTAINS(both, "'dist_config.timeout' and 'comm_timeout' both set comm_timeout");
  EXPECT_CONTAINS(both, "job.yaml:5:3");
  EXPECT_CONTAINS(both, "8 | comm_timeout: 900");
  const Config c = parse_config(file, "job.yaml", {"comm_timeout=900", "mesh.cp=1", "per_device_train_batch_size=4"});
  EXPECT_DOUBLE_EQ(c.real("comm_timeout"), 900.0);
  EXPECT_EQ(c.integer("mesh.cp"), 1);
  EXPECT_EQ(c.integer("per_device_train_batch_size"), 4);
  // v1's own name on the command line over lftrain's in the file.
  const Config d = parse_config(v1_head() + "comm_timeout: 900\ndist_config:\n  name: fsdp2\n", "job.yaml",
                                {"dist_config.timeout=30"});
  EXPECT_DOUBLE_EQ(d.real("comm_timeout"), 30.0);
}

// Every key that reaches lftrain under two names (v1's, main's top-level topology keys, and
// lftrain's own): a command-line override with lftrain's name replaces the file's v1 value, and
// the file giving both names two values is an error naming both (issue 50's one rule, walked).
TEST(ConfigV1, EveryAliasPairFollowsTheOneRule) {
  struct Alias {
    std::string v1_lines;  // the file's lines that set the key under v1's name, to value A
    std::string key;       // lftrain's name
    std::string b;         // another value, as a command-line override writes it
    std::string extra;     // lines the v1 key needs beside it
  };
  const std::string lora = "peft_config:\n  name: lora\n";
  const std::string freeze = "peft_config:\n  name: freeze\n";
  const std::string fsdp2 = "dist_config:\n  name: fsdp2\n";
  const std::vector<Alias> aliases = {
      {"micro_batch_size: 2\n", "per_device_train_batch_size", "4", ""},
      {"enable_activation_checkpointing: true\n", "gradient_checkpointing", "false", ""},
      {"  r: 8\n", "lora_rank", "16", lora},
      {"  lora_alpha: 16\n", "lora_alpha", "32", lora},
      {"  lora_dropout: 0.0\n", "lora_dropout", "0.1", lora},
      {"  target_modules: all\n", "lora_target", "q_proj", lora},
      {"  use_rslora: false\n", "use_rslora", "true", lora},
      {"  use_dora: false\n", "use_dora", "true", lora},
      {"  modules_to_save: lm_head\n", "additional_target", "embed_tokens", lora},
      {"  freeze_trainable_layers: 1\n", "freeze_trainable_layers", "2", freeze},
      {"  freeze_trainable_modules: all\n", "freeze_trainable_modules", "mlp", freeze},
      {"  freeze_extra_modules: lm_head\n", "freeze_extra_modules", "embed_tokens", freeze},
      {"  timeout: 7\n", "comm_timeout", "900", fsdp2},
      {"  cp_size: 2\n", "mesh.cp", "1", fsdp2},
      {"  mp_replicate_size: 2\n", "mesh.dp_replicate", "1", fsdp2},
      {"  mp_shard_size: 2\n", "mesh.dp_shard", "1", fsdp2},
      {"cp_size: 2\n", "mesh.cp", "1", fsdp2},
      {"dist_timeout: 7\n", "comm_timeout", "900", fsdp2},
      {"cp_mode: ring\n", "dist_config.cp_mode", "ulysses", fsdp2},
  };
  // A key's value as text, whatever its type.
  const auto shown = [](const Config& c, const std::string& key) {
    switch (find_key(key)->type) {
      case ValueType::Int: return std::to_string(c.integer(key));
      case ValueType::Float: return std::to_string(c.real(key));
      case ValueType::Bool: return std::string(c.boolean(key) ? "true" : "false");
      default: return c.string(key);
    }
  };
  for (const Alias& a : aliases) {
    SCOPED_TRACE(a.v1_lines + " ~ " + a.key);
    const std::string file = v1_head() + a.extra + a.v1_lines;
    // The command line's value wins over the file's v1 value, under lftrain's name.
    const Config overridden = parse_config(file, "job.yaml", {a.key + "=" + a.b});
    const Config plain = parse_config(v1_head() + a.extra, "job.yaml", {a.key + "=" + a.b});
    EXPECT_EQ(shown(overridden, a.key), shown(plain, a.key));
    EXPECT_NE(shown(parse_config(file, "job.yaml"), a.key), shown(plain, a.key));  // the file's own value differs
    // Both names in the file, two values: an error that names lftrain's key (or the mix of v1's
    // and the classic trainer's keys, for a classic-only name).
    const std::size_t dot = a.key.find('.');
    if (dot != std::string::npos && a.extra.find(a.key.substr(0, dot) + ":") != std::string::npos) continue;
    const std::string own = dot == std::string::npos ? a.key + ": " + a.b + "\n"
                                                     : a.key.substr(0, dot) + ":\n  " + a.key.substr(dot + 1) + ": " + a.b + "\n";
    const std::string both = yaml_error(file + own);
    EXPECT_TRUE(both.find("both set " + a.key) != std::string::npos || both.find("mixes") != std::string::npos) << both;
  }
}

// batching_strategy: dynamic_batching is lftrain's key of the same name; as v1, it needs max_steps.
TEST(ConfigV1, DynamicBatchingIsTheSameKeyAndNeedsMaxSteps) {
  const Config c = parse_yaml(v1_head() + "batching_strategy: dynamic_batching\nmax_steps: 10\n");
  EXPECT_EQ(c.string("batching_strategy"), "dynamic_batching");
  const std::string m = yaml_error(v1_head() + "batching_strategy: dynamic_batching\n");
  EXPECT_NE(m.find("job.yaml:3:1: batching_strategy = \"dynamic_batching\" needs max_steps"), std::string::npos) << m;
}

TEST(ConfigV1, QuantConfigIsTheClassicQuantizationKeys) {
  const Config c = parse_yaml(v1_head() + "peft_config:\n  name: lora\nquant_config:\n  name: bnb\n  quantization_bit: 4\n"
                                          "  quantization_type: fp4\n  double_quantization: false\n  compute_dtype: float32\n");
  EXPECT_EQ(c.integer("quantization_bit"), 4);
  EXPECT_EQ(c.string("quantization_type"), "fp4");
  EXPECT_FALSE(c.boolean("double_quantization"));
  EXPECT_NE(yaml_error(v1_head() + "peft_config:\n  name: lora\nquant_config:\n  name: hqq\n").find("bitsandbytes"),
            std::string::npos);
  const std::string int8 = yaml_error(v1_head() + "peft_config:\n  name: lora\nquant_config:\n  quantization_bit: 8\n");
  EXPECT_NE(int8.find("LLM.int8"), std::string::npos) << int8;
  const std::string full = yaml_error(v1_head() + "quant_config:\n  quantization_bit: 4\n");
  EXPECT_NE(full.find("applies to finetuning_type = \"lora\""), std::string::npos) << full;
}

// LlamaFactory main's optim_config muon: its keys and its defaults (wd 0.1, betas 0.9 / 0.95, LoRA's
// factors to AdamW); other optimizer names are refused.
TEST(ConfigV1, OptimConfigMuonIsUseMuonWithV1sDefaults) {
  const Config d = parse_yaml(v1_head() + "optim_config:\n  name: muon\n");
  EXPECT_TRUE(d.boolean("use_muon"));
  EXPECT_FALSE(d.boolean("muon_adapters"));
  EXPECT_DOUBLE_EQ(d.real("weight_decay"), 0.1);
  EXPECT_DOUBLE_EQ(d.real("adam_beta1"), 0.9);
  EXPECT_DOUBLE_EQ(d.real("adam_beta2"), 0.95);
  EXPECT_DOUBLE_EQ(d.real("muon_momentum"), 0.95);
  const Config c = parse_yaml(v1_head() + "optim_config:\n  name: muon\n  wd: 0.05\n  momentum: 0.9\n  nesterov: false\n"
                                          "  ns_steps: 6\n  adamw_betas: [0.8, 0.99]\n  adamw_eps: 1.0e-6\n");
  EXPECT_DOUBLE_EQ(c.real("weight_decay"), 0.05);
  EXPECT_DOUBLE_EQ(c.real("muon_momentum"), 0.9);
  EXPECT_FALSE(c.boolean("muon_nesterov"));
  EXPECT_EQ(c.integer("muon_ns_steps"), 6);
  EXPECT_DOUBLE_EQ(c.real("adam_beta1"), 0.8);
  EXPECT_DOUBLE_EQ(c.real("adam_beta2"), 0.99);
  EXPECT_DOUBLE_EQ(c.real("adam_epsilon"), 1e-6);
  const Config plain = parse_yaml(v1_head());
  EXPECT_FALSE(plain.boolean("use_muon"));
  EXPECT_DOUBLE_EQ(plain.real("weight_decay"), 0.01);
  const std::string other = yaml_error(v1_head() + "optim_config:\n  name: adafactor\n");
  EXPECT_NE(other.find("registers only the muon optimizer plugin"), std::string::npos) << other;
  const std::string betas = yaml_error(v1_head() + "optim_config:\n  name: muon\n  adamw_betas: [0.9]\n");
  EXPECT_NE(betas.find("adamw_betas takes two numbers"), std::string::npos) << betas;
}

// main's `llamafactory-cli dpo`: a v1 file with DPO's keys trains stage dpo (or `stage=dpo` given).
TEST(ConfigV1, DpoKeysMakeADpoRun) {
  const Config c = parse_yaml(v1_head() + "pref_loss: simpo\nld_alpha: 0.5\n");
  EXPECT_EQ(c.string("stage"), "dpo");
  EXPECT_DOUBLE_EQ(c.real("ld_alpha"), 0.5);
  EXPECT_TRUE(noted(c, "a DPO key: this v1 file trains as `llamafactory-cli dpo` does"));
  EXPECT_EQ(parse_yaml(v1_head()).string("stage"), "sft");
  // main's BaseTrainer weighs each micro-batch's loss by its trained tokens, DPO's too: the file with
  // DPO keys, or one given stage=dpo on the command line (main's train_lora_dpo.yaml has none).
  EXPECT_EQ(c.string("pref_loss_weighting"), "tokens");
  EXPECT_EQ(parse_config(v1_head(), "job.yaml", {"stage=dpo"}).string("pref_loss_weighting"), "tokens");
  EXPECT_EQ(parse_config(v1_head(), "job.yaml", {"stage=dpo", "pref_loss_weighting=pairs"}).string("pref_loss_weighting"),
            "pairs");
}

// main's `llamafactory-cli rm`: model_class: cls (or stage=rm given) trains a token-classification
// reward model, its micro-batches weighed by trained tokens; rm_head and the weighting apply to rm
// (and dpo) only.
TEST(ConfigV1, ModelClassClsIsMainsRewardModel) {
  const Config c = parse_yaml(v1_head() + "model_class: cls\n");
  EXPECT_EQ(c.string("stage"), "rm");
  EXPECT_EQ(c.string("rm_head"), "score");
  EXPECT_EQ(c.string("pref_loss_weighting"), "tokens");
  EXPECT_TRUE(noted(c, "trains as `llamafactory-cli rm` does"));
  EXPECT_EQ(parse_config(v1_head(), "job.yaml", {"stage=rm"}).string("rm_head"), "score");
  EXPECT_NE(yaml_error(v1_head() + "model_class: other\n").find("causal language models (model_class: llm) and reward models"),
            std::string::npos);
  const std::string head = test::message_of<ConfigError>([&] { parse_config(v1_head(), "job.yaml", {"rm_head=score"}); });
  EXPECT_NE(head.find("key 'rm_head' applies to stage = \"rm\""), std::string::npos) << head;
}

TEST(ConfigV1, RefusedWithWhy) {
  EXPECT_NE(yaml_error(v1_head() + "batching_strategy: dynamic_padding_free\n").find("needs max_steps"),
            std::string::npos);
  EXPECT_EQ(parse_yaml(v1_head() + "batching_strategy: padding_free\n").string("batching_strategy"), "padding_free");
  const std::string mixed = yaml_error(v1_head() + "stage: sft\n");
  EXPECT_NE(mixed.find("mixes LlamaFactory v1's keys ('model') with the classic trainer's ('stage')"), std::string::npos)
      << mixed;
  EXPECT_NE(yaml_error(v1_head() + "global_batch_size: 8\ngradient_accumulation_steps: 2\n").find("mixes"),
            std::string::npos);
}

TEST(ConfigV1, InertKeysAreNoted) {
  const Config c = parse_yaml(v1_head() + "model_class: llm\nkernel_config:\n  name: auto\n  include_kernels: auto\n"
                                          "quant_config: null\nsample_backend: hf\nmax_new_tokens: 128\n");
  EXPECT_TRUE(noted(c, "kernel_config.name = \"auto\""));
  EXPECT_TRUE(noted(c, "sample_backend = \"hf\""));
}

TEST(ConfigV1, RayRunsOnTheMpiWorld) {
  const Config c = parse_yaml("model_name_or_path: " + repo_root() + "/tests/fixtures/qwen3-tiny\ndistributed: ray\n"
                              "ray_num_workers: 4\nmaster_addr: 10.0.0.1\nmaster_port: 29500\ntrain_dataset: " +
                              data_path() + "\n");
  EXPECT_EQ(c.string("distributed"), "ddp");
  EXPECT_EQ(c.integer("ray_num_workers"), 4);
  EXPECT_TRUE(noted(c, "distributed = \"ray\": the job runs on the MPI world"));
  EXPECT_TRUE(noted(c, "master_addr = \"10.0.0.1\" has no effect"));
}

TEST(ConfigV1, ClassicFilesStayClassic) {
  const Config c = parse_yaml("model_name_or_path: " + repo_root() + "/tests/fixtures/qwen3-tiny\nstage: sft\n"
                              "train_dataset: " + data_path() + "\n");
  EXPECT_EQ(c.format(), "a LlamaFactory (classic trainer) YAML");
  EXPECT_EQ(c.string("finetuning_type"), "lora");  // the classic trainer's default
  EXPECT_EQ(c.string("sample_order"), "global");
}

}  // namespace
}  // namespace lft::config
