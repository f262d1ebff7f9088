#!/usr/bin/env bash
# plot_loss.sh BUILD_DIR: plot_loss = true draws training_loss.png and training_eval_loss.png in
# output_dir at the end of a 2-rank run (LlamaFactory's 640x480 figures), and says "no metric
# eval_loss to plot" when nothing was evaluated. The start-up log shows the first training
# example. Run from the repository root.
set -u
build=$1
out=$(mktemp -d /tmp/lft-plot-XXXXXX)
trap 'rm -rf "$out"' EXIT
run() { mpirun --oversubscribe --bind-to none -np 2 "$build/lftrain" inputs/run.toml plot_loss=true \
          logging_steps=2 save_steps=0 "$@" 2>&1; }
fail() { echo "plot_loss: FAIL: $*"; exit 1; }
expect() { grep -Eq -- "$2" <<<"$1" || { echo "$1" | tail -30; fail "output lacks /$2/"; }; }
reject() { ! grep -Eq -- "$2" <<<"$1" || { echo "$1" | tail -30; fail "output has /$2/"; }; }

# A PNG of 640x480 pixels with something drawn: a blank 640x480 PNG compresses to a few KB, the
# title, axes, ticks, legend and lines take more than 8 KB.
check_png() {
  local png=$1
  [ -f "$png" ] || fail "$png was not written"
  [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$png is not a PNG"
  local b=($(od -An -tu1 -j16 -N8 "$png"))
  local width=$(( (b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3] ))
  local height=$(( (b[4] << 24) | (b[5] << 16) | (b[6] << 8) | b[7] ))
  [ "$width" -eq 640 ] && [ "$height" -eq 480 ] || fail "$png is ${width}x${height}, wanted 640x480"
  local size
  size=$(stat -c %s "$png")
  [ "$size" -gt 8000 ] || fail "$png has $size bytes: blank?"
}

# 1. SFT with a held-out split: the loss and the eval loss (evaluated at steps 10 and 20).
text=$(run stage=sft train_dataset=inputs/data/arithmetic_alpaca.json template=default val_size=0.1 \
       eval_steps=10 max_steps=20 output_dir="$out/sft") || { echo "$text" | tail -30; fail "the sft run failed"; }
expect "$text" "^training example:$"
expect "$text" "^label_ids:$"
expect "$text" "^\[-100, -100, "
expect "$text" "<masked: [0-9]+ tokens>"
expect "$text" "figure saved at: $out/sft/training_loss.png"
expect "$text" "figure saved at: $out/sft/training_eval_loss.png"
reject "$text" "warning: plot_loss"
check_png "$out/sft/training_loss.png"
check_png "$out/sft/training_eval_loss.png"

# 2. Pre-training, nothing evaluated: the loss only; the example has no labels (as LlamaFactory).
text=$(run max_steps=6 output_dir="$out/pt") || { echo "$text" | tail -30; fail "the pt run failed"; }
expect "$text" "^training example:$"
expect "$text" "^inputs:$"
reject "$text" "^label_ids:$"
expect "$text" "figure saved at: $out/pt/training_loss.png"
expect "$text" "no metric eval_loss to plot"
check_png "$out/pt/training_loss.png"
[ ! -e "$out/pt/training_eval_loss.png" ] || fail "training_eval_loss.png was drawn without an eval"

# 3. plot_loss = false (the default) draws nothing.
text=$(mpirun --oversubscribe --bind-to none -np 2 "$build/lftrain" inputs/run.toml max_steps=2 save_steps=0 \
       output_dir="$out/none" 2>&1) || { echo "$text" | tail -30; fail "the run without plot_loss failed"; }
reject "$text" "figure saved at"
[ ! -e "$out/none/training_loss.png" ] || fail "training_loss.png was drawn without plot_loss"
echo "plot_loss: ok"
