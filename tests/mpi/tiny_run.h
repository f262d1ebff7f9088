// A tiny training run for multi-rank tests: a 2-layer Llama on the bundled example data.
#pragma once

#include <string>

namespace lft::test {

inline std::string tiny_run(const std::string& engine, int micro, int accum,
                            const std::string& extra = "") {
  return "distributed = \"" + engine + "\"\n"
         "train_dataset = \"inputs/data/arithmetic.txt\"\n"
         "per_device_train_batch_size = " + std::to_string(micro) + "\n"
         "gradient_accumulation_steps = " + std::to_string(accum) + "\n"
         "cutoff_len = 32\nlearning_rate = 3e-3\nweight_decay = 0.01\nwarmup_steps = 2\n"
         "lr_scheduler_type = \"cosine\"\nmax_steps = 20\nseed = 7\n" + extra +
         "[model]\nvocab_size = 259\nhidden_size = 32\nintermediate_size = 64\n"
         "num_hidden_layers = 2\nnum_attention_heads = 4\nnum_key_value_heads = 2\n";
}

}  // namespace lft::test
