#!/usr/bin/env bash
# mpirun_stop.sh BUILD_DIR: the documented stop under a plain mpirun (docs/slurm.md, "Without
# Slurm"). SIGUSR1 to mpirun reaches every rank: they save a checkpoint and mpirun exits 75.
# SIGTERM to mpirun reaches the ranks too and they save, but Open MPI's mpirun then reports 1
# whatever the ranks return: a wrapper that requeues on 75 must send SIGUSR1. Run from the root.
set -u
build=$1
out=$(mktemp -d /tmp/lft-mpirun-stop-XXXXXX)
trap 'rm -rf "$out"' EXIT
fail() { echo "mpirun_stop: FAIL: $*"; exit 1; }

# Starts 2 ranks, sends $1 to mpirun after step 2, prints mpirun's exit status.
stop_with() {
  local log=$out/$1.log
  mpirun --oversubscribe --bind-to none -np 2 "$build/lftrain" inputs/run.toml max_steps=100000 logging_steps=1 \
    output_dir="$out/$1" comm_timeout=60 > "$log" 2>&1 &
  local job=$!
  for _ in $(seq 1 240); do grep -q "step 2/" "$log" 2>/dev/null && break; sleep 0.5; done
  grep -q "step 2/" "$log" || { kill -KILL "$job"; fail "$1: training did not start: $(tail -5 "$log")"; }
  kill -"$1" "$job"
  wait "$job"
  echo $?
}

status=$(stop_with USR1)
[ "$status" = 75 ] || fail "SIGUSR1 to mpirun: exit status $status, wanted 75: $(tail -5 "$out/USR1.log")"
grep -q "stopped on a signal at step [0-9]* after saving; exit status 75" "$out/USR1.log" || fail "SIGUSR1: no stop line"
[ -f "$out/USR1/$(cat "$out/USR1/latest")/COMPLETE" ] || fail "SIGUSR1: latest names no complete checkpoint"

status=$(stop_with TERM)
[ "$status" != 0 ] || fail "SIGTERM to mpirun exited 0"
grep -q "stopped on a signal at step [0-9]* after saving" "$out/TERM.log" || fail "SIGTERM: the ranks did not save"
[ -f "$out/TERM/$(cat "$out/TERM/latest")/COMPLETE" ] || fail "SIGTERM: latest names no complete checkpoint"
echo "mpirun_stop: SIGUSR1 -> 75 with a checkpoint; SIGTERM -> checkpoint saved, mpirun's status $status (Open MPI's, documented)"
echo "mpirun_stop: ok"
