#!/usr/bin/env bash
# dpo_parity.sh BUILD_DIR: lftrain's stage-dpo logs equal LlamaFactory's classic trainer's (0.9.5 +
# TRL 0.24, run on the CPU by tools/lf-reference) for the same classic YAML file, on a tiny random
# fp32 Qwen3 (tools/make-v1-fixture.py) and inputs/data/arithmetic_pairs*.json, 5 steps of a global
# batch of all 8 pairs (4 x accumulation 2, so the sample order cannot matter): per step, loss,
# logps/chosen and logps/rejected within 1e-5 relative and rewards/accuracies equal, for pref_loss
# sigmoid, orpo, simpo with full and LoRA tuning, sigmoid with DoRA (use_dora) and QLoRA
# (quantization_bit: 4, NF4 with double quantization), sigmoid with pref_ftx 0.5, sigmoid on the
# sharegpt pairs, and lftrain with fsdp2 at 2 ranks against LlamaFactory at 1 rank. LlamaFactory's
# run of a case is recalled from tests/fixtures/peer_runs when these very inputs were run before
# (tools/peer-runs), else run live; a case that differs from a recalled run is judged by a live
# one. Skips (77) without tools/install-v1-env's .venv-v1. Run from anywhere.
#   LFT_PEER_RUNS=live|record                  run LlamaFactory live always / and record its runs
#   DPO_PARITY_CASES="sigmoid_full orpo_lora"  only these cases
#   DPO_PARITY_KEEP=1                          keep the work folder (printed)
#   DPO_PARITY_WORK=DIR                        work in DIR (made; kept); run again with the same
#                                              DIR, it reuses LlamaFactory's runs of unchanged YAMLs
#   DPO_PARITY_RERUN=1                         ... unless this is set
#   DPO_PARITY_REFERENCE_ONLY=1                LlamaFactory's side only (BUILD_DIR unused: "-")
set -u
[ $# -eq 1 ] || { echo "usage: dpo_parity.sh BUILD_DIR" >&2; exit 2; }
ref_only=${DPO_PARITY_REFERENCE_ONLY:-0}
if [ "$ref_only" = 1 ]; then build=
else
  build=$(cd "$1" && pwd) || exit 2
  [ -x "$build/lftrain" ] || { echo "dpo_parity: FAIL: no $build/lftrain"; exit 1; }
fi
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
py=.venv-v1/bin/python
skip() { echo "dpo_parity: SKIP: $*"; exit 77; }
if [ ! -x "$py" ] || ! "$py" -c 'import llamafactory, trl' 2>/dev/null; then
  skip "no LlamaFactory environment (.venv-v1 cannot import llamafactory, trl); run tools/install-v1-env"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [ -n "${DPO_PARITY_WORK:-}" ]; then
  mkdir -p "$DPO_PARITY_WORK" && work=$(cd "$DPO_PARITY_WORK" && pwd) || exit 2
  echo "dpo_parity: work folder $work"
else
  work=$(mktemp -d /tmp/lft-dpoparity-XXXXXX)
  if [ "${DPO_PARITY_KEEP:-0}" = 1 ]; then echo "dpo_parity: work folder $work"
  else trap 'rm -rf "$work"' EXIT; fi
fi
fail() { echo "dpo_parity: FAIL: $*"; exit 1; }

model=$work/model
# The model and its adapters, in one Python process (tests/e2e/tool_calls.py; a kept work folder
# that has them all is reused). PEFT starts lora_B at 0 (and lora_A from torch's RNG): both sides
# start from the LoRA adapter instead. LlamaFactory loads it with
# PeftModel.from_pretrained(is_trainable=True) and trains it with the adapter's r, alpha, dropout
# (0) and targets; its DPO reference model is then the base with the adapter disabled
# (create_ref_model gives None for lora; disable_adapter()), so the rewards are not 0 at step 1.
# The same for DoRA (use_dora: LlamaFactory 0.9.5's classic key; the adapter says it too).
if [ ! -f "$model/config.json" ] || [ ! -f "$work/adapter/adapter_config.json" ] ||
   [ ! -f "$work/adapter-dora/adapter_config.json" ]; then
  "$py" tests/e2e/tool_calls.py run make-v1-fixture "$model" \
    --then check-peft make-adapter "$model" "$work/adapter" --r 8 --alpha 16 --seed 0 \
    --then check-peft make-adapter "$model" "$work/adapter-dora" --r 8 --alpha 16 --seed 1 --dora >/dev/null ||
    fail "making the model and its adapters (tools/make-v1-fixture.py, tools/check-peft.py make-adapter)"
fi

# LD-DPO weighs the tokens of the longer answer beyond the shorter one's length: its cases need
# pairs whose answers differ in length (arithmetic_pairs' are equal), in both directions.
cat > "$work/dataset_info.json" <<'JSON'
{"ld_pairs": {"file_name": "ld_pairs.json", "ranking": true,
              "columns": {"prompt": "instruction", "query": "input", "chosen": "chosen", "rejected": "rejected"}}}
JSON
"$py" - "$work/ld_pairs.json" <<'PY'
import json, sys
pairs = []
for i in range(8):
    a, b = 7 * i + 3, 11 * i + 5
    right, wrong = str(a + b), str(a + b + 1 + i % 3)
    long = f"Adding {a} and {b}: the tens first, then the units, which gives {{}}."
    chosen, rejected = (long.format(right), wrong) if i % 2 else (right, long.format(wrong))
    pairs.append({"instruction": f"What is {a} + {b}?", "input": "", "chosen": chosen, "rejected": rejected})
json.dump(pairs, open(sys.argv[1], "w"), indent=1)
PY
ld="dataset: ld_pairs
dataset_dir: $work"

lora="finetuning_type: lora
adapter_name_or_path: $work/adapter"
# lftrain at 2 ranks: 2 x accumulation 2 x 2 ranks = the same 8 pairs a step. LlamaFactory runs
# the case named after the colon (1 rank, its own YAML: it refuses lftrain's `distributed`).
fsdp2="distributed: fsdp2
per_device_train_batch_size: 2"
# name|lftrain ranks|YAML lines after the common ones (which they replace, key by key)
# A name ending in _2 is name_of_the_1_rank_case + _fsdp2_2: LlamaFactory runs that case's YAML.
cases=(
  "sigmoid_full|1|"
  "sigmoid_lora|1|$lora"
  "sigmoid_dora|1|finetuning_type: lora
use_dora: true
adapter_name_or_path: $work/adapter-dora"
  "sigmoid_qlora|1|$lora
quantization_bit: 4"
  "orpo_full|1|pref_loss: orpo"
  "orpo_lora|1|pref_loss: orpo
$lora"
  "simpo_full|1|pref_loss: simpo"
  "simpo_lora|1|pref_loss: simpo
$lora"
  "sigmoid_ftx_full|1|pref_ftx: 0.5"
  "sigmoid_ld_full|1|ld_alpha: 0.5
$ld"
  "simpo_ld_lora|1|pref_loss: simpo
ld_alpha: 0.3
$ld
$lora"
  "sigmoid_sharegpt_full|1|dataset: arithmetic_pairs_sharegpt"
  "sigmoid_full_fsdp2_2|2|$fsdp2"
  "sigmoid_lora_fsdp2_2|2|$lora
$fsdp2"
)

# write_yaml FILE OUTPUT_DIR EXTRA_LINES (FILE keeps its time when unchanged: see the reuse below)
write_yaml() {
  local new=$1.new key
  {
    echo "model_name_or_path: $model"
    echo "stage: dpo"
    echo "do_train: true"
    echo "finetuning_type: full"
    echo "pref_beta: 0.1"
    echo "pref_loss: sigmoid"
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
    echo "learning_rate: 1.0e-3"
    echo "max_steps: 5"
    echo "lr_scheduler_type: constant"
    echo "warmup_steps: 0"
    echo "bf16: false"
    echo "fp16: false"
    echo "seed: 42"
  } > "$new"
  yaml_override "$new" "$3"
  if cmp -s "$new" "$1"; then rm -f "$new"; else mv "$new" "$1"; fi
}

. tests/e2e/peer_runs.sh
failed=() passed=0 summary=()
for entry in "${cases[@]}"; do
  name=${entry%%|*} np=${entry#*|} np=${np%%|*} extra=${entry#*|*|}
  case " ${DPO_PARITY_CASES:-$name} " in *" $name "*) ;; *) continue ;; esac
  dir=$work/$name
  mkdir -p "$dir"
  if [ "$np" -gt 1 ]; then
    # LlamaFactory: the 1-rank case's YAML; lftrain: that and the fsdp2 lines.
    base=${name%_fsdp2_2}
    base_extra=
    for e in "${cases[@]}"; do [ "${e%%|*}" = "$base" ] && base_extra=${e#*|*|}; done
    write_yaml "$dir/job.yaml" "$dir/lf" "$base_extra"
    write_yaml "$dir/job-lftrain.yaml" "$dir/lf" "$extra"
    lft_yaml=$dir/job-lftrain.yaml
  else
    write_yaml "$dir/job.yaml" "$dir/lf" "$extra"
    lft_yaml=$dir/job.yaml
  fi

  echo "dpo_parity: $name: LlamaFactory 1 rank, lftrain $np rank(s)"
  # LlamaFactory's run: recorded when these very inputs were run before (tools/peer-runs), else live.
  key=$(tools/peer-runs key --sub "$work=@WORK@" "$dir/job.yaml" "$model" "$work/adapter" "$work/adapter-dora" \
        "$work/dataset_info.json" "$work/ld_pairs.json" inputs/dataset_info.json inputs/data) || fail "tools/peer-runs key"
  reference=$dir/lf/lf-steps.jsonl
  if [ -f "$reference" ] && [ "$reference" -nt "$dir/job.yaml" ] &&
     [ "${DPO_PARITY_RERUN:-0}" != 1 ]; then  # DPO_PARITY_WORK again: reuse LlamaFactory's run
    echo "dpo_parity: $name: reusing $reference (DPO_PARITY_RERUN=1 runs it again)"
    peer_source=reused
  elif [ "$ref_only" = 1 ]; then  # LlamaFactory's own lines are wanted: run it
    lf_classic_run "$name" "$dir" || continue
    tools/peer-runs record "dpo_parity-$name" "$key" "$reference"
  else
    peer_obtain "dpo_parity-$name" "$key" "$reference" lf_classic_run "$name" "$dir" || continue
  fi
  if [ "$ref_only" = 1 ]; then
    grep '^lf-reference: step' "$dir/lf.out" | sed "s/^lf-reference:/dpo_parity: $name:/"
    passed=$((passed + 1)); continue
  fi
  if ! mpirun --oversubscribe --bind-to none -np "$np" "$build/lftrain" "$lft_yaml" \
       output_dir="$dir/lftrain" >"$dir/lftrain.log" 2>&1; then
    tail -20 "$dir/lftrain.log"
    failed+=("$name (lftrain failed: mpirun -np $np $build/lftrain $lft_yaml output_dir=$dir/lftrain)")
    continue
  fi
  compare() {
    python3 tests/e2e/compare_dpo_logs.py "$name" "$reference" "$dir/lftrain/trainer_log.jsonl" 1e-5 >"$dir/compare.txt"
  }
  peer_judge compare lf_classic_run "$name" "$dir"
  case $? in
    0) passed=$((passed + 1)); echo "$(tail -1 "$dir/compare.txt") ($peer_source LlamaFactory run)" ;;  # the whole table: $dir/compare.txt
    1) failed+=("$name"); cat "$dir/compare.txt" ;;
    *) continue ;;  # lf_classic_run reported it
  esac
  summary+=("$(grep "^$name: max rel diff" "$dir/compare.txt")")
done
if [ ${#summary[@]} -gt 0 ]; then
  echo "dpo_parity: max differences, lftrain vs LlamaFactory:"
  printf '  %s\n' "${summary[@]}"
fi
[ ${#failed[@]} -eq 0 ] || { IFS=';'; fail "${failed[*]}"; }
if [ "$ref_only" = 1 ]; then echo "dpo_parity: PASS (LlamaFactory only: $passed cases)"
else echo "dpo_parity: PASS ($passed cases)"; fi
