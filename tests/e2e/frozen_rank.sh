#!/usr/bin/env bash
# frozen_rank.sh BUILD_DIR: a rank stopped with SIGSTOP in the middle of training (a frozen node)
# must end the whole job within comm_timeout + 30 s, with a report and a non-zero exit, and leave
# no lftrain process behind. Rank 0 and the last rank, at 2 and 4 ranks. Run from the repo root.
set -u
build=$1
out=$(mktemp -d /tmp/lft-frozen-XXXXXX)
timeout_s=10
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
  for frozen in 0 $((np - 1)); do
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
echo "frozen_rank: ok"
