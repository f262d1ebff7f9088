#!/usr/bin/env bash
# disk_full.sh BUILD_DIR: a full disk, made with a small tmpfs in a private mount namespace.
# A checkpoint save that runs out of space ends the job saying "no space" and leaves no complete
# checkpoint and no `latest`; lfmerge --force that runs out of space keeps the earlier export.
# Needs root (unshare --mount); exits 77 (ctest: skipped, and said so) without it.
set -u
build=$1
if [ "${LFT_IN_NAMESPACE:-}" != 1 ]; then
  unshare --mount true 2>/dev/null || { echo "disk_full: SKIPPED: needs root for unshare --mount"; exit 77; }
  exec env LFT_IN_NAMESPACE=1 unshare --mount --propagation private "$0" "$@"
fi
fail() { echo "disk_full: FAIL: $*"; exit 1; }
expect() { grep -Eq -- "$2" <<<"$1" || { echo "$1" | tail -20; fail "output lacks /$2/"; }; }
work=$(mktemp -d /tmp/lft-full-XXXXXX)
trap 'umount "$work/small" 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work/small"

# 1. Checkpoint save on a 1 MiB file system (a checkpoint of this model takes 9 MiB).
mount -t tmpfs -o size=1M tmpfs "$work/small" || fail "cannot mount a tmpfs"
text=$(mpirun --oversubscribe --bind-to none -np 2 "$build/lftrain" inputs/run.toml max_steps=4 \
       save_steps=2 logging_steps=1 output_dir="$work/small/run" 2>&1); status=$?
[ $status -ne 0 ] || fail "a save onto a full disk exited 0"
expect "$text" "H5Dwrite failed writing tensor store $work/small/run/.checkpoint-2.partial/state.h5: .*no space: [0-9]+ bytes free"
[ ! -e "$work/small/run/checkpoint-2" ] && [ ! -e "$work/small/run/latest" ] \
  || fail "a checkpoint or latest was published from a failed save"
umount "$work/small"

# 2. lfmerge --force onto a file system with room for one export (3.1 MiB) but not two.
text=$(mpirun --oversubscribe --bind-to none -np 2 "$build/lftrain" inputs/run.toml max_steps=2 \
       save_steps=2 output_dir="$work/run" 2>&1) || fail "training run: $text"
mount -t tmpfs -o size=5M tmpfs "$work/small" || fail "cannot mount a tmpfs"
"$build/lfmerge" "$work/run/checkpoint-2" --out "$work/small/hf" >/dev/null || fail "first export"
before=$(sha256sum "$work/small/hf/model.safetensors")
text=$("$build/lfmerge" "$work/run/checkpoint-2" --out "$work/small/hf" --force 2>&1); status=$?
[ $status -ne 0 ] || fail "lfmerge --force onto a full disk exited 0"
expect "$text" "not enough space in $work/small/hf|[Nn]o space"
[ "$(sha256sum "$work/small/hf/model.safetensors")" = "$before" ] || fail "the earlier export was changed"
echo "disk_full: ok"
