// export_logits MODEL_DIR OUT_DIR: lftrain's model, loaded from a Hugging Face folder (what
// lfmerge exported), run on fixed input ids. Writes OUT_DIR/ids.safetensors and
// OUT_DIR/logits.safetensors for tools/check-export.py to compare with transformers.
#include <ATen/ATen.h>

#include <cstdio>

#include "lft/model/families.h"
#include "lft/model/hf_checkpoint.h"
#include "lft/model/model_config.h"
#include "lft/model/safetensors.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: export_logits MODEL_DIR OUT_DIR\n");
    return 2;
  }
  const auto config = lft::model::ModelConfig::from_hf_folder(argv[1]);
  const auto model = lft::model::create_causal_lm(config);
  lft::model::load_hf_checkpoint(*model, argv[1]);
  const at::Tensor ids = (at::arange(32, at::kLong) * 7 + 3).remainder(config.vocab_size).view({2, 16});
  c10::NoGradGuard no_grad;
  const at::Tensor logits = model->forward(ids).contiguous();
  const std::string out = argv[2];
  lft::model::write_safetensors(out + "/ids.safetensors", {{"input_ids", ids}});
  lft::model::write_safetensors(out + "/logits.safetensors", {{"logits", logits}});
  std::printf("export_logits: %s -> logits %s\n", argv[1], c10::str(logits.sizes()).c_str());
  return 0;
}
