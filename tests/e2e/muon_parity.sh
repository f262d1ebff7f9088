#!/usr/bin/env bash
# muon_parity.sh BUILD_DIR: Muon (use_muon) as LlamaFactory trains with it, on every engine.
#  1. LlamaFactory's classic trainer (0.9.5, run on the CPU by tools/lf-reference; its
#     third_party/muon is byte for byte main's) and lftrain on the same classic YAML with
#     use_muon: true and weight_decay 0.1: a tiny random fp32 Qwen3 (tools/make-v1-fixture.py),
#     arithmetic_alpaca, 10 steps of one micro-batch of 8 sequences (cosine schedule), full and LoRA
#     (LoRA's factors take Muon as in the classic trainer). Per step the loss within 1e-5 relative.
#     LlamaFactory's run is recalled from tests/fixtures/peer_runs for inputs run before
#     (tools/peer-runs; LFT_PEER_RUNS=live runs it always), and run live where lftrain differs.
#  2. lftrain's engines at 2 and 4 ranks (ddp; fsdp2 and HSDP 2 x 2: FSDP2's per-parameter cut;
#     ZeRO-3: the flat cut of fsdp and ZeRO, uneven pieces; LoRA on fsdp2; megatron tp 2, tp 2 x
#     dp 2 with optim_grads_params or the distributed optimizer, pp 2 x tp 2: tp's boxes, rows of
#     them over the shard ranks; the matrices gathered whole over the group of their pieces and
#     dealt to its ranks) against its one-rank run:
#     step 1 within 1e-8, every step within 1e-5. Not bitwise: the gradients of two layouts differ
#     in their last bits (summation order), and Newton-Schulz runs in bf16, where such a difference
#     now and then rounds an element to the neighbouring bf16 value (Muon's mpi test shows the
#     gathering itself exact: the same gradients give the same weights bit for bit).
#  3. A checkpoint of a 2-rank fsdp2 Muon run (step 5, momentum buffers and AdamW moments) resumed on
#     one rank under ddp, and one of megatron tp 2 resumed under fsdp2 x 2, continue the
#     uninterrupted one-rank losses (1e-5).
# Part 1 skips without tools/install-v1-env's .venv-v1 (parts 2 and 3 still run). Run from anywhere.
#   MUON_PARITY_KEEP=1  keep the work folder (printed)
set -u
[ $# -eq 1 ] || { echo "usage: muon_parity.sh BUILD_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
fail() { echo "muon_parity: FAIL: $*"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d /tmp/lft-muon-XXXXXX)
if [ "${MUON_PARITY_KEEP:-0}" = 1 ]; then echo "muon_parity: work folder $work"; else trap 'rm -rf "$work"' EXIT; fi
have_lf=1
py=.venv-v1/bin/python
if [ ! -x "$py" ] || ! "$py" -c 'import llamafactory' 2>/dev/null; then have_lf=0; py=.venv/bin/python; fi

model=$work/model
"$py" tests/e2e/tool_calls.py run make-v1-fixture "$model" \
  --then check-peft make-adapter "$model" "$work/adapter" --r 8 --alpha 16 --seed 0 >/dev/null \
  || fail "making the model and its LoRA adapter (tools/make-v1-fixture.py, tools/check-peft.py)"

cat > "$work/job.yaml" <<YAML
model_name_or_path: $model
stage: sft
do_train: true
finetuning_type: full
use_muon: true
dataset: arithmetic_alpaca
dataset_dir: $root/inputs
template: qwen
cutoff_len: 128
max_samples: 8
overwrite_output_dir: true
logging_steps: 1
save_strategy: "no"
report_to: none
per_device_train_batch_size: 8
gradient_accumulation_steps: 1
learning_rate: 1.0e-3
weight_decay: 0.1
max_steps: 10
lr_scheduler_type: cosine
warmup_steps: 0
bf16: false
fp16: false
seed: 42
YAML
cp "$work/job.yaml" "$work/lora.yaml"
sed -i "s|^finetuning_type: full|finetuning_type: lora\nadapter_name_or_path: $work/adapter|" "$work/lora.yaml"

lftrain() {  # NP OUTPUT_DIR YAML OVERRIDES...
  local np=$1 out=$2 yaml=$3; shift 3
  mpirun --oversubscribe --bind-to none -np "$np" "$build/lftrain" "$yaml" output_dir="$out" \
    per_device_train_batch_size=$((8 / np)) "$@" </dev/null >"$out.log" 2>&1 || { tail -20 "$out.log"; return 1; }
}
compare() {  # NAME A B FIRST LAST RTOL
  local out
  out=$(python3 tests/e2e/compare_logs.py "$2/trainer_log.jsonl" "$3/trainer_log.jsonl" "$4" "$5" "$6") \
    || { echo "$out"; failed+=("$1"); return 1; }
  echo "muon_parity: $1: $out"
}

failed=()
for name in job lora; do
  lftrain 1 "$work/$name-1" "$work/$name.yaml" || fail "lftrain one rank ($name)"
  grep -q "optimizer  muon" "$work/$name-1.log" || { grep -i muon "$work/$name-1.log"; failed+=("$name: the start-up log names no Muon"); }
done

# 1. LlamaFactory: its run recorded when these very inputs were run before (tools/peer-runs), else
#    live; live also when lftrain differs from a recorded run (another CPU's fp32 rounding).
lf_run() {  # NAME
  tools/lf-reference --log "$work/lf-$1.log" "$work/$1.yaml" output_dir="$work/lf-$1" \
    >"$work/lf-$1.out" 2>"$work/lf-$1.err" || { cat "$work/lf-$1.err"; failed+=("$1 (LlamaFactory failed)"); return 1; }
  grep -q "Using Muon optimizer" "$work/lf-$1.log" || { failed+=("$1 (LlamaFactory did not use Muon)"); return 1; }
}
lf_compare() {  # (of $name; its report in $out)
  out=$(python3 tests/e2e/compare_logs.py "$work/lf-$name/lf-steps.jsonl" "$work/$name-1/trainer_log.jsonl" 1 10 1e-5 loss)
}
if [ "$have_lf" = 1 ]; then
  . tests/e2e/peer_runs.sh
  for name in job lora; do
    key=$(tools/peer-runs key --sub "$work=@WORK@" "$work/$name.yaml" "$model" "$work/adapter" \
          inputs/dataset_info.json inputs/data) || fail "tools/peer-runs key"
    peer_obtain "muon_parity-$name" "$key" "$work/lf-$name/lf-steps.jsonl" lf_run "$name" || continue
    peer_judge lf_compare lf_run "$name"
    case $? in
      0) echo "muon_parity: LlamaFactory ($peer_source run) vs lftrain, $name: $out" ;;
      1) echo "$out"; failed+=("LlamaFactory $name") ;;
    esac  # 2: lf_run reported it
  done
else
  echo "muon_parity: part 1 skipped (no .venv-v1 with LlamaFactory: tools/install-v1-env)"
fi

# 2. Engines against one rank.
while read -r np label overrides; do
  lftrain "$np" "$work/$label" "$work/job.yaml" $overrides || { failed+=("$label (lftrain failed)"); continue; }
  compare "$label step 1" "$work/job-1" "$work/$label" 1 1 1e-8 && compare "$label" "$work/job-1" "$work/$label" 1 10 1e-5
done <<EOF
2 ddp-2 distributed=ddp
4 fsdp2-4 distributed=fsdp2
4 zero3-4 distributed=deepspeed deepspeed=inputs/ds_z3_config.json
4 hsdp-4 distributed=fsdp2 mesh.dp_replicate=2
2 megatron-tp2 distributed=megatron mesh.tp=2 dist_config.sequence_parallel=true per_device_train_batch_size=8
4 megatron-tp2-zero3 distributed=megatron mesh.tp=2 dist_config.data_parallel_sharding_strategy=optim_grads_params per_device_train_batch_size=4
4 megatron-tp2-distopt distributed=megatron mesh.tp=2 dist_config.use_distributed_optimizer=true per_device_train_batch_size=4
4 megatron-pp2-tp2 distributed=megatron mesh.pp=2 mesh.tp=2 per_device_train_batch_size=4 gradient_accumulation_steps=2
EOF
lftrain 2 "$work/lora-fsdp2-2" "$work/lora.yaml" distributed=fsdp2 || failed+=("LoRA fsdp2 (lftrain failed)")
compare "LoRA fsdp2-2" "$work/lora-1" "$work/lora-fsdp2-2" 1 10 1e-5

# 3. Resume across engines and world sizes.
if lftrain 2 "$work/saved" "$work/job.yaml" distributed=fsdp2 save_strategy=steps save_steps=5 &&
   lftrain 1 "$work/resumed" "$work/job.yaml" distributed=ddp resume_from_checkpoint="$work/saved/checkpoint-5"; then
  compare "resumed at step 5 (fsdp2 x 2 -> ddp x 1)" "$work/job-1" "$work/resumed" 6 10 1e-5
else
  failed+=("save or resume")
fi
if lftrain 2 "$work/saved-tp" "$work/job.yaml" distributed=megatron mesh.tp=2 per_device_train_batch_size=8 \
     save_strategy=steps save_steps=5 &&
   lftrain 2 "$work/resumed-tp" "$work/job.yaml" distributed=fsdp2 resume_from_checkpoint="$work/saved-tp/checkpoint-5"; then
  compare "resumed at step 5 (megatron tp 2 -> fsdp2 x 2)" "$work/job-1" "$work/resumed-tp" 6 10 1e-5
else
  failed+=("save (megatron) or resume")
fi
mpirun --oversubscribe --bind-to none -np 1 "$build/lftrain" "$work/job.yaml" output_dir="$work/adamw" use_muon=false \
  resume_from_checkpoint="$work/saved/checkpoint-5" >"$work/adamw.log" 2>&1 && failed+=("a Muon checkpoint resumed under AdamW")
grep -q "saved by another optimizer" "$work/adamw.log" || { tail -5 "$work/adamw.log"; failed+=("resuming under AdamW: no clear error"); }

[ ${#failed[@]} -eq 0 ] || { IFS=';'; fail "${failed[*]}"; }
echo "muon_parity: PASS"
