# peer_runs.sh, sourced by the parity tests (job_v1_parity, job_dpo_parity, job_rm_parity, job_muon_parity) from
# the repository root: a peer's reference run recalled from tests/fixtures/peer_runs or made live
# (tools/peer-runs), and lftrain judged against it; the case YAMLs they write, and the classic
# trainer's run of one.

# yaml_override FILE LINES: LINES ("key: value" lines) appended to FILE after the lines of FILE
# that set the same top-level keys are removed (YAML forbids a repeated key).
yaml_override() {
  local key
  for key in $(printf '%s\n' "$2" | sed -n 's/^\([a-z_]*\):.*/\1/p'); do sed -i "/^$key:/d" "$1"; done
  [ -z "$2" ] || printf '%s\n' "$2" >> "$1"
}

# lf_classic_run NAME DIR: LlamaFactory's classic trainer (tools/lf-reference) on DIR/job.yaml,
# its per-step log in DIR/lf/lf-steps.jsonl (the YAML's output_dir); on failure its error is
# shown and NAME is added to the caller's `failed`.
lf_classic_run() {
  tools/lf-reference --log "$2/lf.log" "$2/job.yaml" >"$2/lf.out" 2>"$2/lf.err" && return 0
  cat "$2/lf.err"; failed+=("$1 (LlamaFactory failed: tools/lf-reference $2/job.yaml)"); return 1
}

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
