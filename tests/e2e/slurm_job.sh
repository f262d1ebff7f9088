#!/usr/bin/env bash
# slurm_job.sh BUILD_DIR
# lftrain under a real (one-machine) Slurm: starts it with tools/slurm-local (installing the
# Debian packages if missing), then
#   (a) srun --mpi=pmix -n 2 lftrain --check: the ranks meet through PMIx,
#   (b) sbatch --wait slurm/train.sbatch in --check mode (LFTRAIN_FLAGS): job exit code 0,
#   (c) sbatch --wait slurm/train.sbatch with a misspelt key: exit code 2, the key named,
#   (d) srun -n 2 lftrain with rank 0, then rank 1, frozen (SIGSTOP): the step ends within
#       comm_timeout + 30 s with the watchdog's report, and no process is left.
# Exits 0 on success, 1 on a failure, 77 (ctest: skipped) when Slurm cannot be installed or
# started here (not root, no apt, no PMIx in srun, ...). Every step is bounded by `timeout`.
# Slurm is left running at the end (it idles cheaply); the last lines say how to stop it.
set -u
cd "$(dirname "$0")/../.." || exit 1

[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 64; }
BUILD_DIR=$1
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$PWD/$BUILD_DIR" ;; esac
LFTRAIN="$BUILD_DIR/lftrain"
RUN=inputs/run.toml

say() { echo "slurm_job: $*"; }
skip() { say "SKIPPED: $*"; exit 77; }
fail() { say "FAILED: $*"; exit 1; }

[ -x "$LFTRAIN" ] || fail "no executable $LFTRAIN"
[ -r "$RUN" ] || fail "no $RUN in $PWD"

tmp=$(mktemp -d /tmp/lftrain-slurm-job.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"  # the job writes its output file here


# --- start Slurm ----------------------------------------------------------------------------
. tests/e2e/slurm_common.sh
start_local_slurm
[ -n "${SLURM_CONF:-}" ] || skip "tools/slurm-local start printed no SLURM_CONF"
export SLURM_CONF
timeout 30 srun --mpi=list 2>&1 | grep -qw pmix || skip "this srun has no PMIx plugin (srun --mpi=list)"

# Open MPI refuses root unless told; srun passes this environment to the ranks.
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# submit NAME TIMEOUT SBATCH_ARGS...: sbatch --wait; sets job_rc, job_id, job_out (the job's
# output file). A job still running when TIMEOUT passes is cancelled.
submit() {
  local name=$1 limit=$2
  shift 2
  job_out="$tmp/$name.out"
  timeout "$limit" sbatch --wait --parsable --job-name="lftrain-$name" --time=10 \
    --output="$job_out" "$@" >"$tmp/$name.sbatch" 2>&1
  job_rc=$?
  job_id=$(grep -Eo '^[0-9]+' "$tmp/$name.sbatch" | head -n 1)
  cat "$tmp/$name.sbatch"
  if [ $job_rc = 124 ]; then
    [ -z "$job_id" ] || timeout 30 scancel "$job_id"
    timeout 10 squeue >&2
    fail "($name) job ${job_id:-?} did not end within ${limit}s (cancelled)"
  fi
  echo "----- job ${job_id:-?} output ($job_out) -----"
  cat "$job_out" 2>/dev/null || echo "(no output file)"
  echo "----- sbatch exit code $job_rc -----"
}

# --- (a) srun: two ranks meet through PMIx ---------------------------------------------------
say "(a) srun --mpi=pmix -n 2 --overcommit $LFTRAIN --check $RUN"
timeout 120 srun --mpi=pmix -n 2 --overcommit "$LFTRAIN" --check "$RUN" >"$tmp/a.out" 2>&1
rc=$?
cat "$tmp/a.out"
[ $rc = 0 ] || fail "(a) srun exited $rc, wanted 0"
expect_in "$tmp/a.out" "launcher   srun (PMIx)" "world      2 rank" "check: ok" ||
  fail "(a) srun output"

# --- (b) sbatch slurm/train.sbatch in --check mode ------------------------------------------
say "(b) LFTRAIN_FLAGS=--check sbatch --wait --ntasks=2 --overcommit slurm/train.sbatch"
LFTRAIN_FLAGS=--check LFTRAIN_BIN="$LFTRAIN" CONFIG="$RUN" \
  submit check 180 --ntasks=2 --overcommit slurm/train.sbatch
[ "$job_rc" = 0 ] || fail "(b) job $job_id exit code $job_rc, wanted 0"
expect_in "$job_out" "launcher   srun (PMIx)" "world      2 rank" "check: ok" ||
  fail "(b) job output"

# --- (c) sbatch with a misspelt key: lftrain's exit code 2 is the job's -------------------------
say "(c) sbatch --wait --ntasks=2 --overcommit slurm/train.sbatch learning_rat=1"
LFTRAIN_FLAGS=--check LFTRAIN_BIN="$LFTRAIN" CONFIG="$RUN" \
  submit bad_key 180 --ntasks=2 --overcommit slurm/train.sbatch learning_rat=1
[ "$job_rc" != 0 ] || fail "(c) job $job_id exit code 0, wanted non-zero"
[ "$job_rc" = 2 ] || fail "(c) job $job_id exit code $job_rc, wanted 2 (lftrain's config error)"
expect_in "$job_out" "unknown key 'learning_rat'" || fail "(c) job output"
# Slurm's own record of the job agrees (scontrol keeps finished jobs for MinJobAge).
rec=$(timeout 10 scontrol show job "$job_id" 2>/dev/null | grep -Eo 'ExitCode=[0-9]+:[0-9]+' | head -n 1)
[ -z "$rec" ] || [ "$rec" = "ExitCode=2:0" ] || fail "(c) scontrol shows $rec, wanted ExitCode=2:0"

# --- (d) a frozen rank under srun: the step ends within comm_timeout + 30 s, nothing left ----------
for frozen in 0 1; do
  say "(d) srun -n 2 lftrain, rank $frozen stopped with SIGSTOP (comm_timeout = 10)"
  log="$tmp/frozen$frozen.out"
  sed 's/^max_steps = .*/max_steps = 100000/' "$RUN" > "$tmp/frozen.toml"
  timeout 300 srun --mpi=pmix -n 2 --overcommit "$LFTRAIN" "$tmp/frozen.toml" output_dir="$tmp/frozen$frozen" \
    save_strategy=no logging_steps=1 comm_timeout=10 >"$log" 2>&1 &
  job=$!
  for _ in $(seq 1 240); do grep -q "step 2/" "$log" && break; sleep 0.5; done
  grep -q "step 2/" "$log" || fail "(d) training did not start: $(tail -5 "$log")"
  pid=""
  for p in $(pgrep -f "$tmp/frozen.toml"); do
    [ "$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | sed -n 's/^SLURM_PROCID=//p')" = "$frozen" ] && pid=$p
  done
  [ -n "$pid" ] || fail "(d) no process for rank $frozen"
  kill -STOP "$pid"
  start=$(date +%s)
  wait "$job"; rc=$?
  took=$(( $(date +%s) - start ))
  say "(d) rank $frozen frozen: srun ended after $took s with status $rc"
  [ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "(d) srun exited $rc"
  [ "$took" -le 40 ] || fail "(d) the step took $took s to end (comm_timeout 10 + 30)"
  grep -q "did not complete within 10 s (comm_timeout)" "$log" || fail "(d) no watchdog report: $(tail -5 "$log")"
  sleep 2
  [ -z "$(pgrep -f "$tmp/frozen.toml")" ] || fail "(d) lftrain processes are left: $(pgrep -f "$tmp/frozen.toml")"
done

say "Slurm is still running (SLURM_CONF=$SLURM_CONF); stop it with: tools/slurm-local stop"
say "ok"
