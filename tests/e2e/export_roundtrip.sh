#!/usr/bin/env bash
# export_roundtrip.sh BUILD_DIR: train with lftrain, merge the checkpoint with lfmerge, load the
# export in Hugging Face transformers and compare its logits with lftrain's model on the same ids.
# The bundled Llama example under ddp, and folders made by transformers fine-tuned: Qwen3 under
# fsdp2, Gemma2 under megatron tp 2, and mixtures of experts (exported in the Hub's layout, one
# tensor per expert): Qwen3-MoE under fsdp2 with its auxiliary loss, Mixtral under megatron tp 2.
set -u
build=$1
out=$(mktemp -d /tmp/lft-export-XXXXXX)
trap 'rm -rf "$out"' EXIT
fail() { echo "export_roundtrip: FAIL: $*"; exit 1; }
py=.venv/bin/python
[ -x $py ] && $py tests/e2e/tool_calls.py installed transformers \
  || fail "transformers is not installed: run tools/install-python-env (make test does)"

# The families' folders, made by transformers in one Python process (tests/e2e/tool_calls.py),
# and transformers' checks of every export in another, after the C++ steps.
$py - "$out" <<'PY' || fail "writing the family folders"
import sys

import torch
from transformers import (Gemma2Config, Gemma2ForCausalLM, MixtralConfig, MixtralForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

small = dict(vocab_size=300, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=128)
families = {
    # Qwen3: explicit head_dim, q/k norms.
    "qwen3": (Qwen3ForCausalLM, Qwen3Config(**small, intermediate_size=48, num_hidden_layers=2, head_dim=16,
                                            tie_word_embeddings=False)),
    # Gemma2: scaled embeddings, (1 + w) norms, soft-capped scores and logits,
    # query_pre_attn_scalar, a window on layers 0 and 2.
    "gemma2": (Gemma2ForCausalLM, Gemma2Config(**small, intermediate_size=48, num_hidden_layers=3, head_dim=16,
                                               query_pre_attn_scalar=24, attn_logit_softcapping=5.0,
                                               final_logit_softcapping=3.0, sliding_window=8)),
    # Mixtures of experts: the Hub layout and config.json's MoE fields back to transformers.
    "qwen3_moe": (Qwen3MoeForCausalLM, Qwen3MoeConfig(**small, intermediate_size=48, num_hidden_layers=2,
                                                      head_dim=16, num_experts=4, num_experts_per_tok=2,
                                                      moe_intermediate_size=24, norm_topk_prob=True,
                                                      mlp_only_layers=[1], tie_word_embeddings=False)),
    "mixtral": (MixtralForCausalLM, MixtralConfig(**small, intermediate_size=24, num_hidden_layers=2,
                                                  num_local_experts=4, num_experts_per_tok=2)),
}
for name, (model, config) in families.items():
    torch.manual_seed(0)
    model(config).save_pretrained(f"{sys.argv[1]}/{name}")
PY

mpirun --oversubscribe --bind-to none -np 2 "$build/lftrain" inputs/run.toml max_steps=6 \
  save_steps=3 output_dir="$out/run" > "$out/train.log" 2>&1 || { cat "$out/train.log"; fail "training"; }
"$build/lfmerge" --inspect "$out/run/checkpoint-6" || fail "lfmerge --inspect"
"$build/lfmerge" "$out/run/checkpoint-6" --out "$out/hf" || fail "lfmerge"
ls -la "$out/hf"
"$build/lfmerge" "$out/run/checkpoint-6" --out "$out/hf"; [ $? -eq 2 ] || fail "overwrite was not refused"
mkdir -p "$out/hf-logits"
"$build/tests/export_logits" "$out/hf" "$out/hf-logits" || fail "export_logits"

# A family folder (written above), trained by lftrain under ENGINE, exported, its logits kept for
# the check at the end.
# family_leg NAME ENGINE EXTRA_TOML CLASS
family_leg() {
  local name=$1 engine=$2 extra=$3 cls=$4
  printf '%s\n' "distributed = \"$engine\"" "model_name_or_path = \"$out/$name\"" 'tokenizer = "bytes"' \
    'train_dataset = "inputs/data/arithmetic.txt"' "output_dir = \"$out/$name-run\"" \
    'per_device_train_batch_size = 2' 'cutoff_len = 64' 'learning_rate = 1e-3' 'max_steps = 4' \
    'save_steps = 4' "$extra" > "$out/$name.toml"
  mpirun --oversubscribe --bind-to none -np 2 "$build/lftrain" "$out/$name.toml" \
    > "$out/$name-train.log" 2>&1 || { cat "$out/$name-train.log"; fail "training $name"; }
  "$build/lfmerge" "$out/$name-run/checkpoint-4" --out "$out/$name-hf" || fail "lfmerge ($name)"
  grep -q "\"${cls}ForCausalLM\"" "$out/$name-hf/config.json" || fail "the $name export's config.json"
  mkdir -p "$out/$name-hf-logits"
  "$build/tests/export_logits" "$out/$name-hf" "$out/$name-hf-logits" || fail "export_logits ($name)"
}

family_leg qwen3 fsdp2 "" Qwen3
# Gemma2 under megatron tp 2 (the tied head split by vocabulary rows).
family_leg gemma2 megatron "[mesh]
tp = 2" Gemma2
family_leg qwen3_moe fsdp2 "moe_aux_loss_coef = 0.01" Qwen3Moe
"$build/lfmerge" --inspect "$out/qwen3_moe-run/checkpoint-4" | grep -q "4 experts (top 2" \
  || fail "lfmerge --inspect names no experts"
family_leg mixtral megatron "[mesh]
tp = 2" Mixtral

# transformers loads every export with lftrain's logits.
$py - "$out" <<'PY' || fail "transformers' logits differ from lftrain's"
import sys

sys.path.insert(0, "tests/e2e")
from tool_calls import check, tool  # noqa: E402

export, out = tool("check-export"), sys.argv[1]
for name in ("hf", "qwen3-hf", "gemma2-hf", "qwen3_moe-hf", "mixtral-hf"):
    logits = f"{out}/{name}-logits"
    check(export, f"export_roundtrip: FAIL: transformers' logits differ from lftrain's ({name})", f"{out}/{name}",
          f"{logits}/ids.safetensors", f"{logits}/logits.safetensors")
PY
echo "export_roundtrip: ok"
