// lfmerge (lft/ckpt/merge.h): every rank writes its rows of a tiny model's checkpoint (shared-file
// and per-rank stores, as a save at this world size does), then rank 0 merges it in-process on
// MPI_COMM_SELF and checks the export: bitwise fp32 round trip, bf16 conversion, sharding and its
// index, config.json, overwrite refusal, dry run, incomplete checkpoints, names and shapes, a full
// disk, the HDF5 format and --inspect.
#include <ATen/ATen.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "lft/ckpt/checkpoint.h"
#include "lft/ckpt/checkpoint_files.h"
#include "lft/ckpt/manifest.h"
#include "lft/ckpt/merge.h"
#include "lft/ckpt/tensor_store.h"
#include "lft/model/init.h"
#include "lft/model/llama.h"
#include "lft/model/safetensors.h"
#include "lft/optim/adamw.h"
#include "mpi_test_util.h"

namespace lft::ckpt {
namespace {

using Tensors = std::vector<std::pair<std::string, at::Tensor>>;

int rank_of(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}

int size_of(MPI_Comm comm) {
  int s = 0;
  MPI_Comm_size(comm, &s);
  return s;
}

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

// The run's TOML as a save stores it: the file, then its overrides as comments. The file says 5
// layers and the override 2; the data file no longer exists (the export must not need it).
std::string inline_config_text(std::int64_t intermediate_size = 40) {
  return "train_dataset = \"data/moved-away.jsonl\"\n"
         "learning_rate = 3e-4\n"
         "\n[model]\n"
         "vocab_size = 67\n"
         "hidden_size = 32\n"
         "intermediate_size = " +
         std::to_string(intermediate_size) +
         "\n"
         "num_hidden_layers = 5\n"
         "num_attention_heads = 4\n"
         "num_key_value_heads = 2\n"
         "max_position_embeddings = 64\n"
         "# override: model.num_hidden_layers=2\n"
         "# override: learning_rate=1e-3\n";
}

Tensors model_weights(const model::ModelConfig& config, std::uint64_t seed = 7) {
  model::LlamaForCausalLM m(config);
  model::init_weights(*m, seed);
  Tensors out;
  for (const auto& p : m->named_parameters()) out.emplace_back(p.key(), p.value().detach().clone());
  return out;
}

struct WriteSpec {
  std::string config_text = inline_config_text();
  Tensors tensors;
  StoreMode mode = StoreMode::SharedFile;
  bool complete = true;
};

// Collective over `comm`: each rank writes rows [r * n / size, (r + 1) * n / size) of every tensor
// (some ranks hold nothing of small tensors at 8 ranks), plus AdamW moments and the root
// attributes of docs/checkpoint.md.
void write_checkpoint(MPI_Comm comm, const std::string& folder, const WriteSpec& spec) {
  const int rank = rank_of(comm), size = size_of(comm);
  if (rank == 0) make_directories(folder);
  MPI_Barrier(comm);
  StoreWriter w(comm, spec.mode == StoreMode::SharedFile ? folder + "/state.h5" : folder + "/state",
                spec.mode);
  std::vector<Slice> slices;
  auto add = [&](const std::string& name, const at::Tensor& t) {
    const std::int64_t rows = t.size(0);
    const std::int64_t lo = rows * rank / size, hi = rows * (rank + 1) / size;
    Slice s;
    s.name = name;
    s.global_shape = t.sizes().vec();
    s.offset.assign(t.dim(), 0);
    s.offset[0] = lo;
    s.local = hi > lo ? t.narrow(0, lo, hi - lo) : at::empty({0}, t.options());
    slices.push_back(std::move(s));
  };
  for (const auto& [name, t] : spec.tensors) {
    add("model/" + name, t);
    add("optim/" + name + "/exp_avg", t * 0.5);
    add("optim/" + name + "/exp_avg_sq", t * t);
  }
  w.write(slices);
  Manifest m;
  m.lftrain_version = "0.1.0";
  m.progress.step = 7;
  m.progress.tokens_seen = 7 * 1024;
  m.progress.sampler.seed = 42;
  m.progress.sampler.num_samples = 64;
  m.progress.sampler.global_batch = 8;
  m.run.world_size = size;
  m.run.mesh = {1, 1, size, 1};
  m.run.engine = "ddp";
  m.run.config_text = spec.config_text;
  m.run.global_batch = 8;
  m.run.seed = 1234;
  m.optimizer_steps = 7;
  m.optimizer_hyperparameters = {{"beta1", 0.9}, {"beta2", 0.999}};
  write_manifest(w, m);
  w.close();
  if (rank == 0 && spec.complete) std::ofstream(folder + "/COMPLETE") << "step 7\n";
  MPI_Barrier(comm);
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

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Rank 0 makes a fresh folder; every rank gets its name.
class MergeTest : public testing::TestWithParam<StoreMode> {
 protected:
  void SetUp() override {
    char buf[256] = "/tmp/lft-merge-XXXXXX";
    int len = 0;
    if (rank_of(MPI_COMM_WORLD) == 0) {
      EXPECT_NE(::mkdtemp(buf), nullptr) << "cannot create a folder in /tmp";
      len = static_cast<int>(std::string(buf).size());
    }
    MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(buf, len + 1, MPI_CHAR, 0, MPI_COMM_WORLD);
    dir_ = buf;
  }
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_of(MPI_COMM_WORLD) == 0) remove_tree(dir_);
  }

  // Writes dir_/name/checkpoint-7 collectively; returns its path.
  std::string checkpoint(const std::string& name, WriteSpec spec) {
    spec.mode = GetParam();
    if (spec.tensors.empty()) spec.tensors = model_weights(tiny_config());
    const std::string folder = dir_ + "/" + name + "/checkpoint-7";
    write_checkpoint(MPI_COMM_WORLD, folder, spec);
    return folder;
  }

  MergeOptions options(const std::string& ckpt, const std::string& out) {
    MergeOptions o;
    o.checkpoint = ckpt;
    o.out_dir = dir_ + "/" + out;
    return o;
  }

  static bool root() { return rank_of(MPI_COMM_WORLD) == 0; }

  std::string dir_;
};

// Every tensor of the folder's safetensors files, through model.safetensors.index.json when there
// is one.
std::map<std::string, at::Tensor> read_export(const std::string& out) {
  if (!exists(out + "/model.safetensors.index.json"))
    return model::read_safetensors(out + "/model.safetensors");
  const auto index = nlohmann::json::parse(read_file(out + "/model.safetensors.index.json"));
  std::set<std::string> files;
  for (const auto& [name, file] : index.at("weight_map").items())
    files.insert(file.get<std::string>());
  std::map<std::string, at::Tensor> all;
  for (const std::string& f : files) all.merge(model::read_safetensors(out + "/" + f));
  return all;
}

TEST_P(MergeTest, Fp32RoundTripsBitwiseAndBf16MatchesTorchConversion) {
  const Tensors weights = model_weights(tiny_config());
  const std::string ckpt = checkpoint("run", {inline_config_text(), weights});
  if (!root()) return;

  const MergeReport r = merge_checkpoint(options(ckpt, "fp32"));
  EXPECT_EQ(r.tensor_count, static_cast<std::int64_t>(weights.size()));
  EXPECT_EQ(r.parameters, tiny_config().num_parameters());
  EXPECT_EQ(r.total_bytes, 4 * tiny_config().num_parameters());
  std::map<std::string, std::string> metadata;
  const auto fp32 = model::read_safetensors(dir_ + "/fp32/model.safetensors", &metadata);
  EXPECT_EQ(metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(fp32.size(), weights.size());  // no optimizer state
  for (const auto& [name, t] : weights) {
    ASSERT_EQ(fp32.count(name), 1u) << name;
    EXPECT_EQ(fp32.at(name).scalar_type(), at::kFloat) << name;
    EXPECT_TRUE(at::equal(fp32.at(name), t)) << name;
  }
  EXPECT_FALSE(exists(dir_ + "/fp32/model.safetensors.index.json"));

  // config.json: the [model] table with the override applied, readable as an HF config.
  const std::string json = read_file(dir_ + "/fp32/config.json");
  const model::ModelConfig c = model::ModelConfig::from_hf_json(json, "config.json");
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.intermediate_size, 40);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.vocab_size, 67);
  const auto j = nlohmann::json::parse(json);
  EXPECT_EQ(j.at("architectures"), nlohmann::json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(j.at("torch_dtype"), "float32");
  EXPECT_EQ(j.at("dtype"), "float32");

  MergeOptions o = options(ckpt, "bf16");
  o.dtype = at::kBFloat16;
  merge_checkpoint(o);
  const auto bf16 = model::read_safetensors(dir_ + "/bf16/model.safetensors");
  ASSERT_EQ(bf16.size(), weights.size());
  for (const auto& [name, t] : weights) {
    EXPECT_EQ(bf16.at(name).scalar_type(), at::kBFloat16) << name;
    EXPECT_TRUE(at::equal(bf16.at(name), t.to(at::kBFloat16))) << name;
  }
  EXPECT_EQ(nlohmann::json::parse(read_file(dir_ + "/bf16/config.json")).at("torch_dtype"),
            "bfloat16");
}

// The trainer's own save (replicated parameters, rows split among the data-parallel ranks) and
// its way of recording overrides.
TEST_P(MergeTest, ExportsWhatSaveCheckpointWrote) {
  const Tensors weights = model_weights(tiny_config(), 11);
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  std::vector<HeldTensor> held;
  for (const auto& [name, t] : weights) {
    params.push_back(t);
    names.push_back(name);
    held.push_back(HeldTensor{name, t, TensorBox{t.sizes().vec(), std::vector<int64_t>(t.dim(), 0), size_of(MPI_COMM_WORLD), rank_of(MPI_COMM_WORLD)}});
  }
  const optim::AdamW optimizer(params, names, optim::AdamWOptions{});
  RunInfo run;
  run.engine = "ddp";
  run.mesh = {1, 1, size_of(MPI_COMM_WORLD), 1};
  run.world_size = size_of(MPI_COMM_WORLD);
  run.config_text = inline_config_text();
  run.config_text.erase(run.config_text.find("# override"));
  run.config_text += "\n# override: model.num_hidden_layers=2";  // as the trainer appends them
  run.global_batch = 8;
  Progress progress;
  progress.step = 3;
  SaveOptions save;
  save.output_dir = dir_ + "/saved";
  save.per_rank = GetParam() == StoreMode::PerRank;
  const std::string folder =
      save_checkpoint(MPI_COMM_WORLD, save, run, progress, held, optimizer);
  if (!root()) return;
  const MergeReport r = merge_checkpoint(options(folder, "out"));
  EXPECT_NE(r.text.find("(step 3)"), std::string::npos) << r.text;
  const auto out = model::read_safetensors(dir_ + "/out/model.safetensors");
  ASSERT_EQ(out.size(), weights.size());
  for (const auto& [name, t] : weights) EXPECT_TRUE(at::equal(out.at(name), t)) << name;
}

TEST_P(MergeTest, TinyShardSizeWritesShardsAndAnIndexCoveringEveryTensor) {
  const Tensors weights = model_weights(tiny_config());
  const std::string ckpt = checkpoint("run", {inline_config_text(), weights});
  if (!root()) return;
  MergeOptions o = options(ckpt, "sharded");
  o.max_shard_bytes = parse_byte_size("10KB");
  const MergeReport r = merge_checkpoint(o);
  const std::string out = o.out_dir;
  EXPECT_FALSE(exists(out + "/model.safetensors"));
  const auto index = nlohmann::json::parse(read_file(out + "/model.safetensors.index.json"));
  EXPECT_EQ(index.at("metadata").at("total_size").get<std::int64_t>(), r.total_bytes);
  const auto& map = index.at("weight_map");
  EXPECT_EQ(map.size(), weights.size());
  std::set<std::string> files;
  for (const auto& [name, t] : weights) {
    ASSERT_TRUE(map.contains(name)) << name;
    files.insert(map.at(name).get<std::string>());
  }
  EXPECT_GT(files.size(), 2u);
  for (const std::string& f : files) {
    EXPECT_TRUE(f.rfind("model-000", 0) == 0 &&
                f.find("-of-" + std::string(5 - std::to_string(files.size()).size(), '0') +
                       std::to_string(files.size()) + ".safetensors") != std::string::npos)
        << f;
    const auto shard = model::read_safetensors(out + "/" + f);
    std::int64_t bytes = 0;
    for (const auto& [name, t] : shard) {
      EXPECT_EQ(map.at(name), f) << name;
      bytes += static_cast<std::int64_t>(t.nbytes());
    }
    EXPECT_TRUE(bytes <= 10000 || shard.size() == 1) << f << " holds " << bytes << " bytes";
  }
  const auto all = read_export(out);
  for (const auto& [name, t] : weights) EXPECT_TRUE(at::equal(all.at(name), t)) << name;
}

TEST_P(MergeTest, RefusesANonEmptyFolderAndForceReplacesOnlyExportFiles) {
  const std::string ckpt = checkpoint("run", {});
  if (!root()) return;
  MergeOptions o = options(ckpt, "out");
  merge_checkpoint(o);
  try {
    merge_checkpoint(o);
    ADD_FAILURE() << "overwrote without --force";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(o.out_dir), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--force"), std::string::npos) << e.what();
  }
  write_file(o.out_dir + "/model-00001-of-00003.safetensors", "stale");
  write_file(o.out_dir + "/notes.txt", "mine");
  o.force = true;
  merge_checkpoint(o);
  EXPECT_FALSE(exists(o.out_dir + "/model-00001-of-00003.safetensors"));
  EXPECT_EQ(read_file(o.out_dir + "/notes.txt"), "mine");
  EXPECT_TRUE(exists(o.out_dir + "/model.safetensors"));
  EXPECT_FALSE(exists(o.out_dir + "/.lfmerge-partial")) << "the export written aside was moved into place";
}

TEST_P(MergeTest, DryRunWritesNothing) {
  const std::string ckpt = checkpoint("run", {});
  if (!root()) return;
  MergeOptions o = options(ckpt, "dry");
  o.dry_run = true;
  const MergeReport r = merge_checkpoint(o);
  EXPECT_FALSE(exists(o.out_dir));
  EXPECT_EQ(r.tensor_count, static_cast<std::int64_t>(model_weights(tiny_config()).size()));
  EXPECT_EQ(r.total_bytes, 4 * tiny_config().num_parameters());
  ASSERT_EQ(r.files.size(), 2u);
  EXPECT_EQ(r.files[0], o.out_dir + "/model.safetensors");
  EXPECT_NE(r.text.find("dry run"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find(std::to_string(r.total_bytes)), std::string::npos) << r.text;
}

TEST_P(MergeTest, RefusesAnIncompleteCheckpoint) {
  WriteSpec spec;
  spec.complete = false;
  const std::string ckpt = checkpoint("run", spec);
  if (!root()) return;
  MergeOptions o = options(ckpt, "out");
  try {
    merge_checkpoint(o);
    ADD_FAILURE() << "merged an incomplete checkpoint";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("incomplete"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(ckpt), std::string::npos) << e.what();
  }
  EXPECT_FALSE(exists(o.out_dir));
  EXPECT_NE(inspect_checkpoint(ckpt).find("INCOMPLETE"), std::string::npos);
}

TEST_P(MergeTest, ReportsAShapeMismatchNamingTheTensorAndBothShapes) {
  // The config says intermediate_size 48; the tensors have 40.
  const std::string ckpt = checkpoint("run", {inline_config_text(48), {}});
  if (!root()) return;
  MergeOptions o = options(ckpt, "out");
  try {
    merge_checkpoint(o);
    ADD_FAILURE() << "merged mismatched shapes";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("model.layers.0.mlp.gate_proj.weight' has shape [40, 32]"), std::string::npos)
        << m;
    EXPECT_NE(m.find("[48, 32]"), std::string::npos) << m;
  }
  EXPECT_FALSE(exists(o.out_dir));
}

TEST_P(MergeTest, RejectsNamesThatAreNotHuggingFaceParameters) {
  Tensors weights = model_weights(tiny_config());
  weights.emplace_back("layers.0.extra.weight", at::ones({4, 4}));
  const std::string ckpt = checkpoint("run", {inline_config_text(), weights});
  if (!root()) return;
  try {
    merge_checkpoint(options(ckpt, "out"));
    ADD_FAILURE() << "merged a non-HF name";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("'/model/layers.0.extra.weight' is not a Hugging Face"),
              std::string::npos)
        << e.what();
  }
}

TEST_P(MergeTest, AFullDiskFailsAndLeavesNoPartialFiles) {
  const std::string ckpt = checkpoint("run", {});
  if (!root()) return;
  MergeOptions o = options(ckpt, "full");
  // A file-size limit below the export's size: write() fails with EFBIG, as with a full disk.
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  struct rlimit small = old;
  small.rlim_cur = 20000;
  void (*old_handler)(int) = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string error;
  try {
    merge_checkpoint(o);
  } catch (const MergeIoError& e) {
    error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(error.find(o.out_dir + "/model.safetensors.tmp"), std::string::npos) << error;
  EXPECT_FALSE(exists(o.out_dir)) << "the export's partial files (and its new folder) stay";
}

TEST_P(MergeTest, Hdf5FormatHoldsFullModelTensorsAndTheRootAttributes) {
  const Tensors weights = model_weights(tiny_config());
  const std::string ckpt = checkpoint("run", {inline_config_text(), weights});
  if (!root()) return;
  MergeOptions o = options(ckpt, "h5");
  o.format = ExportFormat::Hdf5;
  o.dtype = at::kBFloat16;
  merge_checkpoint(o);
  EXPECT_FALSE(exists(o.out_dir + "/model.h5.tmp"));
  StoreReader r(MPI_COMM_SELF, o.out_dir + "/model.h5");
  EXPECT_EQ(r.mode(), StoreMode::SharedFile);
  EXPECT_EQ(r.tensors().size(), weights.size());  // no /optim
  for (const auto& [name, t] : weights)
    EXPECT_TRUE(at::equal(r.read_full("model/" + name), t.to(at::kBFloat16))) << name;
  EXPECT_EQ(r.int_attribute("/", "step"), 7);
  EXPECT_EQ(r.string_attribute("/", "config"), inline_config_text());
  EXPECT_EQ(r.int_vector_attribute("/", "mesh"),
            (std::vector<int64_t>{1, 1, size_of(MPI_COMM_WORLD), 1}));
  EXPECT_EQ(r.string_attribute("/", "format"), kFormatName);
}

TEST_P(MergeTest, ModelFolderRunCopiesItsConfigAndTokenizerFiles) {
  // A run that fine-tuned from a local HF folder.
  const std::string here = __FILE__;
  const std::string fixture = here.substr(0, here.rfind('/')) + "/../fixtures/llama-tiny";
  const std::string folder = dir_ + "/base";
  if (root()) {
    make_directories(folder);
    write_file(folder + "/config.json", read_file(fixture + "/config.json"));
    write_file(folder + "/tokenizer.json", "{\"model\": {}}\n");
    write_file(folder + "/generation_config.json", "{\"bos_token_id\": 1}\n");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const model::ModelConfig base = model::ModelConfig::from_hf_folder(fixture);
  WriteSpec spec;
  spec.config_text = "model_name_or_path = \"" + folder + "\"\ntrain_dataset = \"gone.txt\"\n";
  spec.tensors = model_weights(base, 3);
  const std::string ckpt = checkpoint("run", spec);
  if (!root()) return;
  MergeOptions o = options(ckpt, "ft");
  o.dtype = at::kHalf;
  merge_checkpoint(o);
  EXPECT_EQ(read_file(o.out_dir + "/tokenizer.json"), "{\"model\": {}}\n");
  EXPECT_EQ(read_file(o.out_dir + "/generation_config.json"), "{\"bos_token_id\": 1}\n");
  EXPECT_FALSE(exists(o.out_dir + "/tokenizer.model"));
  auto expected = nlohmann::json::parse(read_file(fixture + "/config.json"));
  expected["dtype"] = "float16";
  expected["torch_dtype"] = "float16";
  EXPECT_EQ(nlohmann::json::parse(read_file(o.out_dir + "/config.json")), expected);
  const auto fp16 = model::read_safetensors(o.out_dir + "/model.safetensors");
  for (const auto& [name, t] : spec.tensors)
    EXPECT_TRUE(at::equal(fp16.at(name), t.to(at::kHalf))) << name;
}

TEST_P(MergeTest, InspectDescribesTheCheckpoint) {
  const std::string ckpt = checkpoint("run", {});
  if (!root()) return;
  const std::string text = inspect_checkpoint(ckpt);
  const int size = size_of(MPI_COMM_WORLD);
  for (const std::string& want :
       {std::string("lftrain-checkpoint, version 1"), std::string("tokens seen     7168"),
        "dp_shard=" + std::to_string(size), "world size      " + std::to_string(size),
        std::string("global batch    8"), std::string("engine          ddp"),
        std::string("lftrain version 0.1.0"), std::string("model/model.embed_tokens.weight"),
        std::string("[67, 32]"), std::string("optim/lm_head.weight/exp_avg_sq"),
        "written by " + std::to_string(size) + " rank",
        "model           " + std::to_string(model_weights(tiny_config()).size()) + " tensors, " +
            std::to_string(tiny_config().num_parameters()) + " parameters",
        std::string("llama 2 layers")})
    EXPECT_NE(text.find(want), std::string::npos) << "missing '" << want << "' in\n" << text;
}

INSTANTIATE_TEST_SUITE_P(Stores, MergeTest,
                         testing::Values(StoreMode::SharedFile, StoreMode::PerRank),
                         [](const testing::TestParamInfo<StoreMode>& info) {
                           return info.param == StoreMode::SharedFile ? "Shared" : "PerRank";
                         });

}  // namespace
}  // namespace lft::ckpt
