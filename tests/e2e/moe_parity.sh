#!/usr/bin/env bash
# moe_parity.sh BUILD_DIR: a mixture of experts fine-tuned by lftrain equals LlamaFactory's
# classic trainer (0.9.5 on transformers 5.6, run on the CPU by tools/lf-reference) on the same
# classic YAML file with moe_aux_loss_coef set: a tiny random fp32 Qwen3-MoE (8 experts,
# renormalised top-2; tools/make-v1-fixture.py --moe), arithmetic_alpaca, 5 steps of one
# micro-batch of 8 sequences (the auxiliary loss is over a forward's tokens, so both sides must
# cut the batch alike: one forward a step), full and LoRA (PEFT's adapter on q/k/v/o, the modules
# LlamaFactory's lora_target all finds in transformers 5's Qwen3-MoE). Per step the loss (which
# holds 0.01 x the auxiliary loss) within 1e-5 relative. Gradient checkpointing is off on both
# sides: under LlamaFactory's default (reentrant checkpointing) transformers 5 records the router
# logits in the no-grad forward, so the auxiliary loss's value is added but its gradient is lost
# (its gradient norm at step 1 is then the run's without the auxiliary loss); lftrain keeps the
# gradient either way. The gradient norms are printed, not judged: they differ by ~5e-5 relative
# in dense models too (the losses agree to 1e-7), which this issue leaves. Skips (77) without
# tools/install-v1-env's .venv-v1. Run from anywhere.
#   MOE_PARITY_KEEP=1  keep the work folder (printed)
set -u
[ $# -eq 1 ] || { echo "usage: moe_parity.sh BUILD_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
py=.venv-v1/bin/python
skip() { echo "moe_parity: SKIP: $*"; exit 77; }
fail() { echo "moe_parity: FAIL: $*"; exit 1; }
if [ ! -x "$py" ] || ! "$py" -c 'import llamafactory' 2>/dev/null; then
  skip "no LlamaFactory environment (.venv-v1 cannot import llamafactory); run tools/install-v1-env"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d /tmp/lft-moeparity-XXXXXX)
if [ "${MOE_PARITY_KEEP:-0}" = 1 ]; then echo "moe_parity: work folder $work"; else trap 'rm -rf "$work"' EXIT; fi

model=$work/model
"$py" tests/e2e/tool_calls.py run make-v1-fixture "$model" --moe \
  --then check-peft make-adapter "$model" "$work/adapter" --r 8 --alpha 16 --seed 0 \
  --targets q_proj,k_proj,v_proj,o_proj >/dev/null ||
  fail "making the model and its LoRA adapter (tools/make-v1-fixture.py --moe, tools/check-peft.py)"

write_yaml() {  # FILE OUTPUT_DIR EXTRA_LINES
  cat > "$1" <<YAML
model_name_or_path: $model
stage: sft
do_train: true
finetuning_type: full
moe_aux_loss_coef: 0.01
disable_gradient_checkpointing: true
dataset: arithmetic_alpaca
dataset_dir: $root/inputs
template: qwen
cutoff_len: 128
max_samples: 8
output_dir: $2
overwrite_output_dir: true
logging_steps: 1
save_strategy: "no"
report_to: none
per_device_train_batch_size: 8
gradient_accumulation_steps: 1
learning_rate: 1.0e-3
max_steps: 5
lr_scheduler_type: constant
warmup_steps: 0
bf16: false
fp16: false
seed: 42
YAML
  [ -n "$3" ] && { sed -i '/^finetuning_type:/d' "$1"; printf '%s\n' "$3" >> "$1"; }
}

failed=()
for name in full lora; do
  dir=$work/$name
  mkdir -p "$dir"
  extra=""
  [ "$name" = lora ] && extra="finetuning_type: lora
adapter_name_or_path: $work/adapter"
  write_yaml "$dir/job.yaml" "$dir/lf" "$extra"
  if ! tools/lf-reference --log "$dir/lf.log" "$dir/job.yaml" >"$dir/lf.out" 2>"$dir/lf.err"; then
    cat "$dir/lf.err"; failed+=("$name (LlamaFactory failed: tools/lf-reference $dir/job.yaml)"); continue
  fi
  if ! mpirun --oversubscribe --bind-to none -np 1 "$build/lftrain" "$dir/job.yaml" output_dir="$dir/lftrain" \
       >"$dir/lftrain.log" 2>&1; then
    tail -20 "$dir/lftrain.log"; failed+=("$name (lftrain failed)"); continue
  fi
  grep -q "aux_loss" "$dir/lftrain.log" || failed+=("$name (lftrain logged no aux_loss)")
  if ! out=$(python3 tests/e2e/compare_logs.py "$dir/lf/lf-steps.jsonl" "$dir/lftrain/trainer_log.jsonl" 1 5 1e-5 loss); then
    echo "$out"; failed+=("$name loss"); continue
  fi
  echo "moe_parity: $name: $out"
  out=$(python3 tests/e2e/compare_logs.py "$dir/lf/lf-steps.jsonl" "$dir/lftrain/trainer_log.jsonl" 1 5 1 grad_norm)
  echo "moe_parity: $name: (shown) $out"
done
[ ${#failed[@]} -eq 0 ] || { IFS=';'; fail "${failed[*]}"; }
echo "moe_parity: PASS (full and LoRA, 5 steps)"
