#!/usr/bin/env bash
# peer_runs_key.sh: tools/peer-runs keys a run by its inputs alone: the same files in two work
# folders (their paths inside the files replaced) give one key; a changed byte of a file, a
# changed file name, or another --sub target gives another; recall finds nothing under LFT_PEER_RUNS=live.
set -u
cd "$(dirname "$0")/../.." || exit 2
fail() { echo "peer_runs_key: FAIL: $*"; exit 1; }
a=$(mktemp -d /tmp/lft-peerkey-XXXXXX) b=$(mktemp -d /tmp/lft-peerkey-XXXXXX)
trap 'rm -rf "$a" "$b"' EXIT
for d in "$a" "$b"; do
  mkdir -p "$d/model"
  printf 'model: %s/model\nlearning_rate: 1.0e-3\n' "$d" > "$d/job.yaml"
  printf '\x00\x01weights' > "$d/model/model.safetensors"
done
key() { local d=$1; shift; tools/peer-runs key --sub "$d=@WORK@" "$@" "$d/job.yaml" "$d/model"; }
ka=$(key "$a") && kb=$(key "$b") || fail "tools/peer-runs key failed"
[ -n "$ka" ] && [ "$ka" = "$kb" ] || fail "the same inputs in two folders gave keys $ka and $kb"
printf '\x00\x02weights' > "$b/model/model.safetensors"
[ "$(key "$b")" != "$ka" ] || fail "a changed model byte kept the key"
printf '\x00\x01weights' > "$b/model/model.safetensors"
[ "$(key "$b")" = "$ka" ] || fail "restoring the byte did not restore the key"
sed -i 's/1.0e-3/1.1e-3/' "$b/job.yaml"
[ "$(key "$b")" != "$ka" ] || fail "a changed YAML kept the key"
sed -i 's/1.1e-3/1.0e-3/' "$b/job.yaml"
mv "$b/model/model.safetensors" "$b/model/other.safetensors"
[ "$(key "$b")" != "$ka" ] || fail "a renamed file kept the key"
[ "$(tools/peer-runs key "$a/job.yaml" "$a/model")" != "$ka" ] || fail "the work folder's path did not enter an unsubstituted key"
LFT_PEER_RUNS=live tools/peer-runs recall any "$ka" "$a/out.jsonl" && fail "recall answered under LFT_PEER_RUNS=live"
LFT_PEER_RUNS=bogus tools/peer-runs recall any "$ka" "$a/out.jsonl" 2>/dev/null && fail "LFT_PEER_RUNS=bogus accepted"
echo "peer_runs_key: ok ($ka)"
