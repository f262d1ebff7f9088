#!/usr/bin/env bash
# padding_free_layouts.sh BUILD_DIR TINY_MODEL: batching_strategy = "padding_free" (LlamaFactory
# v1's: each micro-batch's samples joined end to end in one row) trains the same steps as the
# padded micro-batches of the normal strategy, on one rank and on layouts that cut the joined row:
# megatron tp 2 with sequence parallelism (with pad_to_multiple_of 0 the row is padded to a multiple
# of tp all the same), context
# parallelism 2 (Ulysses), fsdp2 at 2 ranks. Losses within 1e-6 of the normal one-rank run's, and
# the joined rows' padding below the normal batches'. (Against v1 itself: job_v1_parity.)
#   PADDING_FREE_KEEP=1  keep the work folder (printed)
# Run from the repository root.
set -u
build=$1 tiny=$2
work=$(mktemp -d /tmp/lft-padfree-XXXXXX)
if [ "${PADDING_FREE_KEEP:-0}" = 1 ]; then echo "padding_free_layouts: work folder $work"
else trap 'rm -rf "$work"' EXIT; fi
fail() { echo "padding_free_layouts: FAIL: $*"; exit 1; }
# Global batch 4 sequences: 2 a micro-batch, 2 micro-batches a step on one data-parallel rank.
common=(inputs/sft_alpaca.toml model_name_or_path="$tiny" max_steps=3 logging_steps=1 save_steps=0
        plot_loss=false val_size=0 per_device_train_batch_size=2 gradient_accumulation_steps=2
        lr_scheduler_type=constant warmup_steps=0)
run() {  # NAME NP KEY=VALUE...
  local name=$1 np=$2; shift 2
  mpirun --oversubscribe --bind-to none -np "$np" "$build/lftrain" "${common[@]}" output_dir="$work/$name" "$@" \
    >"$work/$name.log" 2>&1 || { tail -20 "$work/$name.log"; fail "$name exited non-zero"; }
}
run normal_1 1 distributed=none
run joined_1 1 distributed=none batching_strategy=padding_free
grep -q "each micro-batch's joined in one row (padding_free)" "$work/joined_1.log" ||
  fail "joined_1: the plan does not say the micro-batches are joined"
# pad_to_multiple_of 0: the joined row's own length, padded to a multiple of tp for sequence parallelism.
run joined_tp2 2 distributed=megatron mesh.tp=2 dist_config.sequence_parallel=true batching_strategy=padding_free \
  pad_to_multiple_of=0
run joined_cp2 2 distributed=fsdp2 mesh.cp=2 batching_strategy=padding_free
run joined_fsdp2_2 2 distributed=fsdp2 gradient_accumulation_steps=1 batching_strategy=padding_free
for name in joined_1 joined_tp2 joined_cp2 joined_fsdp2_2; do
  python3 tests/e2e/compare_logs.py "$work/normal_1/trainer_log.jsonl" "$work/$name/trainer_log.jsonl" 1 3 1e-6 >/dev/null ||
    fail "$name's losses differ from the padded batches' ($(python3 tests/e2e/compare_logs.py "$work/normal_1/trainer_log.jsonl" "$work/$name/trainer_log.jsonl" 1 3 1e-6 2>&1))"
  echo "padding_free_layouts: $name = normal_1 ($(python3 tests/e2e/compare_logs.py "$work/normal_1/trainer_log.jsonl" "$work/$name/trainer_log.jsonl" 1 3 1 | sed 's/.*difference //'))"
done
python3 - "$work/normal_1/trainer_log.jsonl" "$work/joined_1/trainer_log.jsonl" <<'PY' || fail "the joined rows are not less padded"
import json, sys
padding = [sum(json.loads(l)["padding"] for l in open(p)) for p in sys.argv[1:]]
assert padding[1] < padding[0], padding
print(f"padding_free_layouts: padding per step {padding[0] / 3:.3f} (padded batches) -> {padding[1] / 3:.3f} (joined)")
PY
echo "padding_free_layouts: ok"
