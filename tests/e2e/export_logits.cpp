// export_logits MODEL_DIR OUT_DIR [--adapter ADAPTER_DIR]: lftrain's model, loaded from a Hugging
// Face folder (what lfmerge exported), run on fixed input ids; with --adapter, a PEFT LoRA adapter
// folder loaded over it as adapter_name_or_path loads one. Writes OUT_DIR/ids.safetensors and
// OUT_DIR/logits.safetensors for tools/check-export.py (or tools/check-peft.py) to compare.
#include <ATen/ATen.h>

#include <cstdio>
#include <memory>
#include <string>

#include "lft/model/adapter_weights.h"
#include "lft/model/families.h"
#include "lft/model/finetuning.h"
#include "lft/model/hf_checkpoint.h"
#include "lft/model/model_config.h"
#include "lft/model/safetensors.h"

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 5 && std::string(argv[3]) == "--adapter")) {
    std::fprintf(stderr, "usage: export_logits MODEL_DIR OUT_DIR [--adapter ADAPTER_DIR]\n");
    return 2;
  }
  const auto config = lft::model::ModelConfig::from_hf_folder(argv[1]);
  const auto model = lft::model::create_causal_lm(config);
  if (argc == 5) {
    auto adapter = std::make_shared<const lft::model::PeftAdapter>(argv[4]);
    lft::model::apply_finetuning(*model, lft::model::adapter_spec(*adapter));
    lft::model::load_weights(*model, lft::model::FinetuningWeights(
                                         *model, std::make_unique<lft::model::HfWeights>(argv[1], *model, lft::model::is_lora_parameter),
                                         std::make_unique<lft::model::PeftAdapterWeights>(adapter), adapter));
  } else {
    lft::model::load_hf_checkpoint(*model, argv[1]);
  }
  const at::Tensor ids = (at::arange(32, at::kLong) * 7 + 3).remainder(config.vocab_size).view({2, 16});
  c10::NoGradGuard no_grad;
  const at::Tensor logits = model->forward(ids).contiguous();
  const std::string out = argv[2];
  lft::model::write_safetensors(out + "/ids.safetensors", {{"input_ids", ids}});
  lft::model::write_safetensors(out + "/logits.safetensors", {{"logits", logits}});
  std::printf("export_logits: %s%s -> logits %s\n", argv[1], argc == 5 ? (std::string(" + ") + argv[4]).c_str() : "",
              c10::str(logits.sizes()).c_str());
  return 0;
}
