#!/usr/bin/env bash
# checkpoint_recovery.sh BUILD_DIR: the real lftrain saves, is cut off, resumes on another world
# size, and meets broken checkpoints. Run from the repository root.
set -u
build=$1
out=$(mktemp -d /tmp/lft-ckpt-XXXXXX)
trap 'rm -rf "$out"' EXIT
run() { local np=$1; shift; mpirun --oversubscribe --bind-to none -np "$np" "$build/lftrain" inputs/run.toml \
          max_steps=30 logging_steps=1 save_steps=10 "$@" 2>&1; }
fail() { echo "checkpoint_recovery: FAIL: $*"; exit 1; }
expect() { grep -Eq -- "$2" <<<"$1" || { echo "$1" | tail -20; fail "output lacks /$2/"; }; }

# 1. Straight run at 2 ranks (saves at 10, 20, 30); resume its step 20 at 4 ranks to 30.
text=$(run 2 output_dir="$out/straight") || fail "straight run: $text"
[ -f "$out/straight/checkpoint-20/COMPLETE" ] && [ "$(cat "$out/straight/latest")" = checkpoint-30 ] \
  || fail "checkpoints are not complete, or latest is not checkpoint-30"
text=$(run 4 output_dir="$out/cut" per_device_train_batch_size=2 \
       resume_from_checkpoint="$out/straight/checkpoint-20") || fail "resume at 4 ranks: $text"
expect "$text" "resume: $out/straight/checkpoint-20 at step 20"
python3 tests/e2e/compare_logs.py "$out/straight/trainer_log.jsonl" "$out/cut/trainer_log.jsonl" 21 30 1e-5 \
  || fail "the resumed run does not continue the straight one"

# 1b. async_checkpoint: the background saves hold the same weights as the synchronous ones,
#     resuming one continues the straight run, and a rank killed while a background save writes
#     leaves the previous checkpoint as the one auto resumes.
text=$(run 2 output_dir="$out/async" async_checkpoint=true) || fail "async run: $text"
expect "$text" "checkpoint of step 10: training blocked [0-9.]+ s to copy the state; writing it in the background"
expect "$text" "saved $out/async/checkpoint-20 in [0-9.]+ s \(in the background\)"
for c in 10 20 30; do
  "$build/lfmerge" "$out/straight/checkpoint-$c" --out "$out/m-sync-$c" >/dev/null || fail "lfmerge sync $c"
  "$build/lfmerge" "$out/async/checkpoint-$c" --out "$out/m-async-$c" >/dev/null || fail "lfmerge async $c"
  cmp -s "$out/m-sync-$c/model.safetensors" "$out/m-async-$c/model.safetensors" \
    || fail "checkpoint-$c written in the background differs from the synchronous one"
done
text=$(run 4 output_dir="$out/async-cut" per_device_train_batch_size=2 \
       resume_from_checkpoint="$out/async/checkpoint-20") || fail "resume of an async checkpoint: $text"
python3 tests/e2e/compare_logs.py "$out/straight/trainer_log.jsonl" "$out/async-cut/trainer_log.jsonl" 21 30 1e-5 \
  || fail "the run resumed from a background checkpoint does not continue the straight one"
text=$(LFT_TEST_KILL_IN_SAVE=1:2 run 2 output_dir="$out/async-kill" async_checkpoint=true); status=$?
[ $status -ne 0 ] || fail "the run killed in a background save exited 0"
expect "$text" "LFT_TEST_KILL_IN_SAVE: killing this rank"
[ -f "$out/async-kill/checkpoint-10/COMPLETE" ] && [ ! -e "$out/async-kill/checkpoint-20" ] \
  && [ "$(cat "$out/async-kill/latest")" = checkpoint-10 ] || fail "after the killed background save: not checkpoint-10"
text=$(run 2 output_dir="$out/async-kill" resume_from_checkpoint=auto async_checkpoint=true) \
  || fail "auto after the killed background save: $text"
expect "$text" "resume: $out/async-kill/checkpoint-10 at step 10"

# 2a. Eight bytes overwritten inside one tensor of the newest checkpoint: its checksum names it;
# auto skips the checkpoint, an explicit resume and lfmerge refuse it (exit 2).
state="$out/straight/checkpoint-30/state.h5"
tensor=/model/model.layers.0.mlp.up_proj.weight
offset=$(h5dump -p -H -d "$tensor" "$state" | awk '/OFFSET/ {print $2; exit}')
[ -n "$offset" ] || fail "h5dump found no offset of $tensor"
printf 'XXXXXXXX' | dd of="$state" bs=1 seek=$(( offset + 1000 )) conv=notrunc status=none
text=$(run 2 output_dir="$out/straight" resume_from_checkpoint=auto save_strategy=no) || fail "auto after corruption: $text"
expect "$text" "skipping damaged checkpoint $out/straight/checkpoint-30: .*'model/model.layers.0.mlp.up_proj.weight'.* is corrupt"
expect "$text" "resume: $out/straight/checkpoint-20 at step 20"
text=$(run 2 output_dir="$out/z" resume_from_checkpoint="$out/straight/checkpoint-30"); status=$?
[ $status -eq 2 ] || fail "resuming a corrupt checkpoint exited $status, wanted 2"
expect "$text" "checkpoint-30.* is damaged: .*model.layers.0.mlp.up_proj.weight"
text=$("$build/lfmerge" "$out/straight/checkpoint-30" --out "$out/merged" 2>&1); status=$?
[ $status -eq 2 ] || fail "lfmerge of a corrupt checkpoint exited $status, wanted 2"
expect "$text" "model.layers.0.mlp.up_proj.weight.* is corrupt"
[ ! -e "$out/merged" ] || fail "lfmerge left an export of a corrupt checkpoint"

# 2. A truncated newest checkpoint: auto skips it with a warning and takes the one before.
state="$out/straight/checkpoint-30/state.h5"
head -c $(( $(stat -c %s "$state") / 2 )) "$state" > "$out/half" && mv "$out/half" "$state"
text=$(run 2 output_dir="$out/straight" resume_from_checkpoint=auto save_strategy=no) || fail "auto after truncation: $text"
expect "$text" "skipping broken checkpoint $out/straight/checkpoint-30"
expect "$text" "resume: $out/straight/checkpoint-20 at step 20"

# 3. A save cut short (no COMPLETE): auto skips it too.
rm "$out/straight/checkpoint-20/COMPLETE"
text=$(run 2 output_dir="$out/straight" resume_from_checkpoint=auto save_strategy=no) || fail "$text"
expect "$text" "skipping $out/straight/checkpoint-20: incomplete"
expect "$text" "resume: $out/straight/checkpoint-10 at step 10"

# 4. Errors, never fallbacks: an explicit folder that is not a checkpoint, another global batch.
mkdir -p "$out/fake" && echo garbage > "$out/fake/state.h5" && touch "$out/fake/COMPLETE"
text=$(run 2 output_dir="$out/x" resume_from_checkpoint="$out/fake"); status=$?
[ $status -ne 0 ] || fail "a garbage checkpoint was accepted"
expect "$text" "$out/fake"
text=$(run 2 output_dir="$out/y" per_device_train_batch_size=2 resume_from_checkpoint="$out/straight/checkpoint-10"); status=$?
[ $status -eq 2 ] || fail "global batch mismatch exited $status, wanted 2"
expect "$text" "global batch of 8 sequences, this run has 4"

# 5. A step that output_dir already holds is re-saved aside: with a rank killed in the middle of
#    that save, the earlier checkpoint of the step is still whole, `latest` names a complete
#    folder, and auto resumes from it.
text=$(run 2 output_dir="$out/resave" max_steps=20) || fail "resave, first run: $text"
text=$(LFT_TEST_KILL_IN_SAVE=1 run 2 output_dir="$out/resave" max_steps=20 \
       resume_from_checkpoint="$out/resave/checkpoint-10"); status=$?
[ $status -ne 0 ] || fail "the run killed while saving exited 0"
expect "$text" "LFT_TEST_KILL_IN_SAVE: killing this rank"
[ -f "$out/resave/checkpoint-20/COMPLETE" ] || fail "the earlier checkpoint-20 was lost by its re-save"
[ "$(cat "$out/resave/latest")" = checkpoint-20 ] || fail "latest does not name checkpoint-20"
# The killed run's log ends in a record cut short: resume drops it with a warning.
printf '{"current_steps": 25, "total_steps": 30, "step":' >> "$out/resave/trainer_log.jsonl"
text=$(run 2 output_dir="$out/resave" max_steps=20 resume_from_checkpoint=auto) || fail "auto after the killed save: $text"
expect "$text" "resume: $out/resave/checkpoint-20 at step 20"
expect "$text" "step 20 is already saved in $out/resave/checkpoint-20"
expect "$text" "trainer_log.jsonl:[0-9]+: dropped a damaged record"
python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$out/resave/trainer_log.jsonl" \
  || fail "trainer_log.jsonl holds a line that is not JSON after the resume"

# 6. output_dir is this run's own: rotation leaves a user's checkpoint-* folder without COMPLETE
#    and never follows a link named like a checkpoint; a second run on the same folder is refused.
mkdir -p "$out/own/checkpoint-7" "$out/elsewhere"
echo "my notes" > "$out/own/checkpoint-7/README"
ln -s "$out/elsewhere" "$out/own/checkpoint-5"
text=$(run 2 output_dir="$out/own" max_steps=20 save_total_limit=1) || fail "rotation run: $text"
[ -f "$out/own/checkpoint-7/README" ] || fail "rotation deleted a folder lftrain did not write"
[ -L "$out/own/checkpoint-5" ] && [ -z "$(ls -A "$out/elsewhere")" ] || fail "a link was followed or removed"
[ -f "$out/own/checkpoint-20/COMPLETE" ] && [ ! -e "$out/own/checkpoint-10" ] || fail "rotation did not keep 1"
# A user's checkpoint-<step> that a save would replace (a folder without COMPLETE, a file, a link):
# the run stops before training with exit 2 naming it, and leaves it as it is.
mkdir -p "$out/mine/checkpoint-10" && echo "my notes" > "$out/mine/checkpoint-10/README"
text=$(run 2 output_dir="$out/mine" max_steps=20); status=$?
[ $status -eq 2 ] || fail "a save over a user's checkpoint-10 folder exited $status, wanted 2: $text"
expect "$text" "$out/mine/checkpoint-10 is a folder without COMPLETE that lftrain did not write, and saving step 10 would replace it"
[ -f "$out/mine/checkpoint-10/README" ] && ! grep -q "step 1/" <<<"$text" || fail "the user's folder was touched, or steps were spent"
rm -r "$out/mine/checkpoint-10" && echo "my notes" > "$out/mine/checkpoint-20"
text=$(run 2 output_dir="$out/mine" max_steps=20); status=$?
[ $status -eq 2 ] && [ "$(cat "$out/mine/checkpoint-20")" = "my notes" ] || fail "a file named checkpoint-20 (the final save): $status $text"
expect "$text" "checkpoint-20 is a file that lftrain did not write"
rm "$out/mine/checkpoint-20" && ln -s "$out/elsewhere" "$out/mine/checkpoint-10"
text=$(run 2 output_dir="$out/mine" max_steps=20); status=$?
[ $status -eq 2 ] && [ -L "$out/mine/checkpoint-10" ] || fail "a link named checkpoint-10: $status $text"
expect "$text" "checkpoint-10 is a link that lftrain did not write"
mpirun --oversubscribe --bind-to none -np 2 "$build/lftrain" inputs/run.toml max_steps=100000 logging_steps=1 \
  save_strategy=no output_dir="$out/busy" > "$out/busy.log" 2>&1 &
first=$!
for _ in $(seq 1 120); do grep -q "step 1/" "$out/busy.log" 2>/dev/null && break; sleep 0.5; done
text=$(run 2 output_dir="$out/busy" max_steps=5); status=$?
kill "$first" 2>/dev/null; wait "$first" 2>/dev/null
[ $status -eq 2 ] || fail "a second run on a busy output_dir exited $status, wanted 2: $text"
expect "$text" "output_dir $out/busy is in use by another lftrain run \(host .*, pid [0-9]+"
for bad in "" "/" "."; do
  text=$(run 2 output_dir="$bad" max_steps=5); status=$?
  [ $status -eq 2 ] || fail "output_dir=\"$bad\" exited $status, wanted 2"
done
echo "checkpoint_recovery: ok"
