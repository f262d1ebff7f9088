# Sourced by the Slurm tests (slurm_job.sh, slurm_preempt.sh), which define say, skip and $tmp.

# expect_in FILE STRING...: FILE contains every STRING (fixed strings).
expect_in() {
  local f=$1 s ok=0
  shift
  for s in "$@"; do
    grep -Fq -- "$s" "$f" || { say "$f lacks '$s'"; ok=1; }
  done
  return $ok
}

# Starts the local one-node Slurm (tools/slurm-local) and exports SLURM_CONF; skips the test
# (exit 77) when there is no way to start one here.
start_local_slurm() {
  if [ "$(id -u)" != 0 ] && ! { command -v sudo >/dev/null && sudo -n true 2>/dev/null; }; then
    skip "starting a local Slurm needs root or passwordless sudo"
  fi
  say "starting the local Slurm (tools/slurm-local start)"
  if ! timeout 600 tools/slurm-local start >"$tmp/start.out.txt" 2>"$tmp/start.err.txt"; then
    cat "$tmp/start.err.txt"
    skip "tools/slurm-local start failed (see above): no Slurm to test with"
  fi
  cat "$tmp/start.err.txt"
  eval "$(grep '^export SLURM_CONF=' "$tmp/start.out.txt")"
}
