#!/usr/bin/env bash
# v1_examples.sh BUILD_DIR: every file of inputs/llamafactory/v1 (LlamaFactory 0.9.5's
# examples/v1 and the guide's YAMLs, only paths changed) trains a few steps at 2 ranks, or is
# refused with its reason; the start-up log of each says it read a v1 YAML. Run from the repository root.
set -u
build=$1
out=$(mktemp -d /tmp/lft-v1-XXXXXX)
trap 'rm -rf "$out"' EXIT
fail() { echo "v1_examples: FAIL: $*"; exit 1; }
model="$out/tiny-chatml"
"$build/lftrain" --init-model "$model" --tokenizer tests/fixtures/tokenizers/qwen2 inputs/tiny_chatml.toml >/dev/null \
  || fail "making the model"

# The reason each refused file must give.
declare -A refused=(
  [export_lora]="run the file with lfmerge"
)
for file in inputs/llamafactory/v1/*.yaml; do
  name=$(basename "$file" .yaml)
  [ "$name" = v1_sft_demo ] && continue
  key=model; case $name in guide_*) key=model_name_or_path;; esac
  text=$(mpirun --oversubscribe --bind-to none -np 2 "$build/lftrain" "$file" "$key=$model" output_dir="$out/$name" \
         max_steps=2 cutoff_len=128 2>&1)
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
