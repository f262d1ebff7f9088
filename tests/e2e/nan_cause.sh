#!/usr/bin/env bash
# nan_cause.sh BUILD_DIR: a step whose loss cannot be finite for a reason lftrain can see says that
# reason, not the learning-rate advice (issue 50's general rule). A v1 file whose messages weight
# one conversation's every answer 0 (v1 keeps such a sequence): the step that draws it alone trains
# no token (0 / 0), and the run stops naming the sample and the weights. Run from the repository root.
set -u
[ $# -eq 1 ] || { echo "usage: nan_cause.sh BUILD_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
cd "$(dirname "$0")/../.." || exit 2
work=$(mktemp -d /tmp/lft-nan-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "nan_cause: FAIL: $*"; exit 1; }
.venv/bin/python tools/make-v1-fixture.py "$work/model" >/dev/null 2>&1 || fail "making the model (tools/make-v1-fixture.py)"
cat > "$work/data.jsonl" <<'EOF'
{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there", "loss_weight": 0.0}]}
{"messages": [{"role": "user", "content": "who are you"}, {"role": "assistant", "content": "a tiny model"}]}
EOF
cat > "$work/job.yaml" <<EOF
model: $work/model
template: qwen3_nothink
train_dataset: $work/data.jsonl
micro_batch_size: 1
global_batch_size: 1
cutoff_len: 64
learning_rate: 1.0e-3
max_steps: 2
output_dir: $work/out
EOF
text=$("$build/lftrain" "$work/job.yaml" 2>&1)
status=$?
echo "$text" | tail -5
[ "$status" -eq 1 ] || fail "exit status $status, wanted 1 (the step's failure)"
grep -q "Its global batch trains no token (a loss summed over a weight of 0): samples 0 of the training data" <<<"$text" ||
  fail "the message does not name the cause and the sample"
! grep -q "Lower learning_rate" <<<"$text" || fail "the learning-rate advice for a cause lftrain knows"
echo "nan_cause: PASS"
