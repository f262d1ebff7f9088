#!/usr/bin/env bash
# lf_main_parity.sh BUILD_DIR: lftrain = LlamaFactory main's v1 trainer on main's kind of file,
# against the losses main produced (tests/fixtures/llamafactory_main: recorded from main installed
# from its source; it cannot run in CI). Two v1 YAMLs on a tiny Qwen3 whose folder holds Qwen3's
# Jinja chat template: sft.yaml (no `template`: the model's own template, LlamaFactory main's
# labelling), muon.yaml (`optim_config: {name: muon}`) and tools.yaml (tool calls and tool
# definitions: LlamaFactory's glaive_toolcall_en_demo through v1's sharegpt converter). Per step the loss within 1e-5 relative
# (measured 9.5e-8 and 1.8e-6). The model is remade by tools/make-v1-fixture.py (seeded); when its
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
for job in sft muon tools; do
  job_data="$(cd "$(dirname "$data")" && pwd)/$(basename "$data")"
  [ "$job" = tools ] && job_data="$work/glaive.yaml"
  sed "s|MODEL|$work/model|; s|DATA|$job_data|; s|OUTPUT|$work/$job|" "$fixtures/$job.yaml" > "$work/$job.yaml"
  if ! mpirun --oversubscribe --bind-to none -np 1 "$build/lftrain" "$work/$job.yaml" </dev/null >"$work/$job.log" 2>&1; then
    tail -20 "$work/$job.log"; failed+=("$job (lftrain failed)"); continue
  fi
  grep -q "template model: $work/model/chat_template.jinja" "$work/$job.log" || failed+=("$job: not rendered with the model's template")
  out=$(python3 - "$fixtures/${job}_losses.json" "$work/$job/trainer_log.jsonl" <<'PY'
import json, sys
want = {r["step"]: r["loss"] for r in json.load(open(sys.argv[1]))}
got = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2])) if "loss" in r}
worst = max(abs(got[s] - want[s]) / abs(want[s]) for s in want)
print(f"loss of steps 1-{len(want)}, worst relative difference {worst:.2e}")
sys.exit(0 if worst <= 1e-5 else 1)
PY
) || { echo "lf_main_parity: $job: $out"; failed+=("$job"); continue; }
  echo "lf_main_parity: $job: LlamaFactory main vs lftrain: $out"
done
[ ${#failed[@]} -eq 0 ] || { IFS=';'; fail "${failed[*]}"; }
echo "lf_main_parity: PASS"
