#!/usr/bin/env bash
# fp8_quality.sh BUILD_DIR TINY_MODEL C4_DEMO: float8 linears train as well as the same run without
# them. The bundled SFT example and pre-training on c4_demo, each run twice on 2 ranks (fp32; fp32 +
# fp8) from the same weights and data order; over the logged steps after the first 10% of
# training the fp8 loss is at most 1% above the baseline's on average and 5% at worst, the final
# loss at most 2% above, and no logged step more than 5% away either way. (The logged losses are
# 10-step means of one trajectory each: a transient divergence of a few steps is the CPU's
# arithmetic, not quality; fp8 ended 1.7-3.1% *below* fp32 here.) Prints the gaps.
# The baseline is fp32, not bf16: the claim is float8 against its own baseline, and a CPU without
# bf16 instructions runs LibTorch's bf16 GEMM ~100x slower than fp32 (this test took 992 s there
# in bf16); float8's error (3 mantissa bits) is what is measured either way, and bf16 with float8
# is checked for exactness by Float8Parity (docs/fp8.md).
set -u
build=$1 tiny=$2 c4=$3
out=$(mktemp -d /tmp/lft-fp8-XXXXXX)
trap 'rm -rf "$out"' EXIT
fail() { echo "fp8_quality: FAIL: $*"; exit 1; }
train() {  # NAME CONFIG ARGS...
  local name=$1 config=$2; shift 2
  mpirun --oversubscribe --bind-to none -np 2 "$build/lftrain" "$config" model_name_or_path="$tiny" bf16=false \
    save_strategy=no output_dir="$out/$name" "$@" > "$out/$name.log" 2>&1 \
    || { tail -20 "$out/$name.log"; fail "$name"; }
}
compare() {  # LABEL
  python3 - "$out/$1-base/trainer_log.jsonl" "$out/$1-fp8/trainer_log.jsonl" "$1" <<'PY'
import json, sys
def losses(path):
    return {r["current_steps"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r}
base, fp8 = losses(sys.argv[1]), losses(sys.argv[2])
total = max(base)
# Signed: float8 training worse than its baseline (a higher loss) is what the claim is about; a
# float8 run that strays far either way is caught by the unsigned bound.
gaps = [((fp8[s] - base[s]) / base[s], s) for s in sorted(base) if s > 0.1 * total]
worst, at = max(gaps)
apart = max(abs(g) for g, _ in gaps)
mean = sum(g for g, _ in gaps) / len(gaps)
final = (fp8[total] - base[total]) / base[total]
print(f"fp8_quality: {sys.argv[3]}: {len(gaps)} logged steps after the first 10%, mean gap {mean:+.2%}, worst {worst:+.2%} "
      f"at step {at} (fp32 {base[at]:.4f}, fp8 {fp8[at]:.4f}), furthest apart {apart:.2%}; "
      f"final fp32 {base[total]:.4f}, fp8 {fp8[total]:.4f} ({final:+.2%})")
sys.exit(0 if mean <= 0.01 and worst <= 0.05 and final <= 0.02 and apart <= 0.05 else 1)
PY
}
train sft-base inputs/sft_alpaca.toml
train sft-fp8 inputs/sft_alpaca.toml fp8=true
grep -q "float8 linears" "$out/sft-fp8.log" || fail "the fp8 run does not say it uses float8 linears"
compare sft || fail "SFT: fp8 strays from fp32 (mean gap > +1%, a step > +5%, the final loss > +2% or a step 5% away)"
pt=(train_dataset="$c4" max_steps=120 learning_rate=5e-3 warmup_steps=3)
train c4-base inputs/pt_text.toml "${pt[@]}"
train c4-fp8 inputs/pt_text.toml "${pt[@]}" fp8=true
compare c4 || fail "c4_demo: fp8 strays from fp32 (mean gap > +1%, a step > +5%, the final loss > +2% or a step 5% away)"
echo "fp8_quality: ok"
