#!/usr/bin/env bash
# rm_engines.sh BUILD_DIR TINY_MODEL: stage rm (a reward model: TRL's value head, pairwise loss) on
# every kind of engine and layout equals the one-rank run (fp32, the same starting weights, value
# head and pairs): ddp, fsdp2, ZeRO-3, megatron tp 2 with sequence parallelism, pp 2, context
# parallelism (Ulysses); LoRA on fsdp2 and megatron tp 2. Judged: the loss within 1e-6 at step 1
# and 1e-5 after, rewards/margins (a difference of nearby scores) within 1e-5 and 1e-4,
# rewards/accuracies equal; not the scores themselves: the pairwise loss does not change when every
# score moves alike, so the head's bias gets a gradient of 0 but for rounding, which AdamW turns
# into steps of up to the learning rate that differ between layouts. A full run resumed from its
# step-2 checkpoint on another engine and world size continues as the run that never stopped;
# lfmerge exports the model and value_head.safetensors, which score as the checkpoint does; the
# value head's dropout (TRL's summary_dropout_prob, 0.1 by default) changes the loss. The same for
# rm_head = score (LlamaFactory main's token classification head): layouts, LoRA, export, resume.
#   RM_ENGINES_KEEP=1  keep the work folder (printed)
# Run from the repository root.
set -u
build=$1 tiny=$2
work=$(mktemp -d /tmp/lft-rm-XXXXXX)
if [ "${RM_ENGINES_KEEP:-0}" = 1 ]; then echo "rm_engines: work folder $work"
else trap 'rm -rf "$work"' EXIT; fi
fail() { echo "rm_engines: FAIL: $*"; exit 1; }
# The layouts are compared without dropout (its masks follow the ranks' rows): a copy of the tiny
# model whose config.json sets summary_dropout_prob 0, as the LlamaFactory comparison does.
model=$work/model
mkdir -p "$model" && cp -r "$tiny"/. "$model"/ || fail "copying $tiny"
python3 - "$model/config.json" <<'PY' || fail "setting summary_dropout_prob"
import json, sys
c = json.load(open(sys.argv[1])); c["summary_dropout_prob"] = 0.0; json.dump(c, open(sys.argv[1], "w"), indent=2)
PY
common=(inputs/rm_alpaca.toml model_name_or_path="$model" max_steps=3 logging_steps=1 save_steps=0 plot_loss=false
        lr_scheduler_type=constant warmup_steps=0 learning_rate=5e-4 max_samples=32 per_device_train_batch_size=2)
run() {  # NAME NP KEY=VALUE...: trains into $work/NAME
  local name=$1 np=$2; shift 2
  local text
  text=$(mpirun --oversubscribe --bind-to none -np "$np" "$build/lftrain" "${common[@]}" output_dir="$work/$name" "$@" 2>&1) ||
    { echo "$text" | tail -30; fail "$name exited non-zero"; }
  grep -q "done: [0-9]* steps" <<<"$text" || { echo "$text" | tail -30; fail "$name did not finish"; }
  echo "$text" > "$work/$name.log"
}
same() {  # REFERENCE CASE [MARGINS]: losses (and score margins, a difference of nearby scores: 10x looser, or MARGINS) as the reference, accuracies equal
  local field=loss step1=1e-6 after=1e-5
  for field in loss rewards/margins; do
    [ "$field" = rewards/margins ] && step1=${3:-1e-5} after=${3:-1e-4}
    python3 tests/e2e/compare_logs.py "$work/$1/trainer_log.jsonl" "$work/$2/trainer_log.jsonl" 1 1 "$step1" "$field" >/dev/null ||
      fail "$2 differs from $1 at step 1 ($field)"
    python3 tests/e2e/compare_logs.py "$work/$1/trainer_log.jsonl" "$work/$2/trainer_log.jsonl" 1 3 "$after" "$field" >/dev/null ||
      fail "$2 differs from $1 ($field)"
  done
  python3 tests/e2e/compare_logs.py "$work/$1/trainer_log.jsonl" "$work/$2/trainer_log.jsonl" 1 3 0 rewards/accuracies >/dev/null ||
    fail "$2's rewards/accuracies differ from $1's"
  echo "rm_engines: $2 = $1 ($(python3 tests/e2e/compare_logs.py "$work/$1/trainer_log.jsonl" "$work/$2/trainer_log.jsonl" 1 3 1 loss | sed 's/.*difference //'))"
}

# Full fine-tuning: one rank, then every engine and layout at 2 ranks (global batch 8 pairs).
run full_1 1 distributed=none gradient_accumulation_steps=4 save_steps=3
python3 - "$work/full_1/trainer_log.jsonl" <<'PY' || fail "full_1: the log lacks the reward model's fields"
import json, sys
r = json.loads(open(sys.argv[1]).readline())
for k in ("loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins"):
    assert k in r, k
assert "logps/chosen" not in r, r
PY
grep -q "reward model: value head" "$work/full_1.log" || fail "full_1: the start-up log does not say it trains a reward model"
for engine in ddp fsdp2; do
  run "full_${engine}_2" 2 distributed="$engine" gradient_accumulation_steps=2
  same full_1 "full_${engine}_2"
done
run full_ds3_2 2 distributed=deepspeed deepspeed=inputs/ds_z3_config.json gradient_accumulation_steps=2
same full_1 full_ds3_2
run full_tp2 2 distributed=megatron mesh.tp=2 dist_config.sequence_parallel=true gradient_accumulation_steps=4
same full_1 full_tp2
run full_pp2 2 distributed=megatron mesh.pp=2 gradient_accumulation_steps=4
same full_1 full_pp2
run full_cp2 2 distributed=fsdp2 mesh.cp=2 gradient_accumulation_steps=4
same full_1 full_cp2

# LoRA: the value head trains beside the adapters (freeze: job_rm_parity).
run lora_1 1 distributed=none finetuning_type=lora gradient_accumulation_steps=4
run lora_fsdp2_2 2 distributed=fsdp2 finetuning_type=lora gradient_accumulation_steps=2
same lora_1 lora_fsdp2_2
run lora_tp2 2 distributed=megatron mesh.tp=2 finetuning_type=lora gradient_accumulation_steps=4
same lora_1 lora_tp2

# Resume: stop after step 2 (its checkpoint), go on at another world size and engine.
run resume_a 2 distributed=fsdp2 gradient_accumulation_steps=2 save_steps=2
text=$(mpirun --oversubscribe --bind-to none -np 1 "$build/lftrain" "${common[@]}" output_dir="$work/resume_b" \
       distributed=none gradient_accumulation_steps=4 resume_from_checkpoint="$work/resume_a/checkpoint-2" 2>&1) ||
  { echo "$text" | tail -30; fail "resuming exited non-zero"; }
python3 tests/e2e/compare_logs.py "$work/full_1/trainer_log.jsonl" "$work/resume_b/trainer_log.jsonl" 3 3 1e-5 >/dev/null ||
  fail "the resumed step 3 differs from the uninterrupted run's"
echo "rm_engines: resumed at step 2 (fsdp2 x2 -> none x1): step 3 = the uninterrupted run's"

# Export: the model as LlamaFactory saves a reward model (model.safetensors without the head, and
# value_head.safetensors). A run from the export at learning rate 0 scores as the checkpoint does:
# its steps 4-6 equal those of a run resumed from the checkpoint at learning rate 0 (the same
# batches, the same weights throughout).
"$build/lfmerge" "$work/full_1/checkpoint-3" --out "$work/exported" >"$work/merge.log" 2>&1 ||
  { tail -20 "$work/merge.log"; fail "lfmerge of full_1/checkpoint-3"; }
grep -q "value_head.safetensors" "$work/merge.log" || fail "lfmerge's report does not name value_head.safetensors"
python3 - "$work/exported" <<'PY' || fail "the export's files"
import json, struct, sys
def names(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return {k for k in json.loads(f.read(n)) if k != "__metadata__"}
head = names(sys.argv[1] + "/value_head.safetensors")
assert head == {"v_head.summary.weight", "v_head.summary.bias"}, head
model = names(sys.argv[1] + "/model.safetensors")
assert not any(k.startswith("v_head") for k in model), model
assert "lm_head.weight" in model or json.load(open(sys.argv[1] + "/config.json")).get("tie_word_embeddings"), model
assert json.load(open(sys.argv[1] + "/config.json"))["summary_dropout_prob"] == 0.0
PY
run from_export 1 distributed=none gradient_accumulation_steps=4 model_name_or_path="$work/exported" max_steps=6 learning_rate=0
grep -q "the value head (v_head.summary) from $work/exported/value_head.safetensors" "$work/from_export.log" ||
  fail "the run from the export did not read its value head"
text=$(mpirun --oversubscribe --bind-to none -np 1 "$build/lftrain" "${common[@]}" output_dir="$work/resume_lr0" \
       distributed=none gradient_accumulation_steps=4 max_steps=6 learning_rate=0 \
       resume_from_checkpoint="$work/full_1/checkpoint-3" 2>&1) || { echo "$text" | tail -30; fail "resuming at learning rate 0"; }
python3 tests/e2e/compare_logs.py "$work/resume_lr0/trainer_log.jsonl" "$work/from_export/trainer_log.jsonl" 4 6 1e-6 >/dev/null ||
  fail "the exported model scores otherwise than its checkpoint (steps 4-6 at learning rate 0)"
echo "rm_engines: lfmerge exports model.safetensors and value_head.safetensors, which score as the checkpoint"

# LlamaFactory main's reward model (rm_head = score: transformers' token classification, no LM
# head): every layout equals its one-rank run; lfmerge exports ...ForTokenClassification with the
# head in model.safetensors, and a run from that folder (which reads its score head) scores as the
# checkpoint does. Its head starts at main's std 1 / (10 hidden): margins of ~1e-6, of which the
# layouts' fp32 summation orders move the last 3e-4 (judged at 1e-3; the loss as everywhere).
run score_1 1 distributed=none gradient_accumulation_steps=4 rm_head=score save_steps=3
grep -q "reward model: score, token classification" "$work/score_1.log" || fail "score_1: the start-up log does not name the score head"
run score_fsdp2_2 2 distributed=fsdp2 gradient_accumulation_steps=2 rm_head=score
same score_1 score_fsdp2_2 1e-3
run score_tp2 2 distributed=megatron mesh.tp=2 dist_config.sequence_parallel=true gradient_accumulation_steps=4 rm_head=score
same score_1 score_tp2 1e-3
run score_pp2 2 distributed=megatron mesh.pp=2 gradient_accumulation_steps=4 rm_head=score
same score_1 score_pp2 1e-3
run score_lora_1 1 distributed=none finetuning_type=lora gradient_accumulation_steps=4 rm_head=score save_steps=3
run score_lora_fsdp2_2 2 distributed=fsdp2 finetuning_type=lora gradient_accumulation_steps=2 rm_head=score
same score_lora_1 score_lora_fsdp2_2 1e-3
"$build/lfmerge" "$work/score_1/checkpoint-3" --out "$work/score_exported" >"$work/score_merge.log" 2>&1 ||
  { tail -20 "$work/score_merge.log"; fail "lfmerge of score_1/checkpoint-3"; }
python3 - "$work/score_exported" <<'PY' || fail "the score head export's files"
import json, os, struct, sys
with open(sys.argv[1] + "/model.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    names = {k for k in json.loads(f.read(n)) if k != "__metadata__"}
assert {"score.weight", "score.bias"} <= names and "lm_head.weight" not in names, names
assert not os.path.exists(sys.argv[1] + "/value_head.safetensors")
c = json.load(open(sys.argv[1] + "/config.json"))
assert c["architectures"][0].endswith("ForTokenClassification") and c["id2label"] == {"0": "LABEL_0"}, c
PY
run score_from_export 1 distributed=none gradient_accumulation_steps=4 model_name_or_path="$work/score_exported" max_steps=6 \
  learning_rate=0 rm_head=score
grep -q "the score head (score, token classification) from $work/score_exported/model.safetensors" "$work/score_from_export.log" ||
  fail "the run from the score head export did not read its head"
text=$(mpirun --oversubscribe --bind-to none -np 1 "$build/lftrain" "${common[@]}" output_dir="$work/score_lr0" rm_head=score \
       distributed=none gradient_accumulation_steps=4 max_steps=6 learning_rate=0 \
       resume_from_checkpoint="$work/score_1/checkpoint-3" 2>&1) || { echo "$text" | tail -30; fail "resuming the score head at learning rate 0"; }
python3 tests/e2e/compare_logs.py "$work/score_lr0/trainer_log.jsonl" "$work/score_from_export/trainer_log.jsonl" 4 6 1e-6 >/dev/null ||
  fail "the exported score head model scores otherwise than its checkpoint (steps 4-6 at learning rate 0)"
# LoRA's: PEFT's adapter (task TOKEN_CLS, the trained score among modules_to_save) on the base's
# token classifier, merged by PEFT, equals lfmerge's merged export.
"$build/lfmerge" "$work/score_lora_1/checkpoint-3" --out "$work/score_lora_merged" >/dev/null 2>&1 &&
  "$build/lfmerge" "$work/score_lora_1/checkpoint-3" --out "$work/score_lora_peft" --format peft >/dev/null 2>&1 ||
  fail "lfmerge of score_lora_1/checkpoint-3"
TRANSFORMERS_VERBOSITY=error .venv/bin/python - "$tiny" "$work/score_lora_peft" "$work/score_lora_merged" <<'PY' 2>/dev/null ||
import sys
from peft import PeftModel
from transformers import AutoModelForTokenClassification
base = AutoModelForTokenClassification.from_pretrained(sys.argv[1], num_labels=1)
peft = PeftModel.from_pretrained(base, sys.argv[2]).merge_and_unload().state_dict()
merged = AutoModelForTokenClassification.from_pretrained(sys.argv[3]).state_dict()
assert peft.keys() == merged.keys(), set(peft) ^ set(merged)
worst = max((peft[k] - merged[k]).abs().max().item() for k in merged)
assert worst <= 1e-6, worst
PY
  fail "PEFT's merge of the score head LoRA adapter differs from lfmerge's merged export"
echo "rm_engines: rm_head = score: layouts = one rank; lfmerge exports ...ForTokenClassification, which scores as the checkpoint, and a PEFT adapter (TOKEN_CLS) that PEFT merges to it"

# TRL's default dropout (config.json without summary_dropout_prob: 0.1) draws masks: the loss at
# step 1 differs from the dropout-free run's, and the same seed draws it again.
common[1]=model_name_or_path=$tiny
run dropout_a 1 distributed=none gradient_accumulation_steps=4
run dropout_b 1 distributed=none gradient_accumulation_steps=4
python3 tests/e2e/compare_logs.py "$work/dropout_a/trainer_log.jsonl" "$work/dropout_b/trainer_log.jsonl" 1 3 0 >/dev/null ||
  fail "two runs with the value head's dropout differ"
python3 tests/e2e/compare_logs.py "$work/full_1/trainer_log.jsonl" "$work/dropout_a/trainer_log.jsonl" 1 1 1e-3 >/dev/null &&
  fail "the value head's dropout (summary_dropout_prob 0.1) did not change the loss"
echo "rm_engines: the value head's dropout (0.1 without summary_dropout_prob) changes the loss, alike on every run"
echo "rm_engines: ok"
