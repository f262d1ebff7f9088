#!/usr/bin/env bash
# lf_main_parity.sh BUILD_DIR: lftrain = LlamaFactory main's v1 trainer on main's kind of file,
# against the losses main produced (tests/fixtures/llamafactory_main: recorded from main installed
# from its source; it cannot run in CI). Two v1 YAMLs on a tiny Qwen3 whose folder holds Qwen3's
# Jinja chat template: sft.yaml (no `template`: the model's own template, LlamaFactory main's
# labelling), muon.yaml (`optim_config: {name: muon}`), tools.yaml (tool calls and tool
# definitions: LlamaFactory's glaive_toolcall_en_demo through v1's sharegpt converter), and main's
# `llamafactory-cli dpo` on its v1_dpo_demo pairs: dpo.yaml (sigmoid with ld_alpha, micro-batches
# of one pair) and dpo_mb2.yaml (sigmoid with pref_ftx, two pairs a micro-batch), recorded with
# main's joined pair row kept as two sequences (README.md: main's mask lets the rejected answer
# attend to the chosen one; lftrain keeps them apart). Per step the loss within 1e-5 of
# max(|loss|, 1) (a DPO loss near 0 is a difference of log-probabilities in the thousands).
# rm.yaml: main's `llamafactory-cli rm` (model_class: cls) on the same pairs, from the score head
# main drew (rm_head.safetensors, put in the model folder: main draws a new one at every start),
# recorded with the same mask fixed; lfmerge's export of it loads in transformers as
# ...ForTokenClassification with nothing missing or unexpected, its score weight main's after the
# same steps (rm_trained_head.safetensors, 1e-5); ...ForSequenceClassification reads it too.
# dpo_mb2 runs at 2 ranks too, against main at 2 ranks: main weighs each micro-batch's loss by
# its trained tokens, so its DPO loss depends on which pairs share a micro-batch, which its
# per-rank sampler changes with the world size (lftrain follows it: pref_loss_weighting). The model is remade by tools/make-v1-fixture.py (seeded); when its
# bytes differ from the recorded model's (another torch or CPU), that is printed and the comparison
# still runs. Run from anywhere.
set -u
[ $# -eq 1 ] || { echo "usage: lf_main_parity.sh BUILD_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
cd "$(dirname "$0")/../.." || exit 2
fail() { echo "lf_main_parity: FAIL: $*"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
data=${LFT_SHARED_DATA:-../shared/data}/v1_sft_demo.jsonl
[ -f "$data" ] || fail "no $data (the shared data)"
work=$(mktemp -d /tmp/lft-lfmain-XXXXXX)
trap 'rm -rf "$work"' EXIT
fixtures=tests/fixtures/llamafactory_main
.venv/bin/python tools/make-v1-fixture.py "$work/model" >/dev/null 2>&1 || fail "making the model (tools/make-v1-fixture.py)"
cp tests/fixtures/chat_templates/Qwen-Qwen3-0.6B.jinja "$work/model/chat_template.jinja"
sha256sum "$work/model/model.safetensors" | grep -q '^f7cd71545bc8d8b3ce32eea8b42ff47e08b64dd589501c78f7698810b0806dee' ||
  echo "lf_main_parity: note: the remade model's bytes differ from the recorded one's (another torch or CPU)"
failed=()
# tools: LlamaFactory's glaive_toolcall_en_demo (its first 120 records) through v1's sharegpt
# converter: function_call turns, tool results and each record's tools.
printf 'glaive:\n  path: %s\n  source: local\n  converter: sharegpt\n' "$PWD/$fixtures/glaive_toolcall_en_demo.json" \
  > "$work/glaive.yaml"
# The reward model's folder: the model with the score head main drew.
cp -r "$work/model" "$work/rm_model"
.venv/bin/python - "$work/rm_model/model.safetensors" "$fixtures/rm_head.safetensors" <<'PY' || fail "adding the score head"
import sys
from safetensors.torch import load_file, save_file
model = load_file(sys.argv[1])
model.update(load_file(sys.argv[2]))
save_file(model, sys.argv[1], metadata={"format": "pt"})
PY
# JOB:RANKS; a run at more ranks is compared with main's at as many (its losses file NAME_npN).
for spec in sft:1 muon:1 tools:1 dpo:1 dpo_mb2:1 dpo_mb2:2 rm:1 rm:2; do
  job=${spec%:*} np=${spec#*:} name=${spec%:*} model=$work/model
  [ "$np" -gt 1 ] && name=${job}_np$np
  [ "$job" = rm ] && model=$work/rm_model
  case $job in
    tools) job_data="$work/glaive.yaml" ;;
    dpo* | rm) job_data="$PWD/inputs/llamafactory/v1/main/v1_dpo_demo.jsonl" ;;
    *) job_data="$(cd "$(dirname "$data")" && pwd)/$(basename "$data")" ;;
  esac
  sed "s|MODEL|$model|; s|DATA|$job_data|; s|OUTPUT|$work/$name|" "$fixtures/$job.yaml" > "$work/$name.yaml"
  if ! mpirun --oversubscribe --bind-to none -np "$np" "$build/lftrain" "$work/$name.yaml" </dev/null >"$work/$name.log" 2>&1; then
    tail -20 "$work/$name.log"; failed+=("$name (lftrain failed)"); continue
  fi
  grep -q "template model: $model/chat_template.jinja" "$work/$name.log" || failed+=("$name: not rendered with the model's template")
  out=$(python3 - "$fixtures/${name}_losses.json" "$work/$name/trainer_log.jsonl" <<'PY'
import json, sys
want = {r["step"]: r["loss"] for r in json.load(open(sys.argv[1]))}
got = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2])) if "loss" in r}
worst = max(abs(got[s] - want[s]) / max(abs(want[s]), 1.0) for s in want)
print(f"loss of steps 1-{len(want)}, worst difference {worst:.2e} of max(|loss|, 1)")
sys.exit(0 if worst <= 1e-5 else 1)
PY
) || { echo "lf_main_parity: $name: $out"; failed+=("$name"); continue; }
  echo "lf_main_parity: $name: LlamaFactory main vs lftrain: $out"
done
# The reward model's export: transformers' token classification, main's trained head.
if "$build/lfmerge" "$work/rm/checkpoint-2" --out "$work/rm_export" >"$work/rm_export.log" 2>&1; then
  out=$(TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1 .venv/bin/python - "$work/rm_export" "$fixtures/rm_trained_head.safetensors" <<'PY' 2>&1
import sys, torch
from safetensors.torch import load_file
from transformers import AutoModelForTokenClassification
model, info = AutoModelForTokenClassification.from_pretrained(sys.argv[1], output_loading_info=True)
bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
want = load_file(sys.argv[2])
weight = ((model.score.weight - want["score.weight"]).abs().max() / want["score.weight"].abs().max()).item()
# The bias cancels in every pair's chosen - rejected: main's moves only by its gradient's rounding
# residue, which Adam scales up (-1.4e-5 after 2 steps); lftrain's cancels exactly.
bias = (model.score.bias - want["score.bias"]).abs().max().item()
# transformers' sequence classification reads the same folder (the issue's ask; its score has no
# bias): a sequence's score is the token classifier's at its last token, less the bias.
from transformers import AutoModelForSequenceClassification
seq, seq_info = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], output_loading_info=True)
ids = torch.tensor([[5, 17, 99, 1000, 2000, 4000]])
with torch.no_grad():
    gap = abs(seq(ids).logits.item() - (model(ids).logits[0, -1, 0] - model.score.bias[0]).item())
seq_ok = not seq_info["missing_keys"] and set(seq_info["unexpected_keys"]) <= {"score.bias"} and gap <= 1e-6
print(f"{type(model).__name__}, num_labels {model.config.num_labels}, loading problems {bad or 'none'}, "
      f"score weight vs main's after 2 steps {weight:.2e} (bias {bias:.1e} apart); as {type(seq).__name__}: "
      f"unexpected {sorted(seq_info['unexpected_keys'])}, last-token score {gap:.1e} apart")
sys.exit(0 if not bad and model.config.num_labels == 1 and weight <= 1e-5 and bias <= 1e-4 and seq_ok else 1)
PY
) && echo "lf_main_parity: rm export: $out" || { echo "lf_main_parity: rm export: $out"; failed+=("rm export"); }
else
  tail -5 "$work/rm_export.log"; failed+=("rm export (lfmerge failed)")
fi
[ ${#failed[@]} -eq 0 ] || { IFS=';'; fail "${failed[*]}"; }
echo "lf_main_parity: PASS"
