#!/usr/bin/env bash
# v1_examples.sh BUILD_DIR: every file of inputs/llamafactory/v1 (LlamaFactory 0.9.5's
# examples/v1 and the guide's YAMLs) and of inputs/llamafactory/v1/main (main's examples/v1: no
# `template`, top-level topology keys, DPO, Muon, expert parallelism), only paths changed, trains a
# few steps at 2 ranks, or is refused with its reason; the start-up log of each says it read a v1
# YAML. main's DPO file has no DPO key: it runs with stage=dpo (`llamafactory-cli dpo`); its
# Qwen3.5-MoE file runs on a tiny Qwen3-MoE at ep 2 (its ep_size 16 needs 16 ranks). Run from the
# repository root.
set -u
build=$1
out=$(mktemp -d /tmp/lft-v1-XXXXXX)
trap 'rm -rf "$out"' EXIT
fail() { echo "v1_examples: FAIL: $*"; exit 1; }
model="$out/tiny-chatml"
"$build/lftrain" --init-model "$model" --tokenizer tests/fixtures/tokenizers/qwen2 inputs/tiny_chatml.toml >/dev/null \
  || fail "making the model"
moe="$out/tiny-qwen3-moe"
"$build/lftrain" --init-model "$moe" --tokenizer tests/fixtures/tokenizers/qwen2 inputs/tiny_qwen3_moe.toml >/dev/null \
  || fail "making the mixture-of-experts model"

# The reason each refused file must give.
declare -A refused=(
  [export_lora]="run the file with lfmerge"
  [main/export_lora]="run the file with lfmerge"
  [main/train_multimodal]='content of type "image_url" is not supported'
)
# What a file needs beyond its model: main's `llamafactory-cli dpo`, and the MoE file's model.
declare -A extra=(
  [main/train_lora_dpo]="stage=dpo"
  [main/train_full_qwen3_moe_fsdpturbo_ep_fsdp]="dist_config.ep_size=2"
)
for file in inputs/llamafactory/v1/*.yaml inputs/llamafactory/v1/main/*.yaml; do
  name=$(basename "$file" .yaml)
  case $file in */main/*) name=main/$name;; esac
  case $name in *v1_sft_demo | main/v1_*_demo) continue;; esac  # dataset files
  key=model; case $name in guide_*) key=model_name_or_path;; esac
  with=$model; case $name in *moe*) with=$moe;; esac
  # shellcheck disable=SC2086
  text=$(mpirun --oversubscribe --bind-to none -np 2 "$build/lftrain" "$file" "$key=$with" output_dir="$out/$name" \
         max_steps=2 cutoff_len=128 ${extra[$name]:-} 2>&1)
  rc=$?
  if [ -n "${refused[$name]:-}" ]; then
    [ $rc -eq 2 ] || { echo "$text" | tail -20; fail "$name: exit $rc, expected 2 (refused)"; }
    grep -qF -- "${refused[$name]}" <<<"$text" || { echo "$text" | tail -20; fail "$name: refused without '${refused[$name]}'"; }
    echo "v1_examples: $name: refused: ${refused[$name]}"
    continue
  fi
  [ $rc -eq 0 ] || { echo "$text" | tail -30; fail "$name exited $rc"; }
  grep -q "read as a LlamaFactory v1 YAML" <<<"$text" || fail "$name: the start-up log does not say it read a v1 YAML"
  grep -q "done: 2 steps" <<<"$text" || { echo "$text" | tail -20; fail "$name: did not train 2 steps"; }
  echo "v1_examples: $name: trained 2 steps"
done
# The guide's Ray file checks its worker count against the world.
text=$(mpirun --oversubscribe --bind-to none -np 1 "$build/lftrain" inputs/llamafactory/v1/guide_ray.yaml \
       model_name_or_path="$model" output_dir="$out/ray1" max_steps=1 2>&1) && fail "guide_ray at 1 rank trained"
grep -q "ray_num_workers = 2 but the job has 1 MPI ranks" <<<"$text" || { echo "$text" | tail; fail "guide_ray: no worker-count error"; }
echo "v1_examples: ok"
