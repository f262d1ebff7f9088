// lfmerge of freeze and LoRA checkpoints (lft/ckpt/merge.h): every rank saves the trained tensors
// with save_checkpoint, as a run does, then rank 0 exports them: the whole model over an inline
// base (init_parameter) or a model folder, the adapters in PEFT's layout, and the refusals (a base
// folder whose files changed, --format peft of a freeze checkpoint, malformed adapters).
#include <ATen/ATen.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lft/ckpt/checkpoint.h"
#include "lft/ckpt/checkpoint_files.h"
#include "lft/ckpt/merge.h"
#include "lft/ckpt/tensor_store.h"
#include "lft/model/hf_checkpoint.h"
#include "lft/model/init.h"
#include "lft/model/safetensors.h"
#include "lft/optim/adamw.h"
#include "mpi_test_util.h"

namespace lft::ckpt {
namespace {

using Tensors = std::vector<std::pair<std::string, at::Tensor>>;

constexpr std::int64_t kSeed = 1234;  // the run's seed: an inline base is initialised from it
constexpr std::int64_t kRank = 4;
constexpr double kScaling = 2.0;  // lora_alpha 8 / r 4

model::ModelConfig tiny_config() {
  model::ModelConfig c;
  c.vocab_size = 67;
  c.hidden_size = 32;
  c.intermediate_size = 40;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 64;
  return c;
}

// tiny_config() as the run's [model] table; the data file no longer exists.
std::string inline_config_text() {
  return "train_dataset = \"data/moved-away.jsonl\"\n"
         "\n[model]\n"
         "vocab_size = 67\n"
         "hidden_size = 32\n"
         "intermediate_size = 40\n"
         "num_hidden_layers = 2\n"
         "num_attention_heads = 4\n"
         "num_key_value_heads = 2\n"
         "max_position_embeddings = 64\n";
}

std::string folder_config_text(const std::string& folder) {
  return "model_name_or_path = \"" + folder + "\"\ntrain_dataset = \"gone.txt\"\n";
}

std::string fixture() {
  const std::string here = __FILE__;
  return here.substr(0, here.rfind('/')) + "/../fixtures/llama-tiny";
}

// The same values on every rank: normal(0, 0.02 * scale), from a generator seeded with `key`.
at::Tensor values(const std::string& key, std::vector<std::int64_t> shape, double scale) {
  return model::init_parameter("test values of " + key, shape, 99) * scale;
}

// lora_A [r, in] and lora_B [out, r] beside `linear`, whose weight is [out, in].
void add_adapters(Tensors& tensors, const std::string& linear, std::int64_t out, std::int64_t in) {
  tensors.emplace_back(linear + ".lora_A.weight", values(linear + " A", {kRank, in}, 10));
  tensors.emplace_back(linear + ".lora_B.weight", values(linear + " B", {out, kRank}, 10));
}

RunInfo run_info(const std::string& config_text) {
  RunInfo run;
  run.engine = "ddp";
  run.mesh = {1, 1, test::world().size(), 1};
  run.world_size = test::world().size();
  run.config_text = config_text;
  run.global_batch = 8;
  run.seed = kSeed;
  return run;
}

RunInfo lora_run(const std::string& config_text, const std::string& base, const std::string& hash) {
  RunInfo run = run_info(config_text);
  run.finetuning_type = "lora";
  run.base_model = base;
  run.base_model_hash = hash;
  run.lora_rank = kRank;
  run.lora_alpha = 8;
  run.lora_scaling = kScaling;
  run.lora_dropout = 0.05;
  run.lora_target = "q_proj,down_proj";
  run.additional_target = "lm_head";
  return run;
}

RunInfo freeze_run(const std::string& config_text, const std::string& base,
                   const std::string& hash) {
  RunInfo run = run_info(config_text);
  run.finetuning_type = "freeze";
  run.base_model = base;
  run.base_model_hash = hash;
  return run;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// The message of the UsageError `merge_checkpoint(o)` throws ("" when it throws none).
std::string usage_error(const MergeOptions& o) {
  try {
    merge_checkpoint(o);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

class MergeAdaptersTest : public testing::Test {
 protected:
  void SetUp() override {
    char buf[256] = "/tmp/lft-merge-adapters-XXXXXX";
    int len = 0;
    if (root()) {
      EXPECT_NE(::mkdtemp(buf), nullptr) << "cannot create a folder in /tmp";
      len = static_cast<int>(std::string(buf).size());
    }
    MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(buf, len + 1, MPI_CHAR, 0, MPI_COMM_WORLD);
    dir_ = buf;
  }
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    if (root()) remove_tree(dir_);
  }

  // Collective: saves `trained` (with AdamW state) as a run of `run` does, each rank writing its
  // share of the rows. Returns the checkpoint folder.
  std::string save(const std::string& name, const RunInfo& run, const Tensors& trained) {
    std::vector<at::Tensor> params;
    std::vector<std::string> names;
    std::vector<HeldTensor> held;
    for (const auto& [n, t] : trained) {
      params.push_back(t);
      names.push_back(n);
      held.push_back(HeldTensor{
          n, t,
          TensorBox{t.sizes().vec(), std::vector<int64_t>(t.dim(), 0), test::world().size(), test::world().rank()}});
    }
    const optim::AdamW optimizer(params, names, optim::AdamWOptions{});
    Progress progress;
    progress.step = 5;
    SaveOptions save;
    save.output_dir = dir_ + "/" + name;
    return save_checkpoint(MPI_COMM_WORLD, save, run, progress, held, optimizer);
  }

  // dir_/name: a copy of the llama-tiny fixture's config.json and weights (rank 0 writes it).
  std::string base_folder(const std::string& name) {
    const std::string folder = dir_ + "/" + name;
    if (root()) {
      make_directories(folder);
      for (const char* file : {"config.json", "model.safetensors"})
        std::ofstream(folder + "/" + file, std::ios::binary) << read_file(fixture() + "/" + file);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return folder;
  }

  MergeOptions options(const std::string& ckpt, const std::string& out,
                       ExportFormat format = ExportFormat::HuggingFace) {
    MergeOptions o;
    o.checkpoint = ckpt;
    o.out_dir = dir_ + "/" + out;
    o.format = format;
    return o;
  }

  static bool root() { return test::world().rank() == 0; }

  std::string dir_;
};

TEST_F(MergeAdaptersTest, LoraOverAnInlineModelExportsTheBasePlusScaledBA) {
  Tensors trained;
  for (const std::string layer : {"0", "1"}) {
    add_adapters(trained, "model.layers." + layer + ".self_attn.q_proj", 32, 32);
    add_adapters(trained, "model.layers." + layer + ".mlp.down_proj", 32, 40);
  }
  trained.emplace_back("lm_head.weight", values("lm_head", {67, 32}, 1));
  const std::string ckpt = save("lora", lora_run(inline_config_text(), "", ""), trained);
  if (!root()) return;

  const MergeReport r = merge_checkpoint(options(ckpt, "hf"));
  const auto expected = expected_parameter_shapes(tiny_config());
  EXPECT_EQ(r.tensor_count, static_cast<std::int64_t>(expected.size()));
  EXPECT_EQ(r.parameters, tiny_config().num_parameters());
  EXPECT_NE(r.text.find("lora checkpoint: 1 of the " + std::to_string(expected.size()) +
                        " tensors from the checkpoint"),
            std::string::npos)
      << r.text;
  const auto out = model::read_safetensors(dir_ + "/hf/model.safetensors");
  ASSERT_EQ(out.size(), expected.size());
  const std::map<std::string, at::Tensor> held(trained.begin(), trained.end());
  int merged = 0;
  for (const auto& [name, shape] : expected) {
    ASSERT_EQ(out.count(name), 1u) << name;
    const at::Tensor& got = out.at(name);
    const at::Tensor base = model::init_parameter(name, shape, kSeed);
    const std::string linear = name.substr(0, name.rfind('.'));
    if (held.count(name) != 0) {
      EXPECT_TRUE(at::equal(got, held.at(name))) << name;
    } else if (held.count(linear + ".lora_A.weight") != 0) {
      const at::Tensor want = base + kScaling * at::matmul(held.at(linear + ".lora_B.weight"),
                                                           held.at(linear + ".lora_A.weight"));
      EXPECT_TRUE(at::allclose(got, want, /*rtol=*/0, /*atol=*/1e-6))
          << name << ": max difference " << (got - want).abs().max().item<float>();
      EXPECT_FALSE(at::allclose(got, base, /*rtol=*/0, /*atol=*/1e-3)) << name << " is the base's";
      ++merged;
    } else {
      EXPECT_TRUE(at::equal(got, base)) << name << " is not the base's";
    }
  }
  EXPECT_EQ(merged, 4);

  const std::string text = inspect_checkpoint(ckpt);
  for (const std::string want :
       {"finetuning      lora", "base model      the inline [model]",
        "lora            rank 4, alpha 8, scaling 2, dropout 0.05, rslora 0, dora 0",
        "lora target     q_proj,down_proj", "additional      lm_head"})
    EXPECT_NE(text.find(want), std::string::npos) << "missing '" << want << "' in\n" << text;
}

TEST_F(MergeAdaptersTest, PeftFormatWritesPeftNamesAndAdapterConfig) {
  Tensors trained;
  add_adapters(trained, "model.layers.1.self_attn.q_proj", 32, 32);
  add_adapters(trained, "model.layers.0.mlp.down_proj", 32, 40);
  trained.emplace_back("lm_head.weight", values("lm_head", {67, 32}, 1));
  const std::string ckpt = save("lora", lora_run(inline_config_text(), "", ""), trained);
  RunInfo rs = lora_run(inline_config_text(), "", "");
  rs.use_rslora = true;
  rs.lora_alpha = 4;  // 4 / sqrt(4): the same scaling
  const std::string rslora = save("rslora", rs, trained);
  if (!root()) return;

  MergeOptions o = options(ckpt, "peft", ExportFormat::Peft);
  o.dtype = at::kBFloat16;
  const MergeReport r = merge_checkpoint(o);
  EXPECT_EQ(r.files, (std::vector<std::string>{o.out_dir + "/adapter_model.safetensors",
                                               o.out_dir + "/adapter_config.json"}));
  EXPECT_EQ(r.tensor_count, static_cast<std::int64_t>(trained.size()));
  EXPECT_FALSE(exists(o.out_dir + "/config.json"));
  std::map<std::string, std::string> metadata;
  const auto file = model::read_safetensors(o.out_dir + "/adapter_model.safetensors", &metadata);
  EXPECT_EQ(metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(file.size(), trained.size());
  for (const auto& [name, t] : trained) {
    const std::string key = "base_model.model." + name;
    ASSERT_EQ(file.count(key), 1u) << key;
    EXPECT_TRUE(at::equal(file.at(key), t.to(at::kBFloat16))) << key;
  }
  EXPECT_EQ(file.count("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"), 1u);
  EXPECT_EQ(file.count("base_model.model.lm_head.weight"), 1u);

  const auto config = nlohmann::json::parse(read_file(o.out_dir + "/adapter_config.json"));
  EXPECT_EQ(config.at("peft_type"), "LORA");
  EXPECT_EQ(config.at("task_type"), "CAUSAL_LM");
  EXPECT_EQ(config.at("r"), 4);
  EXPECT_EQ(config.at("lora_alpha"), 8);
  EXPECT_DOUBLE_EQ(config.at("lora_dropout").get<double>(), 0.05);
  EXPECT_EQ(config.at("target_modules"), nlohmann::json::array({"q_proj", "down_proj"}));
  EXPECT_EQ(config.at("modules_to_save"), nlohmann::json::array({"lm_head"}));
  EXPECT_FALSE(config.at("use_rslora").get<bool>());
  EXPECT_TRUE(config.at("base_model_name_or_path").is_null());
  EXPECT_EQ(config.at("bias"), "none");
  EXPECT_FALSE(config.at("fan_in_fan_out").get<bool>());
  EXPECT_TRUE(config.at("init_lora_weights").get<bool>());
  EXPECT_TRUE(config.at("inference_mode").get<bool>());

  const MergeOptions ro = options(rslora, "peft-rslora", ExportFormat::Peft);
  merge_checkpoint(ro);
  const auto rc = nlohmann::json::parse(read_file(ro.out_dir + "/adapter_config.json"));
  EXPECT_TRUE(rc.at("use_rslora").get<bool>());
  EXPECT_EQ(rc.at("lora_alpha"), 4);  // PEFT's scaling 4 / sqrt(4) is the run's 2
}

TEST_F(MergeAdaptersTest, RefusesABaseFolderWhoseFilesChanged) {
  const std::string base = base_folder("base");
  const std::string hash = model::model_folder_hash(base);
  Tensors trained;
  add_adapters(trained, "model.layers.0.self_attn.q_proj", 32, 32);
  RunInfo run = lora_run(folder_config_text(base), base, hash);
  run.additional_target = "";
  const std::string ckpt = save("lora", run, trained);
  if (!root()) return;
  // After the run, the folder's weights changed (a new download, another conversion).
  auto weights = model::read_safetensors(base + "/model.safetensors");
  weights.at("model.norm.weight").add_(1);
  model::write_safetensors(base + "/model.safetensors", weights);
  const std::string now = model::model_folder_hash(base);
  ASSERT_NE(now, hash);

  const MergeOptions o = options(ckpt, "out");
  const std::string m = usage_error(o);
  EXPECT_NE(m.find("base model " + base), std::string::npos) << m;
  EXPECT_NE(m.find(hash), std::string::npos) << m;
  EXPECT_NE(m.find(now), std::string::npos) << m;
  EXPECT_FALSE(exists(o.out_dir));
  // The adapters alone do not need the base.
  EXPECT_NO_THROW(merge_checkpoint(options(ckpt, "peft", ExportFormat::Peft)));
}

TEST_F(MergeAdaptersTest, PeftFormatRefusesAFreezeCheckpoint) {
  const Tensors trained = {{"model.norm.weight", values("norm", {32}, 1)}};
  const std::string ckpt = save("freeze", freeze_run(inline_config_text(), "", ""), trained);
  if (!root()) return;
  const MergeOptions o = options(ckpt, "out", ExportFormat::Peft);
  const std::string m = usage_error(o);
  EXPECT_NE(m.find("--format peft exports LoRA adapters; this checkpoint has finetuning_type = "
                   "freeze: export it with --format hf"),
            std::string::npos)
      << m;
  EXPECT_FALSE(exists(o.out_dir));
}

TEST_F(MergeAdaptersTest, FreezeExportTakesTrainedTensorsFromTheCheckpointAndTheRestFromTheBase) {
  const std::string base = base_folder("base");
  const auto base_weights = model::read_safetensors(fixture() + "/model.safetensors");
  Tensors trained;
  for (const auto& [name, t] : base_weights)
    if (name.rfind("model.layers.1.", 0) == 0 || name == "model.norm.weight")
      trained.emplace_back(name, t + 0.5);
  const std::string ckpt =
      save("freeze", freeze_run(folder_config_text(base), base, model::model_folder_hash(base)),
           trained);
  if (!root()) return;

  const MergeReport r = merge_checkpoint(options(ckpt, "hf"));
  EXPECT_NE(r.text.find("freeze checkpoint: " + std::to_string(trained.size()) + " of the " +
                        std::to_string(base_weights.size()) +
                        " tensors from the checkpoint, the others from the base model " + base),
            std::string::npos)
      << r.text;
  const std::map<std::string, at::Tensor> held(trained.begin(), trained.end());
  const auto out = model::read_safetensors(dir_ + "/hf/model.safetensors");
  ASSERT_EQ(out.size(), base_weights.size());
  for (const auto& [name, t] : base_weights)
    EXPECT_TRUE(at::equal(out.at(name), held.count(name) != 0 ? held.at(name) : t)) << name;
  EXPECT_EQ(nlohmann::json::parse(read_file(dir_ + "/hf/config.json")).at("vocab_size"), 61);

  // model.h5: the same whole model, without the attributes of a partial checkpoint.
  const MergeOptions h = options(ckpt, "h5", ExportFormat::Hdf5);
  merge_checkpoint(h);
  StoreReader reader(MPI_COMM_SELF, h.out_dir + "/model.h5");
  EXPECT_EQ(reader.tensors().size(), base_weights.size());
  EXPECT_FALSE(reader.has_attribute("/", "finetuning_type"));
  EXPECT_TRUE(at::equal(reader.read_full("model/model.layers.0.mlp.up_proj.weight"),
                        base_weights.at("model.layers.0.mlp.up_proj.weight")));
  EXPECT_TRUE(at::equal(reader.read_full("model/model.norm.weight"), held.at("model.norm.weight")));
}

TEST_F(MergeAdaptersTest, RejectsAdaptersOfAnotherRankOrWithoutTheirPair) {
  Tensors trained;
  trained.emplace_back("model.layers.0.self_attn.q_proj.lora_A.weight", values("a", {3, 32}, 1));
  trained.emplace_back("model.layers.0.self_attn.q_proj.lora_B.weight", values("b", {32, 3}, 1));
  trained.emplace_back("model.layers.1.mlp.up_proj.lora_A.weight", values("c", {kRank, 32}, 1));
  trained.emplace_back("model.embed_tokens.lora_A.weight", values("d", {kRank, 67}, 1));
  const std::string ckpt = save("lora", lora_run(inline_config_text(), "", ""), trained);
  if (!root()) return;
  const std::string m = usage_error(options(ckpt, "out"));
  for (const std::string want :
       {"'/model/model.layers.0.self_attn.q_proj.lora_A.weight' has shape [3, 32]",
        "'/model/model.layers.0.self_attn.q_proj.lora_B.weight' has shape [32, 3]",
        "'model.layers.1.mlp.up_proj.weight' has a lora_A but no lora_B",
        "'/model/model.embed_tokens.lora_A.weight' is a LoRA adapter of "
        "'model.embed_tokens.weight', which is not a linear"})
    EXPECT_NE(m.find(want), std::string::npos) << "missing '" << want << "' in\n" << m;
}

TEST(MergeAdaptersCli, FormatPeft) {
  EXPECT_EQ(parse_merge_command_line({"ck", "--out", "x", "--format", "peft"}).options.format,
            ExportFormat::Peft);
}

}  // namespace
}  // namespace lft::ckpt
