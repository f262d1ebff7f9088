// The trainer's options as the decoder reads them (train_config.cpp): what needs more than one key.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "lft/config/config.h"
#include "lft/engine/run_plan.h"
#include "lft/train/train_options.h"

namespace lft::train {
namespace {

std::string data_file() {
  static const std::string p = [] {
    std::string path = ::testing::TempDir() + "lft_test_train_options_data.txt";
    std::ofstream(path) << "1 + 2 = 3\n";
    return path;
  }();
  return p;
}

// Micro-batches are padded to pad_to_multiple_of, and under sequence parallelism to a multiple of
// tp as well (each tensor-parallel rank takes an equal slice of every sequence).
TEST(TrainOptions, PaddingTakesTheTensorParallelSizeUnderSequenceParallelism) {
  auto pad = [](int multiple, const std::string& sequence_parallel, int tp) {
    const config::Config cfg = config::parse_config(
        "distributed = \"megatron\"\ntrain_dataset = \"" + data_file() + "\"\ncutoff_len = 32\npad_to_multiple_of = " +
            std::to_string(multiple) + "\n[mesh]\ntp = " + std::to_string(tp) + "\n[dist_config]\nsequence_parallel = " +
            sequence_parallel + "\n[model]\nvocab_size = 259\nhidden_size = 32\nintermediate_size = 64\n"
            "num_hidden_layers = 2\nnum_attention_heads = 4\nnum_key_value_heads = 2\n",
        "megatron.toml");
    MeshShape mesh;
    mesh[MeshDim::TP] = tp;
    return train_options(cfg, engine::resolve_run_plan(cfg, mesh)).pad_multiple;
  };
  EXPECT_EQ(pad(3, "true", 2), 6);
  EXPECT_EQ(pad(3, "false", 2), 3);
  EXPECT_EQ(pad(3, "true", 1), 3);
  EXPECT_EQ(pad(0, "true", 2), 0);  // no padding asked: none added
}

}  // namespace
}  // namespace lft::train
