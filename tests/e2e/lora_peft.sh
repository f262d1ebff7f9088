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
[ -x $py ] && $py tests/e2e/tool_calls.py installed transformers peft \
  || fail "transformers or peft is not installed: run tools/install-python-env (make test does)"
fixture=$PWD/tests/fixtures/llama-tiny

# The Python side runs in two processes (tests/e2e/tool_calls.py: one per check made this the
# suite's slowest test): `prepare` writes every adapter and the training base before the C++ steps,
# `verify` checks all their outputs after.
checks() {
  $py - "$@" <<'PY'
import sys

sys.path.insert(0, "tests/e2e")
import tool_calls  # noqa: E402

phase, fixture, out = sys.argv[1:4]
peft, export = tool_calls.tool("check-peft"), tool_calls.tool("check-export")


def check(module, what, *argv):
    tool_calls.check(module, f"lora_peft: FAIL: {what}", *argv)


def write_base(folder):
    """The fixture's architecture with vocab_size 300 (the byte tokenizer has 259 ids, the fixture 61)."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(fixture)
    config.vocab_size = 300
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)


def trained_from_start(name):
    """(d) The exported adapter holds the tensors the run started from, and some changed, each by
    little (4 AdamW steps of 1e-3 move a value by about 4e-3; an adapter made afresh, lora_B zero,
    would be about 0.1 away from the start's random values)."""
    from safetensors.torch import load_file
    start = load_file(f"{out}/{name}/start/adapter_model.safetensors")
    trained = load_file(f"{out}/{name}/peft/adapter_model.safetensors")
    if set(start) != set(trained):
        sys.exit(f"lora_peft: FAIL: the trained adapter ({name}): tensors differ: only in the start "
                 f"{sorted(set(start) - set(trained))}, only in the export {sorted(set(trained) - set(start))}")
    changes = {k: (trained[k].float() - start[k].float()).abs().max().item() for k in start}
    changed = [k for k, v in changes.items() if v > 0]
    print(f"lora_peft: {name}: {len(changed)} of {len(changes)} adapter tensors changed in training, by up to "
          f"{max(changes.values()):.3e}")
    if not changed:
        sys.exit(f"lora_peft: FAIL: the trained adapter ({name}) equals the one the run started from")
    if max(changes.values()) > 0.02:
        sys.exit(f"lora_peft: FAIL: the trained adapter ({name}) is far from the one the run started from: "
                 "was it loaded?")


if phase == "prepare":
    # (a) every linear, lm_head in modules_to_save; (b) rsLoRA (alpha / sqrt(r)), q_proj and v_proj
    # only, nothing saved whole; (e) DoRA on every linear, magnitudes away from the base's row norms.
    check(peft, "make-adapter (a)", "make-adapter", fixture, f"{out}/a", "--r", "4", "--alpha", "8",
          "--targets", "all", "--modules-to-save", "lm_head", "--seed", "1")
    check(peft, "make-adapter (b)", "make-adapter", fixture, f"{out}/b", "--r", "8", "--alpha", "4",
          "--targets", "q_proj,v_proj", "--rslora", "--seed", "2")
    check(peft, "make-adapter (e)", "make-adapter", fixture, f"{out}/e", "--r", "4", "--alpha", "8",
          "--targets", "all", "--dora", "--seed", "4")
    # (c) The adapters the two training runs start from, like (a)'s, over the vocab-300 base.
    write_base(f"{out}/base")
    for name, extra in (("lora", []), ("dora", ["--dora"])):
        check(peft, f"make-adapter ({name})", "make-adapter", f"{out}/base", f"{out}/{name}/start", "--r", "4",
              "--alpha", "8", "--targets", "all", "--modules-to-save", "lm_head", "--seed", "3", *extra)
else:
    for case in ("a", "b", "e"):
        check(peft, f"PEFT's logits differ from lftrain's ({case})", "compare", fixture, f"{out}/{case}",
              f"{out}/{case}-logits/ids.safetensors", f"{out}/{case}-logits/logits.safetensors", "--tol", "1e-4")
    for name in ("lora", "dora"):
        logits = f"{out}/{name}/logits"
        check(peft, f"PEFT over the exported adapter differs from lfmerge's merged model ({name})", "compare",
              f"{out}/base", f"{out}/{name}/peft", f"{logits}/ids.safetensors", f"{logits}/logits.safetensors",
              "--tol", "1e-4")
        check(export, f"transformers' logits differ from lftrain's ({name})", f"{out}/{name}/merged",
              f"{logits}/ids.safetensors", f"{logits}/logits.safetensors")
        trained_from_start(name)
    # (f) PEFT adapter folders merged by lfmerge = PEFT's merge_and_unload.
    for case in ("a", "e"):
        check(peft, f"lfmerge's merge of PEFT adapter ({case}) differs from PEFT's merge_and_unload", "merged",
              fixture, f"{out}/{case}", f"{out}/{case}-merged", "--tol", "1e-6")
PY
}

checks prepare "$fixture" "$out" || fail "preparing the adapters"
for case in a b e; do
  mkdir -p "$out/$case-logits"
  "$build/tests/export_logits" "$fixture" "$out/$case-logits" --adapter "$out/$case" || fail "export_logits ($case)"
done

# (c), (e) A run (fsdp2, 2 ranks) from a LoRA adapter, then one from a DoRA adapter, each exported
# by lfmerge --format peft and merged by lfmerge (`verify` compares PEFT over the one with the
# other, and transformers over the merged model).
train_and_export() {
  local name=$1
  local dir=$out/$name
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
}
train_and_export lora
train_and_export dora
grep -q '"use_dora": true' "$out/dora/peft/adapter_config.json" || fail "the DoRA export does not say use_dora"
[ "$(grep -c lora_magnitude_vector "$out/dora/peft/adapter_model.safetensors")" -gt 0 ] || fail "the DoRA export has no magnitudes"

# (f) PEFT adapter folders merged by lfmerge = PEFT's merge_and_unload.
for case in a e; do
  "$build/lfmerge" "$out/$case" --base "$fixture" --out "$out/$case-merged" >"$out/$case-merge.log" 2>&1 ||
    { cat "$out/$case-merge.log"; fail "lfmerge of the PEFT adapter ($case)"; }
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
checks verify "$fixture" "$out" || fail "the checks against PEFT and transformers"
echo "lora_peft: (f) PEFT adapter folders merged by lfmerge (--base, export_lora.yaml) = PEFT's merge_and_unload"
echo "lora_peft: ok"
