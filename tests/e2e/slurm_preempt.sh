#!/usr/bin/env bash
# slurm_preempt.sh BUILD_DIR
# slurm/train.sbatch survives a time-limit warning under a real (one-machine) Slurm: starts it
# with tools/slurm-local (as slurm_job.sh does), then
#   (1) reference: sbatch slurm/train.sbatch, 2 ranks, 300 steps, to completion (exit 0);
#   (2) interrupted: the same run; after >= 60 steps `scancel --signal=USR1 --batch` sends
#       SIGUSR1 to the batch shell only (the path of `#SBATCH --signal=B:USR1@120` before a time
#       limit). The script forwards it to srun, lftrain saves checkpoint-N and exits 75, the
#       script runs `scontrol requeue`, and the same job id runs again (released at once
#       instead of after Slurm's ~2 minute requeue hold), resumes from checkpoint-N and
#       completes with exit 0;
#   (3) the interrupted run's losses equal the reference's bitwise at every step 1..300 (same
#       world size), and no step is missing or repeated on either side of the checkpoint.
# Job state comes from `scontrol show job` (no accounting needed), polled with deadlines;
# `sbatch --wait` is not used: the test acts between the two runs of the job and bounds each
# phase on its own.
# Exits 0 on success, 1 on a failure, 77 (ctest: skipped) when Slurm cannot be started here
# (not root, no apt, no PMIx in srun, ...). Slurm is left running at the end.
set -u
cd "$(dirname "$0")/../.." || exit 1

[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 64; }
BUILD_DIR=$1
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$PWD/$BUILD_DIR" ;; esac
LFTRAIN="$BUILD_DIR/lftrain"
RUN=inputs/run.toml
STEPS=300
CUT_AFTER=60  # steps logged before the signal is sent

say() { echo "slurm_preempt: $*"; }
skip() { say "SKIPPED: $*"; exit 77; }

[ -x "$LFTRAIN" ] || { say "FAILED: no executable $LFTRAIN"; exit 1; }
[ -r "$RUN" ] || { say "FAILED: no $RUN in $PWD"; exit 1; }

tmp=$(mktemp -d /tmp/lftrain-slurm-preempt.XXXXXX)
chmod 755 "$tmp"  # the jobs write their output files and output_dirs here
jobs_submitted=()
cleanup() {
  # A job still queued (e.g. requeued when the test failed) must not run later into a deleted
  # folder.
  local j
  for j in "${jobs_submitted[@]}"; do timeout 10 scancel "$j" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# fail MESSAGE: prints the job outputs and Slurm's view, then exits 1.
fail() {
  local f j
  say "FAILED: $*"
  for f in "$tmp"/*.out; do
    [ -e "$f" ] || continue
    echo "----- $f (last 40 lines) -----"
    tail -n 40 "$f"
  done
  for j in "${jobs_submitted[@]}"; do
    echo "----- scontrol show job $j -----"
    timeout 10 scontrol show job "$j" 2>&1 | head -n 12
  done
  exit 1
}


# --- start Slurm ----------------------------------------------------------------------------
. tests/e2e/slurm_common.sh
start_local_slurm
[ -n "${SLURM_CONF:-}" ] || skip "tools/slurm-local start printed no SLURM_CONF"
export SLURM_CONF
timeout 30 srun --mpi=list 2>&1 | grep -qw pmix || skip "this srun has no PMIx plugin (srun --mpi=list)"

# What the batch script reads from the environment (sbatch passes it to the job).
export LFTRAIN_BIN="$LFTRAIN" CONFIG="$RUN"
unset LFTRAIN_FLAGS LFTRAIN_DIR

# --- helpers on `scontrol show job` ---------------------------------------------------------
# field JOBID NAME: the value of NAME=... (e.g. JobState, Reason, ExitCode, Restarts).
field() {
  timeout 10 scontrol show job "$1" 2>/dev/null | grep -Eo "(^|[[:space:]])$2=[^[:space:]]*" |
    head -n 1 | sed 's/^[[:space:]]*[^=]*=//'
}
is_final() {
  case "$1" in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | PREEMPTED | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) return 0 ;;
    *) return 1 ;;
  esac
}

# submit NAME OVERRIDES...: sbatch slurm/train.sbatch with 2 ranks; sets job_id and job_out.
submit() {
  local name=$1 out
  shift
  job_out="$tmp/$name.out"
  out=$(timeout 30 sbatch --parsable --job-name="lftrain-$name" --time=10 --ntasks=2 --overcommit \
    --output="$job_out" slurm/train.sbatch "$@" 2>&1) || fail "($name) sbatch: $out"
  job_id=${out%%;*}
  [[ "$job_id" =~ ^[0-9]+$ ]] || fail "($name) sbatch printed '$out', not a job id"
  jobs_submitted+=("$job_id")
  say "($name) job $job_id: sbatch slurm/train.sbatch $*"
}

# wait_final JOBID SECONDS: polls until the job is in a final state; sets state.
wait_final() {
  local id=$1 deadline=$((SECONDS + $2))
  while :; do
    state=$(field "$id" JobState)
    is_final "$state" && return 0
    [ $SECONDS -lt $deadline ] || fail "job $id is still ${state:-unknown} after $2 s"
    sleep 0.5
  done
}

# records FILE: the number of lines of a trainer log (0 when it does not exist yet).
records() { if [ -r "$1" ]; then wc -l <"$1"; else echo 0; fi; }

common=(max_steps=$STEPS logging_steps=1 save_steps=50)
t0=$SECONDS

# --- (1) reference: straight to the end -------------------------------------------------------
submit ref "${common[@]}" output_dir="$tmp/ref"
ref_id=$job_id
wait_final "$ref_id" 300
ref_exit=$(field "$ref_id" ExitCode)
[ "$state" = COMPLETED ] && [ "$ref_exit" = 0:0 ] ||
  fail "(ref) job $ref_id ended $state with ExitCode=$ref_exit, wanted COMPLETED 0:0"
[ "$(records "$tmp/ref/trainer_log.jsonl")" = $STEPS ] ||
  fail "(ref) $tmp/ref/trainer_log.jsonl has $(records "$tmp/ref/trainer_log.jsonl") records, wanted $STEPS"
say "(ref) job $ref_id COMPLETED, ExitCode=$ref_exit, $STEPS steps ($((SECONDS - t0)) s so far)"

# --- (2) interrupted: SIGUSR1 to the batch shell, checkpoint, requeue, resume -----------------
submit cut "${common[@]}" output_dir="$tmp/cut"
cut_id=$job_id
log="$tmp/cut/trainer_log.jsonl"
deadline=$((SECONDS + 120))
while [ "$(records "$log")" -lt $CUT_AFTER ]; do
  state=$(field "$cut_id" JobState)
  is_final "$state" && fail "(cut) job $cut_id ended ($state) before $CUT_AFTER steps"
  [ $SECONDS -lt $deadline ] || fail "(cut) fewer than $CUT_AFTER steps after 120 s"
  sleep 0.2
done
say "(cut) $(records "$log") steps logged: scancel --signal=USR1 --batch $cut_id"
timeout 10 scancel --signal=USR1 --batch "$cut_id" || fail "(cut) scancel --signal=USR1 --batch failed"

# The first run ends with exit 75 and requeues itself: Restarts becomes 1 and the job waits
# (PENDING) or already runs again. Keep the first run's log (a resumed run starts a new one).
deadline=$((SECONDS + 60))
while :; do
  restarts=$(field "$cut_id" Restarts)
  state=$(field "$cut_id" JobState)
  [ "${restarts:-0}" -ge 1 ] && [ "$state" != COMPLETING ] && break
  is_final "$state" && fail "(cut) job $cut_id ended ($state, ExitCode=$(field "$cut_id" ExitCode)) instead of requeueing"
  [ $SECONDS -lt $deadline ] || fail "(cut) job $cut_id not requeued 60 s after the signal (JobState=$state Restarts=$restarts)"
  sleep 0.2
done
cp "$log" "$tmp/cut-first.jsonl" 2>/dev/null || fail "(cut) no $log after the first run"
reason=$(field "$cut_id" Reason)
# Just after the requeue the scheduler may not have given the hold its reason yet (Reason=None):
# read as not held, the job waited out Slurm's 2 minute hold (162 s for this test, once in two).
deadline=$((SECONDS + 10))
while [ "$state" = PENDING ] && [ "$reason" = None ] && [ $SECONDS -lt $deadline ]; do
  sleep 0.2
  state=$(field "$cut_id" JobState) reason=$(field "$cut_id" Reason)
done
say "(cut) job $cut_id requeued (JobState=$state Reason=$reason Restarts=$restarts);" \
  "first run logged $(records "$tmp/cut-first.jsonl") steps"
# Slurm holds a requeued job until BeginTime = requeue + cred_expire (120 s) + 1 s. Release it
# now, but only once the first run is gone from the node, and not within the second of the
# requeue:
#  - slurmd refuses a credential made in the second it revoked the old one ("Killing
#    non-startable batch JobId=N: Job credential revoked": the job FAILS with exit 1);
#  - while the first run's slurmstepd for step N.0 still tears down, the new step N.0 cannot
#    bind its PMIx socket ("Cannot bind() UNIX socket .../stepd.slurm.pmix.N.0"), the launch
#    fails, and srun 22.05 still exits 0: the job would end COMPLETED without training.
if [ "$state" = PENDING ] && [ "$reason" = BeginTime ]; then
  deadline=$((SECONDS + 30))
  while ps -eo args= | grep -Eq "^slurmstepd: \[$cut_id\."; do
    [ $SECONDS -lt $deadline ] || fail "(cut) the first run's slurmstepd still runs 30 s after the requeue"
    sleep 0.2
  done
  sleep 2
  say "(cut) first run gone from the node; scontrol update JobId=$cut_id StartTime=now" \
    "(instead of waiting ~2 minutes)"
  timeout 10 scontrol update JobId="$cut_id" StartTime=now || fail "(cut) could not release job $cut_id"
fi
wait_final "$cut_id" 300
cut_exit=$(field "$cut_id" ExitCode)
restarts=$(field "$cut_id" Restarts)
[ "$state" = COMPLETED ] && [ "$cut_exit" = 0:0 ] ||
  fail "(cut) job $cut_id ended $state with ExitCode=$cut_exit, wanted COMPLETED 0:0"
[ "$restarts" = 1 ] || fail "(cut) job $cut_id Restarts=$restarts, wanted 1"
say "(cut) job $cut_id COMPLETED, ExitCode=$cut_exit, Restarts=$restarts ($((SECONDS - t0)) s so far)"

# The output file (appended across the requeue) tells the story.
out="$tmp/cut.out"
n=$(grep -Eo 'stopped on a signal at step [0-9]+' "$out" | grep -Eo '[0-9]+$' | head -n 1)
[ -n "$n" ] || fail "(cut) $out has no 'stopped on a signal at step N'"
[ "$n" -ge $CUT_AFTER ] && [ "$n" -lt $STEPS ] || fail "(cut) stopped at step $n, wanted $CUT_AFTER..$((STEPS - 1))"
expect_in "$out" \
  "train.sbatch: job $cut_id on" "restart 0," \
  "train.sbatch: got SIGUSR1; sending SIGUSR1 to srun" \
  "lftrain: received signal 10 " "stopping with a checkpoint at the next step boundary" \
  "saved $tmp/cut/checkpoint-$n in " \
  "exit status 75 asks the batch script to requeue the job" \
  "train.sbatch: lftrain saved a checkpoint and asked to be requeued; requeueing job $cut_id" \
  "restart 1," "resume: $tmp/cut/checkpoint-$n at step $n" \
  "done: $STEPS steps" || fail "(cut) job output"
[ -f "$tmp/cut/checkpoint-$n/COMPLETE" ] || fail "(cut) no $tmp/cut/checkpoint-$n/COMPLETE"
echo "----- job $cut_id output, the lines about the stop and the requeue ($out) -----"
grep -E '^train\.sbatch:|received signal|^saved |^stopped on|^resume:|^done:|^srun: error|^slurmstepd' "$out"
echo "-----"
say "(cut) signal -> checkpoint-$n -> exit 75 -> requeue -> resume at step $n -> done"

# --- (3) the same losses, bitwise, and no step missing -----------------------------------------
python3 - "$tmp/ref/trainer_log.jsonl" "$tmp/cut-first.jsonl" "$log" "$n" "$STEPS" <<'EOF' ||
import json, sys
ref_path, first_path, final_path, n, total = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
load = lambda p: [json.loads(line) for line in open(p) if line.strip()]
ref, first, final = load(ref_path), load(first_path), load(final_path)
# The resumed run's log: the whole file if it was started anew, its tail if it was appended.
second = final[len(first):] if final[:len(first)] == first else final
want = lambda a, b: list(range(a, b + 1))
errors = []
if [r["step"] for r in ref] != want(1, total): errors.append("reference steps are not 1..%d" % total)
if [r["step"] for r in first] != want(1, n): errors.append("first run steps are not 1..%d" % n)
if [r["step"] for r in second] != want(n + 1, total):
    errors.append("resumed run steps are not %d..%d: %s" % (n + 1, total, [r["step"] for r in second][:5]))
if errors: sys.exit("; ".join(errors))
loss = {r["step"]: r["loss"] for r in ref}
bad = [(r["step"], r["loss"], loss[r["step"]]) for r in first + second if r["loss"] != loss[r["step"]]]
if bad: sys.exit("%d step(s) differ from the reference, first: step %d %r vs %r" % ((len(bad),) + bad[0]))
print("slurm_preempt: steps 1-%d (before checkpoint-%d) and %d-%d (resumed) equal the reference bitwise; "
      "step %d loss %r" % (n, n, n + 1, total, total, second[-1]["loss"]))
EOF
  fail "(compare) the interrupted run differs from the reference"

say "total $((SECONDS - t0)) s (after Slurm start)"
say "Slurm is still running (SLURM_CONF=$SLURM_CONF); stop it with: tools/slurm-local stop"
say "ok"
