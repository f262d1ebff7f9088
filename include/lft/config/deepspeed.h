// The DeepSpeed JSON file of distributed = "deepspeed" (key `deepspeed`), read as DeepSpeed and
// the Hugging Face Trainer read it: "auto" values are filled from the TOML, explicit values must
// agree with it. Every key of LlamaFactory's ds_z*_config.json files is either implemented (a
// field below) or accepted with a note that says why it has no effect; any other key is an error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lft/config/config.h"

namespace lft::config {

struct DeepSpeedConfig {
  std::string path;                 // the JSON file
  int zero_stage = 0;               // zero_optimization.stage, 0..3
  bool bf16 = false, fp16 = false;  // resolved (auto -> TOML's bf16 / fp16)
  // fp16 dynamic loss scaling (DeepSpeed meaning); loss_scale 0 = dynamic
  double loss_scale = 0.0;
  std::int64_t loss_scale_window = 1000;
  int initial_scale_power = 16;
  int hysteresis = 2;
  double min_loss_scale = 1.0;
  double gradient_clipping = 0.0;                       // resolved (auto -> TOML max_grad_norm)
  std::int64_t reduce_bucket_size = 500000000;          // elements (DeepSpeed default 5e8)
  std::int64_t allgather_bucket_size = 500000000;       // elements
  std::int64_t stage3_prefetch_bucket_size = 50000000;  // elements
  bool overlap_comm = false, reduce_scatter = true, contiguous_gradients = true;
  // offload_optimizer.device == "cpu" ("none" = false; "nvme" is an error: not implemented)
  bool offload_optimizer = false;
  bool offload_param = false;  // offload_param.device == "cpu" (ZeRO stage 3 only)
  bool pin_memory = false;     // the pin_memory of an offload to "cpu"
  // One log line per key accepted without effect:
  // "deepspeed <file>: <key> = <value> has no effect in lftrain: <why>"
  std::vector<std::string> notes;
};

// Reads the file cfg.string("deepspeed") (the schema has checked that it exists). `dp_size` is
// the number of data-parallel ranks, for train_batch_size. Throws ConfigError (exit 2) for
// malformed JSON (file:line:col), unknown keys, wrong types and ranges, features this build
// does not implement, and explicit values that contradict the TOML.
DeepSpeedConfig read_deepspeed_config(const Config& cfg, int dp_size);

}  // namespace lft::config
