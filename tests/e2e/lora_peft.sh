#!/usr/bin/env bash
# lora_peft.sh BUILD_DIR: LoRA against PEFT. (a) A PEFT adapter with random nonzero weights (every
# linear, lm_head saved whole) loaded over the llama-tiny fixture gives lftrain PEFT's logits;
# (b) again with rsLoRA scaling on q_proj,v_proj alone. (c) lftrain fine-tunes such an adapter
# (fsdp2, 2 ranks) over a Llama folder with the byte tokenizer's vocabulary; PEFT reloading
# lfmerge --format peft's export gives the logits of lfmerge's merged model, which transformers
# loads too. (d) The run changed the adapter. (e) A DoRA adapter (PEFT's use_dora, magnitudes
# away from the base's row norms) gives PEFT's logits too, and (c)-(d) again from a DoRA adapter:
# the export says use_dora and holds the trained magnitudes, and PEFT over it = the merged model.
# (f) lfmerge merges a PEFT adapter folder onto its base (--base, and LlamaFactory's
# export_lora.yaml naming it) as PEFT's merge_and_unload does: (a)'s adapter (lm_head whole) and
# (e)'s DoRA adapter, every tensor within 1e-6 (fp32).
set -u
build=$1
out=$(mktemp -d /tmp/lft-lora-peft-XXXXXX)
trap 'rm -rf "$out"' EXIT
fail() { echo "lora_peft: FAIL: $*"; exit 1; }
py=.venv/bin/python
[ -x $py ] && $py -c "import transformers, peft" 2>/dev/null \
  || fail "transformers or peft is not installed: run tools/install-python-env (make test does)"
fixture=$PWD/tests/fixtures/llama-tiny

# (a) every linear, lm_head in modules_to_save.
$py tools/check-peft.py make-adapter "$fixture" "$out/a" --r 4 --alpha 8 --targets all \
  --modules-to-save lm_head --seed 1 || fail "make-adapter (a)"
mkdir -p "$out/a-logits"
"$build/tests/export_logits" "$fixture" "$out/a-logits" --adapter "$out/a" || fail "export_logits (a)"
$py tools/check-peft.py compare "$fixture" "$out/a" "$out/a-logits/ids.safetensors" \
  "$out/a-logits/logits.safetensors" --tol 1e-4 || fail "PEFT's logits differ from lftrain's (a)"

# (b) rsLoRA (alpha / sqrt(r)), q_proj and v_proj only, nothing saved whole.
$py tools/check-peft.py make-adapter "$fixture" "$out/b" --r 8 --alpha 4 --targets q_proj,v_proj \
  --rslora --seed 2 || fail "make-adapter (b)"
mkdir -p "$out/b-logits"
"$build/tests/export_logits" "$fixture" "$out/b-logits" --adapter "$out/b" || fail "export_logits (b)"
$py tools/check-peft.py compare "$fixture" "$out/b" "$out/b-logits/ids.safetensors" \
  "$out/b-logits/logits.safetensors" --tol 1e-4 || fail "PEFT's logits differ from lftrain's (b)"

# (e) DoRA on every linear, magnitudes away from the base's row norms.
$py tools/check-peft.py make-adapter "$fixture" "$out/e" --r 4 --alpha 8 --targets all --dora --seed 4 \
  || fail "make-adapter (e)"
mkdir -p "$out/e-logits"
"$build/tests/export_logits" "$fixture" "$out/e-logits" --adapter "$out/e" || fail "export_logits (e)"
$py tools/check-peft.py compare "$fixture" "$out/e" "$out/e-logits/ids.safetensors" \
  "$out/e-logits/logits.safetensors" --tol 1e-4 || fail "PEFT's logits differ from lftrain's (e, DoRA)"

# (c) The fixture's vocabulary (61) is smaller than the byte tokenizer's (259 ids): training runs
# on the same architecture with vocab_size 300, written by transformers, and an adapter like (a)'s.
$py - "$fixture" "$out/base" <<'PY' || fail "writing the base folder"
import sys, torch, transformers
from transformers import AutoConfig, AutoModelForCausalLM
transformers.utils.logging.disable_progress_bar()
torch.manual_seed(0)
config = AutoConfig.from_pretrained(sys.argv[1])
config.vocab_size = 300
AutoModelForCausalLM.from_config(config).save_pretrained(sys.argv[2])
PY
# (c), (e) A run (fsdp2, 2 ranks) from a LoRA adapter, then one from a DoRA adapter: PEFT over
# lfmerge --format peft's export = lfmerge's merged model = transformers over it; (d) the run
# changed the adapter, each tensor by little.
train_and_export() {
  local name=$1; shift
  local dir=$out/$name
  $py tools/check-peft.py make-adapter "$out/base" "$dir/start" --r 4 --alpha 8 --targets all \
    --modules-to-save lm_head --seed 3 "$@" || fail "make-adapter ($name)"
  printf '%s\n' 'distributed = "fsdp2"' "model_name_or_path = \"$out/base\"" 'tokenizer = "bytes"' \
    'finetuning_type = "lora"' "adapter_name_or_path = \"$dir/start\"" \
    'train_dataset = "inputs/data/arithmetic.txt"' "output_dir = \"$dir/run\"" \
    'per_device_train_batch_size = 2' 'cutoff_len = 32' 'learning_rate = 1e-3' 'max_steps = 4' \
    'save_steps = 4' > "$dir/lora.toml"
  mpirun --oversubscribe --bind-to none -np 2 "$build/lftrain" "$dir/lora.toml" \
    > "$dir/train.log" 2>&1 || { cat "$dir/train.log"; fail "training ($name)"; }
  grep -q 'done: 4 steps' "$dir/train.log" || { cat "$dir/train.log"; fail "the run did not end at step 4 ($name)"; }
  "$build/lfmerge" "$dir/run/checkpoint-4" --out "$dir/peft" --format peft || fail "lfmerge --format peft ($name)"
  "$build/lfmerge" "$dir/run/checkpoint-4" --out "$dir/merged" || fail "lfmerge ($name)"
  mkdir -p "$dir/logits"
  "$build/tests/export_logits" "$dir/merged" "$dir/logits" || fail "export_logits ($name)"
  $py tools/check-peft.py compare "$out/base" "$dir/peft" "$dir/logits/ids.safetensors" \
    "$dir/logits/logits.safetensors" --tol 1e-4 \
    || fail "PEFT over the exported adapter differs from lfmerge's merged model ($name)"
  $py tools/check-export.py "$dir/merged" "$dir/logits/ids.safetensors" \
    "$dir/logits/logits.safetensors" || fail "transformers' logits differ from lftrain's ($name)"
  # (d) The exported adapter holds the tensors the run started from, and some changed, each by
  # little (4 AdamW steps of 1e-3 move a value by about 4e-3; an adapter made afresh, lora_B zero,
  # would be about 0.1 away from the start's random values).
  $py - "$dir/start/adapter_model.safetensors" "$dir/peft/adapter_model.safetensors" "$name" <<'PY' \
    || fail "the trained adapter ($name)"
import sys
from safetensors.torch import load_file
start, trained = load_file(sys.argv[1]), load_file(sys.argv[2])
if set(start) != set(trained):
    sys.exit(f"tensors differ: only in the start {sorted(set(start) - set(trained))}, "
             f"only in the export {sorted(set(trained) - set(start))}")
changes = {k: (trained[k].float() - start[k].float()).abs().max().item() for k in start}
changed = [k for k, v in changes.items() if v > 0]
print(f"lora_peft: {sys.argv[3]}: {len(changed)} of {len(changes)} adapter tensors changed in training, by up to "
      f"{max(changes.values()):.3e}")
if not changed:
    sys.exit("the trained adapter equals the one the run started from")
if max(changes.values()) > 0.02:
    sys.exit("the trained adapter is far from the one the run started from: was it loaded?")
PY
}
train_and_export lora
train_and_export dora --dora
grep -q '"use_dora": true' "$out/dora/peft/adapter_config.json" || fail "the DoRA export does not say use_dora"
[ "$(grep -c lora_magnitude_vector "$out/dora/peft/adapter_model.safetensors")" -gt 0 ] || fail "the DoRA export has no magnitudes"

# (f) PEFT adapter folders merged by lfmerge = PEFT's merge_and_unload.
for case in a e; do
  "$build/lfmerge" "$out/$case" --base "$fixture" --out "$out/$case-merged" >"$out/$case-merge.log" 2>&1 ||
    { cat "$out/$case-merge.log"; fail "lfmerge of the PEFT adapter ($case)"; }
  $py tools/check-peft.py merged "$fixture" "$out/$case" "$out/$case-merged" --tol 1e-6 ||
    fail "lfmerge's merge of PEFT adapter ($case) differs from PEFT's merge_and_unload"
done
cat > "$out/export_lora.yaml" <<YAML
model: $fixture
peft_config:
  name: lora
  adapter_name_or_path: $out/a
  export_dir: $out/a-merged-yaml
  export_size: 5
  infer_dtype: float32
YAML
"$build/lfmerge" "$out/export_lora.yaml" >"$out/yaml-merge.log" 2>&1 || { cat "$out/yaml-merge.log"; fail "lfmerge export_lora.yaml"; }
cmp -s "$out/a-merged/model.safetensors" "$out/a-merged-yaml/model.safetensors" ||
  fail "export_lora.yaml's merge differs from lfmerge --base's"
# Without the base the folder is refused, naming what to give.
"$build/lfmerge" "$out/a" --out "$out/no-base" >"$out/no-base.log" 2>&1 && fail "a PEFT adapter merged without --base"
grep -q "name that folder (--base MODEL" "$out/no-base.log" || { cat "$out/no-base.log"; fail "no-base message"; }
echo "lora_peft: (f) PEFT adapter folders merged by lfmerge (--base, export_lora.yaml) = PEFT's merge_and_unload"
echo "lora_peft: ok"
