#!/usr/bin/env bash
# dpo_engines.sh BUILD_DIR TINY_MODEL: stage dpo on every engine and layout equals the one-rank run
# (fp32, same starting weights and pairs): the loss and logps/chosen within 1e-6 at step 1 and 1e-5
# after, rewards/accuracies equal; full, LoRA and freeze; sigmoid, ipo, hinge and the
# reference-free orpo; a ref_model folder; context parallelism (Ulysses on fsdp2 and on ddp with ref_model, ring on ddp; cp 2);
# and a full run resumed from its step-2 checkpoint (the reference rebuilt from the starting
# weights by a second model) continues as the run that never stopped.
#   DPO_ENGINES_KEEP=1  keep the work folder (printed)
# Run from the repository root.
set -u
build=$1 tiny=$2
work=$(mktemp -d /tmp/lft-dpo-XXXXXX)
if [ "${DPO_ENGINES_KEEP:-0}" = 1 ]; then echo "dpo_engines: work folder $work"
else trap 'rm -rf "$work"' EXIT; fi
fail() { echo "dpo_engines: FAIL: $*"; exit 1; }
common=(inputs/dpo_alpaca.toml model_name_or_path="$tiny" max_steps=3 logging_steps=1 save_steps=0
        lr_scheduler_type=constant warmup_steps=0 learning_rate=2e-3 max_samples=32 per_device_train_batch_size=2)
run() {  # NAME NP KEY=VALUE...: trains into $work/NAME
  local name=$1 np=$2; shift 2
  local text
  text=$(mpirun --oversubscribe --bind-to none -np "$np" "$build/lftrain" "${common[@]}" output_dir="$work/$name" "$@" 2>&1) ||
    { echo "$text" | tail -30; fail "$name exited non-zero"; }
  grep -q "done: 3 steps" <<<"$text" || { echo "$text" | tail -30; fail "$name did not finish"; }
  echo "$text" > "$work/$name.log"
}
same() {  # REFERENCE CASE: losses and logps/chosen as the reference, accuracies equal
  for field in loss logps/chosen logps/rejected; do
    python3 tests/e2e/compare_logs.py "$work/$1/trainer_log.jsonl" "$work/$2/trainer_log.jsonl" 1 1 1e-6 "$field" >/dev/null ||
      fail "$2 differs from $1 at step 1 ($field)"
    python3 tests/e2e/compare_logs.py "$work/$1/trainer_log.jsonl" "$work/$2/trainer_log.jsonl" 1 3 1e-5 "$field" >/dev/null ||
      fail "$2 differs from $1 ($field)"
  done
  python3 tests/e2e/compare_logs.py "$work/$1/trainer_log.jsonl" "$work/$2/trainer_log.jsonl" 1 3 0 rewards/accuracies >/dev/null ||
    fail "$2's rewards/accuracies differ from $1's"
  echo "dpo_engines: $2 = $1 ($(python3 tests/e2e/compare_logs.py "$work/$1/trainer_log.jsonl" "$work/$2/trainer_log.jsonl" 1 3 1 loss | sed 's/.*difference //'))"
}

# Full fine-tuning, sigmoid: one rank, then every engine at 2 ranks (global batch 8 pairs).
run full_1 1 distributed=none gradient_accumulation_steps=4
grep -q "dpo: reference log-probabilities of 24 pairs from the starting weights" "$work/full_1.log" ||
  fail "full_1: no reference line"
[ -s "$work/full_1/training_rewards_accuracies.png" ] || fail "full_1: no training_rewards_accuracies.png (plot_loss)"
python3 - "$work/full_1/trainer_log.jsonl" <<'PY' || fail "full_1: the log lacks the DPO fields"
import json, sys
r = json.loads(open(sys.argv[1]).readline())
for k in ("loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected"):
    assert k in r, k
assert r["rewards/chosen"] == 0 and r["rewards/rejected"] == 0, r  # step 1: the policy is the reference
assert abs(r["loss"] - 0.6931471805599453) < 1e-6, r              # -log sigmoid(0)
PY
for engine in ddp fsdp2 fsdp; do
  run "full_${engine}_2" 2 distributed="$engine" gradient_accumulation_steps=2
  same full_1 "full_${engine}_2"
done
for z in 0 2 3; do
  run "full_ds${z}_2" 2 distributed=deepspeed deepspeed="inputs/ds_z${z}_config.json" gradient_accumulation_steps=2
  same full_1 "full_ds${z}_2"
done
run full_tp2 2 distributed=megatron mesh.tp=2 dist_config.sequence_parallel=true gradient_accumulation_steps=4
same full_1 full_tp2
# Context parallelism: a pair's chosen and rejected sequences split over the cp ranks; the pair
# terms see each sequence's whole log-probability (the separate reference model too).
run full_cp2 2 distributed=fsdp2 mesh.cp=2 gradient_accumulation_steps=4
same full_1 full_cp2
run full_ring2 2 distributed=ddp mesh.cp=2 dist_config.cp_mode=ring gradient_accumulation_steps=4
same full_1 full_ring2
run full_pp2 2 distributed=megatron mesh.pp=2 gradient_accumulation_steps=4
same full_1 full_pp2
run full_tp2_pp2 4 distributed=megatron mesh.tp=2 mesh.pp=2 gradient_accumulation_steps=4
same full_1 full_tp2_pp2
# ref_model: a second model, built by the engine as the policy is, from that folder (here the same
# weights, so the same numbers as the policy's own reference).
run ref_fsdp2_2 2 distributed=fsdp2 gradient_accumulation_steps=2 ref_model="$tiny"
grep -q "from ref_model $tiny" "$work/ref_fsdp2_2.log" || fail "ref_fsdp2_2: the reference is not ref_model"
same full_1 ref_fsdp2_2
run ref_cp2 2 distributed=ddp mesh.cp=2 gradient_accumulation_steps=4 ref_model="$tiny"
same full_1 ref_cp2
# ipo and hinge (their formulas: PreferenceLoss.*) on a sharded engine.
for loss in ipo hinge; do
  run "${loss}_1" 1 distributed=none pref_loss="$loss" gradient_accumulation_steps=4
  run "${loss}_ds3_2" 2 distributed=deepspeed deepspeed=inputs/ds_z3_config.json pref_loss="$loss" gradient_accumulation_steps=2
  same "${loss}_1" "${loss}_ds3_2"
done

# LoRA (the reference is the base with the adapters off) and freeze.
run lora_1 1 distributed=none finetuning_type=lora gradient_accumulation_steps=4
grep -q "from the base model (adapters off)" "$work/lora_1.log" || fail "lora_1: the reference is not the base"
run lora_fsdp2_2 2 distributed=fsdp2 finetuning_type=lora gradient_accumulation_steps=2
same lora_1 lora_fsdp2_2
run lora_tp2 2 distributed=megatron mesh.tp=2 finetuning_type=lora gradient_accumulation_steps=4
same lora_1 lora_tp2
run freeze_1 1 distributed=none finetuning_type=freeze gradient_accumulation_steps=4
run freeze_ddp_2 2 distributed=ddp finetuning_type=freeze gradient_accumulation_steps=2
same freeze_1 freeze_ddp_2

# orpo: reference-free, no reference pass.
run orpo_1 1 distributed=none pref_loss=orpo gradient_accumulation_steps=4
grep -q "reference log-probabilities" "$work/orpo_1.log" && fail "orpo_1 computed a reference"
run orpo_fsdp2_2 2 distributed=fsdp2 pref_loss=orpo gradient_accumulation_steps=2
same orpo_1 orpo_fsdp2_2

# Resume: stop after step 2 (its checkpoint), go on at another world size and engine.
run resume_a 2 distributed=fsdp2 gradient_accumulation_steps=2 max_steps=3 save_steps=2
text=$(mpirun --oversubscribe --bind-to none -np 1 "$build/lftrain" "${common[@]}" output_dir="$work/resume_b" \
       distributed=none gradient_accumulation_steps=4 resume_from_checkpoint="$work/resume_a/checkpoint-2" 2>&1) ||
  { echo "$text" | tail -30; fail "resuming exited non-zero"; }
grep -q "from the starting weights (a second model" <<<"$text" || { echo "$text" | tail -20; fail "the resumed run's reference"; }
python3 tests/e2e/compare_logs.py "$work/full_1/trainer_log.jsonl" "$work/resume_b/trainer_log.jsonl" 3 3 1e-5 >/dev/null ||
  fail "the resumed step 3 differs from the uninterrupted run's"
echo "dpo_engines: resumed at step 2 (fsdp2 x2 -> none x1): step 3 = the uninterrupted run's"
# The model folder replaced by other weights of the same shapes: the resumed run's reference would
# come from them, so the resume is refused, naming both (issue 50, case 7).
"$build/lftrain" --init-model "$work/other_model" --tokenizer tests/fixtures/tokenizers/llama3 inputs/tiny_llama3.toml \
  seed=7 >/dev/null 2>&1 || fail "writing another model folder"
text=$(mpirun --oversubscribe --bind-to none -np 1 "$build/lftrain" "${common[@]}" output_dir="$work/resume_c" \
       model_name_or_path="$work/other_model" distributed=none gradient_accumulation_steps=4 \
       resume_from_checkpoint="$work/resume_a/checkpoint-2" 2>&1) && { echo "$text" | tail -20; fail "resuming on other starting weights ran"; }
grep -q "started from $tiny (hash [0-9a-f]*); this run starts from $work/other_model (hash" <<<"$text" ||
  { echo "$text" | tail -20; fail "resuming on other starting weights: no message naming both"; }
echo "dpo_engines: a resume on replaced starting weights is refused, naming both"
echo "dpo_engines: ok"
