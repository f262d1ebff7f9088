# peer_runs.sh, sourced by the parity tests (job_v1_parity, job_dpo_parity, job_rm_parity, job_muon_parity) from
# the repository root: a peer's reference run recalled from tests/fixtures/peer_runs or made live
# (tools/peer-runs), and lftrain judged against it.

# peer_obtain NAME KEY REFERENCE RUN...: REFERENCE becomes the run recorded as NAME under KEY, or
# RUN makes it live (recorded then under LFT_PEER_RUNS=record). Sets peer_source (recorded or
# live); returns 1 when RUN fails (RUN reports its own failure).
peer_obtain() {
  peer_name=$1 peer_key=$2
  local reference=$3
  shift 3
  if tools/peer-runs recall "$peer_name" "$peer_key" "$reference"; then peer_source=recorded; return 0; fi
  "$@" || return 1
  peer_source=live
  tools/peer-runs record "$peer_name" "$peer_key" "$reference"
}

# peer_judge COMPARE RUN...: 0 when COMPARE passes. Where it fails against a recorded run (another
# CPU's fp32 kernels round otherwise than the recording machine's), RUN makes the peer's run live
# and COMPARE judges again: a record can spare time, never decide a result. 1 when COMPARE fails,
# 2 when RUN does.
peer_judge() {
  local compare=$1
  shift
  "$compare" && return 0
  [ "$peer_source" = recorded ] || return 1
  echo "$peer_name: differs from the recorded run $peer_key; running the peer live"
  peer_source=live
  "$@" || return 2
  "$compare"
}
