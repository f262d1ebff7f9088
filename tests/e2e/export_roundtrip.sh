#!/usr/bin/env bash
# export_roundtrip.sh BUILD_DIR: train with lftrain, merge the checkpoint with lfmerge, load the
# export in Hugging Face transformers and compare its logits with lftrain's model on the same ids.
# Twice: the bundled Llama example under ddp, and a Qwen3 folder made by transformers, fine-tuned
# under fsdp2.
set -u
build=$1
out=$(mktemp -d /tmp/lft-export-XXXXXX)
trap 'rm -rf "$out"' EXIT
fail() { echo "export_roundtrip: FAIL: $*"; exit 1; }
[ -x .venv/bin/python ] && .venv/bin/python -c "import transformers" 2>/dev/null \
  || fail "transformers is not installed: run tools/install-python-env (make test does)"
mpirun --oversubscribe --bind-to none -np 2 "$build/lftrain" inputs/run.toml max_steps=6 \
  save_steps=3 output_dir="$out/run" > "$out/train.log" 2>&1 || { cat "$out/train.log"; fail "training"; }
"$build/lfmerge" --inspect "$out/run/checkpoint-6" || fail "lfmerge --inspect"
"$build/lfmerge" "$out/run/checkpoint-6" --out "$out/hf" || fail "lfmerge"
ls -la "$out/hf"
"$build/lfmerge" "$out/run/checkpoint-6" --out "$out/hf"; [ $? -eq 2 ] || fail "overwrite was not refused"
"$build/tests/export_logits" "$out/hf" "$out" || fail "export_logits"
.venv/bin/python tools/check-export.py "$out/hf" "$out/ids.safetensors" "$out/logits.safetensors" \
  || fail "transformers' logits differ from lftrain's"

# Qwen3: transformers writes a tiny folder (explicit head_dim, q/k norms); lftrain trains it.
.venv/bin/python - "$out/qwen3" <<'PY' || fail "writing the Qwen3 folder"
import sys, torch
from transformers import Qwen3Config, Qwen3ForCausalLM
torch.manual_seed(0)
config = Qwen3Config(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                     max_position_embeddings=128, tie_word_embeddings=False)
Qwen3ForCausalLM(config).save_pretrained(sys.argv[1])
PY
printf '%s\n' 'distributed = "fsdp2"' "model_name_or_path = \"$out/qwen3\"" 'tokenizer = "bytes"' \
  'train_dataset = "inputs/data/arithmetic.txt"' "output_dir = \"$out/qwen3-run\"" \
  'per_device_train_batch_size = 2' 'cutoff_len = 64' 'learning_rate = 1e-3' 'max_steps = 4' \
  'save_steps = 4' > "$out/qwen3.toml"
mpirun --oversubscribe --bind-to none -np 2 "$build/lftrain" "$out/qwen3.toml" \
  > "$out/qwen3-train.log" 2>&1 || { cat "$out/qwen3-train.log"; fail "training Qwen3"; }
"$build/lfmerge" "$out/qwen3-run/checkpoint-4" --out "$out/qwen3-hf" || fail "lfmerge (Qwen3)"
grep -q '"Qwen3ForCausalLM"' "$out/qwen3-hf/config.json" || fail "the Qwen3 export's config.json"
"$build/tests/export_logits" "$out/qwen3-hf" "$out" || fail "export_logits (Qwen3)"
.venv/bin/python tools/check-export.py "$out/qwen3-hf" "$out/ids.safetensors" "$out/logits.safetensors" \
  || fail "transformers' logits differ from lftrain's (Qwen3)"
echo "export_roundtrip: ok"
