// The checkpoint manifest: what save writes is what resume and lfmerge read (every field, a
// LoRA run's included), and a missing attribute or a newer format is an error that names it.
#include <ATen/ATen.h>
#include <stdlib.h>

#include <functional>
#include <string>

#include "lft/ckpt/checkpoint.h"
#include "lft/ckpt/manifest.h"
#include "lft/ckpt/tensor_store.h"
#include "mpi_test_util.h"

namespace lft::ckpt {
namespace {

using test::world;

std::string shared_temp_dir() { return test::shared_temp_dir("lft-manifest"); }

Manifest lora_run() {
  Manifest m;
  m.lftrain_version = "9.9.9";
  m.run.engine = "fsdp2";
  m.run.mesh = {1, 1, world().size(), 1, 1};
  m.run.world_size = world().size();
  m.run.config_text = "distributed = \"fsdp2\"\n# override: seed=3";
  m.run.config_file = "run.yaml";
  m.run.global_batch = 24;
  m.run.seed = 3;
  m.run.finetuning_type = "lora";
  m.run.base_model = "models/base";
  m.run.base_model_hash = "abc123";
  m.run.lora_rank = 8;
  m.run.lora_alpha = 16;
  m.run.lora_scaling = 2;
  m.run.lora_dropout = 0.05;
  m.run.use_rslora = true;
  m.run.lora_target = "q_proj,v_proj";
  m.run.additional_target = "lm_head";
  m.progress.step = 40;
  m.progress.tokens_seen = 123456;
  m.progress.loss_scale = 1024;
  m.progress.sampler = {2, 5, 77, 999, 24, world().size()};
  m.optimizer_steps = 40;
  m.optimizer_hyperparameters = {{"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}};
  return m;
}

// A store holding one tensor and, when `manifest`, the manifest.
std::string store_with(const std::string& path, const Manifest* manifest,
                       const std::function<void(StoreWriter&)>& extra = nullptr) {
  StoreWriter w(MPI_COMM_WORLD, path, StoreMode::SharedFile);
  w.write({Slice{"model/w", {1}, {0}, world().rank() == 0 ? at::ones({1}) : at::empty({0})}});
  if (manifest != nullptr) write_manifest(w, *manifest);
  if (extra) extra(w);
  w.close();
  return path;
}

TEST(Manifest, ReadsBackEveryFieldItWrote) {
  const std::string dir = shared_temp_dir();
  const Manifest m = lora_run();
  const Manifest r = read_manifest(StoreReader(MPI_COMM_WORLD, store_with(dir + "/a.h5", &m)), "a");
  EXPECT_EQ(r.format_version, 1) << "a checkpoint without DoRA stays readable by version-1 lftrains";
  EXPECT_FALSE(r.run.use_dora);
  EXPECT_EQ(r.lftrain_version, "9.9.9");
  EXPECT_EQ(r.run.engine, m.run.engine);
  EXPECT_EQ(r.run.mesh, m.run.mesh);
  EXPECT_EQ(r.run.world_size, m.run.world_size);
  EXPECT_EQ(r.run.config_text, m.run.config_text);
  EXPECT_EQ(r.run.config_file, m.run.config_file);
  EXPECT_EQ(r.run.global_batch, 24);
  EXPECT_EQ(r.run.seed, 3);
  EXPECT_EQ(r.run.finetuning_type, "lora");
  EXPECT_EQ(r.run.base_model, "models/base");
  EXPECT_EQ(r.run.base_model_hash, "abc123");
  EXPECT_EQ(r.run.lora_rank, 8);
  EXPECT_EQ(r.run.lora_alpha, 16);
  EXPECT_EQ(r.run.lora_scaling, 2);
  EXPECT_EQ(r.run.lora_dropout, 0.05);
  EXPECT_TRUE(r.run.use_rslora);
  EXPECT_EQ(r.run.lora_target, "q_proj,v_proj");
  EXPECT_EQ(r.run.additional_target, "lm_head");
  EXPECT_EQ(r.progress.step, 40);
  EXPECT_EQ(r.progress.tokens_seen, 123456);
  EXPECT_EQ(r.progress.loss_scale, 1024);
  EXPECT_EQ(r.progress.sampler.epoch, 2);
  EXPECT_EQ(r.progress.sampler.step_in_epoch, 5);
  EXPECT_EQ(r.progress.sampler.seed, 77u);
  EXPECT_EQ(r.progress.sampler.num_samples, 999);
  EXPECT_EQ(r.progress.sampler.global_batch, 24);
  EXPECT_EQ(r.progress.sampler.order_dp, world().size());
  EXPECT_EQ(r.optimizer_steps, 40);
  EXPECT_EQ(r.optimizer_hyperparameters, m.optimizer_hyperparameters);
}

TEST(Manifest, ADoraRunIsVersionTwo) {
  const std::string dir = shared_temp_dir();
  Manifest m = lora_run();
  m.run.use_dora = true;
  const Manifest r = read_manifest(StoreReader(MPI_COMM_WORLD, store_with(dir + "/dora.h5", &m)), "dora");
  EXPECT_EQ(r.format_version, 2) << "a version-1 reader would merge DoRA's adapters as plain LoRA";
  EXPECT_TRUE(r.run.use_dora);
}

TEST(Manifest, AFullRunLeavesTheFinetuningFieldsOut) {
  const std::string dir = shared_temp_dir();
  Manifest m = lora_run();
  m.run.finetuning_type = "full";
  m.progress.loss_scale = 0;
  const std::string path = store_with(dir + "/full.h5", &m);
  const StoreReader store(MPI_COMM_WORLD, path);
  EXPECT_FALSE(store.has_attribute("/", "finetuning_type"));
  EXPECT_FALSE(store.has_attribute("/", "lora_rank"));
  EXPECT_FALSE(store.has_attribute("/", "loss_scale"));
  const Manifest r = read_manifest(store, "full");
  EXPECT_EQ(r.run.finetuning_type, "full");
  EXPECT_EQ(r.run.lora_rank, 0);
  EXPECT_EQ(r.progress.loss_scale, 0);
}

TEST(Manifest, NamesAMissingAttributeAndRefusesANewerFormat) {
  const std::string dir = shared_temp_dir();
  // A LoRA manifest whose adapters' rank was never written: an older or foreign writer.
  const std::string partial = store_with(dir + "/partial.h5", nullptr, [](StoreWriter& w) {
    Manifest m = lora_run();
    m.run.finetuning_type = "freeze";  // writes no lora_* attributes
    write_manifest(w, m);
    w.set_attribute("/", "finetuning_type", std::string("lora"));
  });
  try {
    read_manifest(StoreReader(MPI_COMM_WORLD, partial), "ckpt-partial");
    ADD_FAILURE() << "read a LoRA manifest without lora_rank";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("ckpt-partial has no integer attribute 'lora_rank'"), std::string::npos) << m;
    EXPECT_NE(m.find("finetuning_type = \"lora\""), std::string::npos) << m;
  }
  const std::string newer = store_with(dir + "/newer.h5", nullptr, [](StoreWriter& w) {
    Manifest m = lora_run();
    m.format_version = kFormatVersion + 1;
    write_manifest(w, m);
  });
  EXPECT_THROW(read_manifest(StoreReader(MPI_COMM_WORLD, newer), "ckpt-newer"), CheckpointMismatch);
  const std::string bare = store_with(dir + "/bare.h5", nullptr);
  try {
    read_manifest(StoreReader(MPI_COMM_WORLD, bare), "bare");
    ADD_FAILURE() << "read a store without a manifest";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("not an lftrain checkpoint"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lft::ckpt
