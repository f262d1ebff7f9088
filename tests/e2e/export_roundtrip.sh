#!/usr/bin/env bash
# export_roundtrip.sh BUILD_DIR: train with lftrain, merge the checkpoint with lfmerge, load the
# export in Hugging Face transformers and compare its logits with lftrain's model on the same ids.
set -u
build=$1
out=$(mktemp -d /tmp/lft-export-XXXXXX)
trap 'rm -rf "$out"' EXIT
fail() { echo "export_roundtrip: FAIL: $*"; exit 1; }
[ -x .venv/bin/python ] && .venv/bin/python -c "import transformers" 2>/dev/null \
  || { echo "export_roundtrip: transformers is not installed (tools/install-python-env)"; exit 77; }
mpirun --oversubscribe --bind-to none -np 2 "$build/lftrain" inputs/run.toml max_steps=6 \
  save_steps=3 output_dir="$out/run" > "$out/train.log" 2>&1 || { cat "$out/train.log"; fail "training"; }
"$build/lfmerge" --inspect "$out/run/checkpoint-6" || fail "lfmerge --inspect"
"$build/lfmerge" "$out/run/checkpoint-6" --out "$out/hf" || fail "lfmerge"
ls -la "$out/hf"
"$build/lfmerge" "$out/run/checkpoint-6" --out "$out/hf"; [ $? -eq 2 ] || fail "overwrite was not refused"
"$build/tests/export_logits" "$out/hf" "$out" || fail "export_logits"
.venv/bin/python tools/check-export.py "$out/hf" "$out/ids.safetensors" "$out/logits.safetensors" \
  || fail "transformers' logits differ from lftrain's"
echo "export_roundtrip: ok"
