#!/usr/bin/env bash
# frozen_rank.sh BUILD_DIR: a rank stopped with SIGSTOP in the middle of training (a frozen node)
# must end the whole job within comm_timeout + 30 s, with a report and a non-zero exit, and leave
# no lftrain process behind. Rank 0 frozen at 2 ranks, the last rank at 4 (each case waits out
# comm_timeout with the other ranks polling: the other two pairings cost 18 s and showed nothing
# these two do not). Run from the repo root.
set -u
build=$1
out=$(mktemp -d /tmp/lft-frozen-XXXXXX)
timeout_s=5  # short: each case waits it out; a step of this run takes ~0.1 s
pids_of_job() { pgrep -f "$out/run.toml" || true; }
cleanup() { for p in $(pids_of_job); do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done; rm -rf "$out"; }
trap cleanup EXIT
fail() { echo "frozen_rank: FAIL: $*"; exit 1; }
sed 's/^max_steps = .*/max_steps = 100000/' inputs/run.toml > "$out/run.toml"

# The pid of world rank $1 among this job's lftrain processes.
rank_pid() {
  for p in $(pids_of_job); do
    [ "$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')" = "$1" ] && { echo "$p"; return; }
  done
}

for np in 2 4; do
  for frozen in $((np == 2 ? 0 : np - 1)); do
    log="$out/np$np-rank$frozen.log"
    mpirun --oversubscribe --bind-to none -np "$np" "$build/lftrain" "$out/run.toml" output_dir="$out/o" \
      save_strategy=no logging_steps=1 comm_timeout=$timeout_s > "$log" 2>&1 &
    job=$!
    for _ in $(seq 1 120); do grep -q "step 2/" "$log" && break; sleep 0.5; done
    grep -q "step 2/" "$log" || fail "np $np: training did not start: $(tail -5 "$log")"
    pid=$(rank_pid "$frozen")
    [ -n "$pid" ] || fail "np $np: no process for rank $frozen"
    kill -STOP "$pid"
    start=$(date +%s)
    wait "$job"; status=$?
    took=$(( $(date +%s) - start ))
    echo "frozen_rank: np $np, rank $frozen frozen: the job ended after $took s with status $status"
    [ "$status" -ne 0 ] || fail "np $np, rank $frozen frozen: the job exited 0"
    [ "$took" -le $((timeout_s + 30)) ] || fail "np $np, rank $frozen frozen: the job took $took s to end"
    grep -q "did not complete within $timeout_s s (comm_timeout)" "$log" \
      || fail "np $np, rank $frozen frozen: no watchdog report: $(tail -5 "$log")"
    sleep 1
    [ -z "$(pids_of_job)" ] || fail "np $np, rank $frozen frozen: lftrain processes are left: $(pids_of_job)"
  done
done
# A rank frozen inside a save, between writing its part and the publication (its second save): the
# job ends within comm_timeout + 30 s although setup_timeout is long, and the first checkpoint
# stays complete and named by latest. Case "woken": the frozen rank is continued after rank 0's
# deadline passed but before the abort ends it (as mpirun's SIGCONT before its SIGTERM may do): the
# wait then completes on rank 0, which must still not publish the save the job was failed in.
for case in frozen woken; do
  log="$out/in-save-$case.log"
  start=$(date +%s)
  LFT_TEST_FREEZE_IN_SAVE=1:2 timeout 300 mpirun --oversubscribe --bind-to none -np 2 "$build/lftrain" "$out/run.toml" \
    output_dir="$out/s-$case" max_steps=4 save_steps=2 logging_steps=1 comm_timeout=$timeout_s setup_timeout=600 \
    > "$log" 2>&1 &
  job=$!
  if [ $case = woken ]; then
    for _ in $(seq 1 120); do grep -q "LFT_TEST_FREEZE_IN_SAVE: stopping" "$log" && break; sleep 0.5; done
    # The deadline passes after timeout_s; the report waits a 3 s liveness probe before aborting.
    sleep $((timeout_s + 1))
    pid=$(rank_pid 1)
    [ -n "$pid" ] || fail "woken in a save: no process for rank 1: $(tail -5 "$log")"
    grep -q "did not complete within" "$log" && fail "woken in a save: the job ended before rank 1 was woken"
    kill -CONT "$pid"
  fi
  wait "$job"; status=$?
  took=$(( $(date +%s) - start ))
  echo "frozen_rank: rank 1 $case in its second save: the job ended after $took s with status $status"
  [ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "$case in a save: status $status: $(tail -5 "$log")"
  grep -q "LFT_TEST_FREEZE_IN_SAVE: stopping this rank" "$log" || fail "the freeze was not injected: $(tail -5 "$log")"
  grep -q "waiting for every rank to finish writing .*checkpoint-4 did not complete within $timeout_s s (comm_timeout)" "$log" \
    || fail "$case in a save: no watchdog report naming the save's wait: $(tail -5 "$log")"
  [ "$took" -le $((timeout_s + 60)) ] || fail "$case in a save: the job took $took s to end"
  [ -f "$out/s-$case/checkpoint-2/COMPLETE" ] && [ "$(cat "$out/s-$case/latest")" = checkpoint-2 ] \
    && [ ! -e "$out/s-$case/checkpoint-4" ] \
    || fail "$case in a save: checkpoint-2 is not complete and latest, or checkpoint-4 was published: $(ls -a "$out/s-$case")"
  sleep 1
  [ -z "$(pids_of_job)" ] || fail "$case in a save: lftrain processes are left: $(pids_of_job)"
done
echo "frozen_rank: ok"
