// Loading a Hugging Face model folder under a sharding engine (fsdp2, fsdp; megatron reads its
// tensor-parallel boxes): each rank reads only the rows it keeps, into a model built without
// parameter memory. The folder (8 layers, bf16 weights in two
// safetensors shards with an index) is written by rank 0; the shards each rank ends up with must
// equal the same rows of a whole load, the losses of a run must equal the one-rank run from the
// same folder, and the tensor memory a rank allocates while loading must stay near its shards.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <list>
#include <map>
#include <optional>

#include "lft/config/config.h"
#include "lft/engine/mesh_plan.h"
#include "lft/engine/parallel_config.h"
#include "lft/engine/registry.h"
#include "lft/engine/run_plan.h"
#include "lft/model/hf_checkpoint.h"
#include "lft/model/init.h"
#include "lft/model/llama.h"
#include "lft/model/parameter_storage.h"
#include "lft/model/safetensors.h"
#include "lft/runtime/memory.h"
#include "lft/train/trainer.h"
#include "mpi_test_util.h"
#include "trainer_util.h"

namespace lft {
namespace {

using test::make_trainer;
using test::world;

model::ModelConfig folder_model() {
  model::ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 512;
  c.hidden_size = 128;
  c.intermediate_size = 352;
  c.num_hidden_layers = 8;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.dtype = "bfloat16";
  return c;
}

// Rank 0 writes the folder once per world size; every rank gets its path.
std::string model_folder() {
  const std::string dir = "/tmp/lft_shard_loading_np" + std::to_string(world().size());
  if (world().rank() == 0) {
    ::mkdir(dir.c_str(), 0755);
    model::LlamaForCausalLM m(folder_model());
    model::init_weights(*m, 11);
    std::map<std::string, at::Tensor> first, second;
    std::string index = "{\"metadata\": {}, \"weight_map\": {";
    bool comma = false;
    for (const auto& item : m->named_parameters()) {
      const bool late = item.key().rfind("model.layers.", 0) == 0 &&
                        std::stoi(item.key().substr(13)) >= 4;
      (late ? second : first)[item.key()] = item.value().detach().to(at::kBFloat16);
      index += std::string(comma ? ", " : "") + "\"" + item.key() + "\": \"" +
               (late ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors") + "\"";
      comma = true;
    }
    model::write_safetensors(dir + "/model-00001-of-00002.safetensors", first, {{"format", "pt"}});
    model::write_safetensors(dir + "/model-00002-of-00002.safetensors", second, {{"format", "pt"}});
    std::ofstream(dir + "/model.safetensors.index.json") << index << "}}\n";
    std::ofstream(dir + "/config.json") << folder_model().to_hf_json() << "\n";
  }
  world().barrier();
  return dir;
}

std::string run_toml(const std::string& engine, const std::string& folder, int micro, int accum) {
  return "distributed = \"" + engine + "\"\nmodel_name_or_path = \"" + folder + "\"\ntokenizer = \"bytes\"\n"
         "train_dataset = \"inputs/data/arithmetic.txt\"\nper_device_train_batch_size = " +
         std::to_string(micro) + "\n"
         "gradient_accumulation_steps = " + std::to_string(accum) + "\ncutoff_len = 32\n"
         "learning_rate = 1e-3\nmax_steps = 4\nseed = 5\n";
}


TEST(ShardLoading, ShardsEqualTheRowsOfAWholeLoad) {
  LFT_REQUIRE_RANKS(2);
  const std::string folder = model_folder();
  model::LlamaForCausalLM whole(folder_model());
  model::load_hf_checkpoint(*whole, folder);
  const auto params = whole->named_parameters();
  std::vector<std::string> engines{"fsdp2", "fsdp"};
  if (world().size() % 2 == 0) engines.push_back("megatron");  // tp 2 (x pp 2 at 4 ranks)
  for (const std::string& engine : engines) {
    SCOPED_TRACE(engine);
    std::string toml = run_toml(engine, folder, 2, engine == "megatron" ? 2 : 1);
    if (engine == "megatron") toml += "[mesh]\ntp = 2\npp = " + std::string(world().size() == 4 ? "2" : "1") + "\n";
    std::unique_ptr<DeviceMesh> mesh;
    auto trainer = make_trainer(toml, world(), mesh);
    ASSERT_TRUE(trainer->engine().reads_weight_shards());
    const auto pieces = trainer->engine().parameters();
    const auto names = trainer->engine().parameter_names();
    const auto boxes = trainer->engine().parameter_boxes();
    std::int64_t held = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      at::Tensor rows = *params.find(names[i]);
      for (std::size_t d = 0; d < boxes[i].offset.size(); ++d)
        rows = rows.narrow(static_cast<std::int64_t>(d), boxes[i].offset[d], pieces[i].size(static_cast<std::int64_t>(d)));
      EXPECT_TRUE(at::equal(pieces[i], rows)) << names[i];
      held += boxes[i].replica == 0 || engine != "megatron" ? pieces[i].numel() : 0;
    }
    std::int64_t all = held;
    MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(all, folder_model().num_parameters()) << "the shards tile the model";
  }
}

// The global batch is 8 sequences at every world size.
TEST(ShardLoading, LossesEqualTheOneRankRunFromTheSameFolder) {
  const int n = world().size();
  if (n == 1 || 8 % n != 0) GTEST_SKIP() << "runs at 2, 4 and 8 ranks";
  at::set_num_threads(1);
  const std::string folder = model_folder();
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  std::vector<double> reference, got;
  {
    std::unique_ptr<DeviceMesh> mesh;
    auto trainer = make_trainer(run_toml("none", folder, 2, 4), self, mesh);
    for (int i = 0; i < 4; ++i) reference.push_back(trainer->step().loss);
  }
  std::unique_ptr<DeviceMesh> mesh;
  const int micro = n == 8 ? 1 : 2;
  auto trainer = make_trainer(run_toml("fsdp2", folder, micro, 8 / (micro * n)), world(), mesh);
  for (int i = 0; i < 4; ++i) got.push_back(trainer->step().loss);
  EXPECT_EQ(got[0], reference[0]) << "step 1 from the same weights must be bitwise equal";
  for (std::size_t i = 1; i < got.size(); ++i)
    EXPECT_NEAR(got[i], reference[i], 1e-5 * reference[i]) << "step " << i + 1;
}

// While the model is built and its shards read, a rank allocates its fp32 shard and gradient
// shard (2 P / n for a model of P fp32 bytes) and one piece of rows at a time; a whole load
// allocates P before sharding.
TEST(ShardLoading, MemoryWhileLoadingIsTheShardsNotTheModel) {
  LFT_REQUIRE_RANKS(2);
  const std::string folder = model_folder();
  const int n = world().size();
  const double model_bytes = 4.0 * static_cast<double>(folder_model().num_parameters());
  const double largest = 4.0 * 512 * 128;  // embed_tokens / lm_head
  const config::Config cfg = config::parse_config(run_toml("fsdp2", folder, 2, 1), "load.toml");
  const engine::EngineInfo& info = engine::engine_for(cfg);
  DeviceMesh mesh(world(), engine::plan_mesh(cfg, info, n));
  const engine::RunPlan plan = engine::resolve_run_plan(cfg, mesh.shape());
  const engine::EngineContext ctx{mesh, plan};
  for (const bool shards : {true, false}) {
    reset_cpu_peak_bytes();
    const std::int64_t base = cpu_bytes_in_use();
    auto engine = info.create(ctx);
    std::optional<model::UnallocatedParameters> unallocated;
    if (shards) unallocated.emplace();
    model::LlamaForCausalLM m(folder_model());
    unallocated.reset();
    if (shards) engine->prepare_from(*m, model::HfWeights(folder, *m));
    else {
      model::load_hf_checkpoint(*m, folder);
      engine->prepare(*m);
    }
    const double peak = static_cast<double>(cpu_peak_bytes_in_use() - base);
    if (world().rank() == 0)
      std::printf("[ shard load ] %d ranks, %s: peak %.2f MB while loading; model %.2f MB, 2P/n %.2f MB\n",
                  n, shards ? "reading shards" : "whole load", peak / 1e6, model_bytes / 1e6,
                  2 * model_bytes / n / 1e6);
    if (shards) EXPECT_LE(peak, 2 * model_bytes / n + 2 * largest + 65536);
    else EXPECT_GE(peak, model_bytes);
  }
}

}  // namespace
}  // namespace lft
