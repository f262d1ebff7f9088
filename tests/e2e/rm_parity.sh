#!/usr/bin/env bash
# rm_parity.sh BUILD_DIR: lftrain's stage-rm logs equal LlamaFactory's classic trainer's (0.9.5 +
# TRL 0.24's AutoModelForCausalLMWithValueHead, run on the CPU by tools/lf-reference) for the same
# classic YAML file, on a tiny random fp32 Qwen3 (tools/make-v1-fixture.py, with a value head in
# value_head.safetensors and summary_dropout_prob 0 in config.json: TRL's dropout draws from torch's
# RNG) and inputs/data/arithmetic_pairs.json, 5 steps of a global batch of all 8 pairs (4 x
# accumulation 2): per step, loss and grad_norm within 1e-5 relative, for full, LoRA (the adapter's
# folder holding the value head, where LlamaFactory reads it) and freeze tuning, and lftrain with
# fsdp2 at 2 ranks against LlamaFactory at 1 rank; and lfmerge's export of a full run (the model and
# value_head.safetensors) scores alike in both (2 steps at learning rate 0, 1e-6). LlamaFactory's runs are recalled from
# tests/fixtures/peer_runs when these very inputs were run before (tools/peer-runs), else run live.
# Skips (77) without tools/install-v1-env's .venv-v1. Run from anywhere.
#   LFT_PEER_RUNS=live|record  run LlamaFactory live always / and record its runs
#   RM_PARITY_KEEP=1           keep the work folder (printed)
set -u
[ $# -eq 1 ] || { echo "usage: rm_parity.sh BUILD_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
py=.venv-v1/bin/python
if [ ! -x "$py" ] || ! "$py" -c 'import llamafactory, trl' 2>/dev/null; then
  echo "rm_parity: SKIP: no LlamaFactory environment (.venv-v1 cannot import llamafactory, trl); run tools/install-v1-env"
  exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d /tmp/lft-rmparity-XXXXXX)
if [ "${RM_PARITY_KEEP:-0}" = 1 ]; then echo "rm_parity: work folder $work"; else trap 'rm -rf "$work"' EXIT; fi
fail() { echo "rm_parity: FAIL: $*"; exit 1; }

model=$work/model
"$py" tests/e2e/tool_calls.py run make-v1-fixture "$model" \
  --then check-peft make-adapter "$model" "$work/adapter" --r 8 --alpha 16 --seed 0 >/dev/null ||
  fail "making the model and its LoRA adapter (tools/make-v1-fixture.py, tools/check-peft.py make-adapter)"
"$py" - "$model" <<'PY' || fail "adding the value head"
import json, sys, torch
from safetensors.torch import save_file
folder = sys.argv[1]
config = json.load(open(folder + "/config.json"))
config["summary_dropout_prob"] = 0.0
json.dump(config, open(folder + "/config.json", "w"), indent=2)
g = torch.Generator().manual_seed(7)
head = {"v_head.summary.weight": torch.randn(1, config["hidden_size"], generator=g) * 0.1,
        "v_head.summary.bias": torch.randn(1, generator=g) * 0.1}
save_file(head, folder + "/value_head.safetensors", metadata={"format": "pt"})
PY
cp "$model/value_head.safetensors" "$work/adapter/" || fail "copying the value head to the adapter"

fsdp2="distributed: fsdp2
per_device_train_batch_size: 2"
lora="finetuning_type: lora
adapter_name_or_path: $work/adapter"
# name|lftrain ranks|YAML lines after the common ones (replacing them key by key); a name ending
# in _fsdp2_2 is lftrain at 2 ranks against LlamaFactory's run of the 1-rank case before it.
cases=(
  "full|1|"
  "lora|1|$lora"
  "freeze|1|finetuning_type: freeze
freeze_trainable_layers: 1"
  "full_fsdp2_2|2|$fsdp2"
  "lora_fsdp2_2|2|$lora
$fsdp2"
)
write_yaml() {  # FILE OUTPUT_DIR EXTRA_LINES
  {
    echo "model_name_or_path: $model"
    echo "stage: rm"
    echo "do_train: true"
    echo "finetuning_type: full"
    echo "dataset: arithmetic_pairs"
    echo "dataset_dir: $root/inputs"
    echo "template: qwen"
    echo "cutoff_len: 128"
    echo "max_samples: 8"
    echo "output_dir: $2"
    echo "overwrite_output_dir: true"
    echo "logging_steps: 1"
    echo "save_strategy: \"no\""
    echo "report_to: none"
    echo "per_device_train_batch_size: 4"
    echo "gradient_accumulation_steps: 2"
    echo "learning_rate: 5.0e-4"
    echo "max_steps: 5"
    echo "lr_scheduler_type: constant"
    echo "warmup_steps: 0"
    echo "bf16: false"
    echo "fp16: false"
    echo "seed: 42"
  } > "$1"
  yaml_override "$1" "$3"
}

. tests/e2e/peer_runs.sh
failed=() passed=0
for entry in "${cases[@]}"; do
  name=${entry%%|*} np=${entry#*|} np=${np%%|*} extra=${entry#*|*|}
  dir=$work/$name
  mkdir -p "$dir"
  base_extra=$extra
  if [ "$np" -gt 1 ]; then  # LlamaFactory runs the 1-rank case's YAML (it refuses lftrain's `distributed`)
    base=${name%_fsdp2_2}
    for e in "${cases[@]}"; do [ "${e%%|*}" = "$base" ] && base_extra=${e#*|*|}; done
  fi
  write_yaml "$dir/job.yaml" "$dir/lf" "$base_extra"
  write_yaml "$dir/job-lftrain.yaml" "$dir/lf" "$extra"
  key=$(tools/peer-runs key --sub "$work=@WORK@" "$dir/job.yaml" "$model" "$work/adapter" \
        inputs/dataset_info.json inputs/data) || fail "tools/peer-runs key"
  reference=$dir/lf/lf-steps.jsonl
  peer_obtain "rm_parity-$name" "$key" "$reference" lf_classic_run "$name" "$dir" || continue
  if ! mpirun --oversubscribe --bind-to none -np "$np" "$build/lftrain" "$dir/job-lftrain.yaml" \
       output_dir="$dir/lftrain" >"$dir/lftrain.log" 2>&1; then
    tail -20 "$dir/lftrain.log"
    failed+=("$name (lftrain failed: mpirun -np $np $build/lftrain $dir/job-lftrain.yaml)")
    continue
  fi
  compare() {
    python3 tests/e2e/compare_dpo_logs.py --judge loss,grad_norm "$name" "$reference" \
      "$dir/lftrain/trainer_log.jsonl" 1e-5 >"$dir/compare.txt"
  }
  peer_judge compare lf_classic_run "$name" "$dir"
  case $? in
    0) passed=$((passed + 1)); echo "rm_parity: $(grep "max rel diff" "$dir/compare.txt") ($peer_source LlamaFactory run)" ;;
    1) failed+=("$name"); cat "$dir/compare.txt" ;;
    *) continue ;;
  esac
done

# The export: lfmerge's folder of a full run's checkpoint (model.safetensors, value_head.safetensors)
# read by LlamaFactory scores as lftrain reads it: 2 steps at learning rate 0, losses within 1e-6.
dir=$work/export
mkdir -p "$dir"
if mpirun --oversubscribe --bind-to none -np 1 "$build/lftrain" "$work/full/job-lftrain.yaml" output_dir="$dir/train" \
     save_strategy=steps save_steps=5 >"$dir/train.log" 2>&1 &&
   "$build/lfmerge" "$dir/train/checkpoint-5" --out "$dir/model" >"$dir/merge.log" 2>&1; then
  write_yaml "$dir/job.yaml" "$dir/lf" "model_name_or_path: $dir/model
learning_rate: 0.0
max_steps: 2"
  key=$(tools/peer-runs key --sub "$work=@WORK@" "$dir/job.yaml" "$dir/model" inputs/dataset_info.json inputs/data) ||
    fail "tools/peer-runs key"
  if peer_obtain "rm_parity-export" "$key" "$dir/lf/lf-steps.jsonl" lf_classic_run export "$dir"; then
    if mpirun --oversubscribe --bind-to none -np 1 "$build/lftrain" "$dir/job.yaml" output_dir="$dir/lftrain" \
         >"$dir/lftrain.log" 2>&1; then
      compare() {
        python3 tests/e2e/compare_dpo_logs.py --judge loss "export" "$dir/lf/lf-steps.jsonl" \
          "$dir/lftrain/trainer_log.jsonl" 1e-6 >"$dir/compare.txt"
      }
      peer_judge compare lf_classic_run export "$dir"
      case $? in
        0) passed=$((passed + 1)); echo "rm_parity: $(grep "max rel diff" "$dir/compare.txt") (lfmerge's export, read by both; $peer_source LlamaFactory run)" ;;
        1) failed+=("export (LlamaFactory reads lfmerge's export otherwise)"); cat "$dir/compare.txt" ;;
      esac
    else
      tail -20 "$dir/lftrain.log"; failed+=("export (lftrain on the export failed)")
    fi
  fi
else
  tail -20 "$dir/train.log" "$dir/merge.log"; failed+=("export (training or lfmerge failed)")
fi
[ ${#failed[@]} -eq 0 ] || { IFS=';'; fail "${failed[*]}"; }
echo "rm_parity: PASS ($passed cases)"
