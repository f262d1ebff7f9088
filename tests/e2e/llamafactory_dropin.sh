#!/usr/bin/env bash
# llamafactory_dropin.sh BUILD_DIR TINY_MODEL: LlamaFactory users' files run as they are.
#  1. The example YAMLs of inputs/llamafactory (full SFT with DeepSpeed ZeRO-3, FSDP2 from the
#     guide, pre-training, LoRA SFT), changed only in model folder, output_dir and steps.
#  2. A YAML and the TOML that says the same give the same losses, bitwise (4 steps: the loss
#     of step 4 follows an update whose learning rate tells a cosine from a linear decay; both
#     cut at 128 tokens, the YAML's on the command line: bf16 sequences of 512 made this part
#     60 of the test's 123 s on AVX2 kernels).
# The YAMLs train in bf16 as their files say, which a CPU without bf16 instructions runs ~100x
# slower than fp32: each run has the fewest steps its claim needs.
#  3. Padding each micro-batch to its longest sequence (pad_to_multiple_of = 8) leaves the losses
#     of padding to cutoff_len (pad_to_multiple_of = 0), on ddp and on megatron with sequence
#     parallelism (the tp group pads alike).
# Run from the repository root.
set -u
build=$1 tiny=$2
out=$(mktemp -d /tmp/lft-lf-XXXXXX)
trap 'rm -rf "$out"' EXIT
run() { local np=$1; shift; mpirun --oversubscribe --bind-to none -np "$np" "$build/lftrain" "$@" 2>&1; }
fail() { echo "llamafactory_dropin: FAIL: $*"; exit 1; }
expect() { grep -Eq -- "$2" <<<"$1" || { echo "$1" | tail -30; fail "output lacks /$2/"; }; }

# 1. The example files.
for example in llama3_full_sft_ds3 llama3_full_sft_fsdp2 llama3_full_pt; do
  text=$(run 2 "inputs/llamafactory/$example.yaml" model_name_or_path="$tiny" output_dir="$out/$example" logging_steps=1 \
         max_steps=2) || { echo "$text" | tail -30; fail "$example exited non-zero"; }
  expect "$text" "note: inputs/llamafactory/$example.yaml:[0-9]+:1: report_to = \"none\" has no effect"
  expect "$text" "done: 2 steps"
  [ -s "$out/$example/training_loss.png" ] || fail "$example: no training_loss.png (plot_loss: true)"
done
expect "$text" "c4_demo \(inputs/../../shared/data/c4_demo.jsonl\): text, 64 records, 64 used"

# 1b. The LoRA SFT example: a PEFT adapter made for the tiny model, trained from, and the
#     YAML-configured run's checkpoint exported as a PEFT adapter that peft loads.
.venv/bin/python tools/check-peft.py make-adapter "$tiny" "$out/adapter0" --r 8 --alpha 16 --seed 0 >/dev/null \
  || fail "making the starting adapter"
text=$(run 2 inputs/llamafactory/llama3_lora_sft.yaml model_name_or_path="$tiny" adapter_name_or_path="$out/adapter0" \
       output_dir="$out/lora" save_steps=4 max_steps=4 gradient_accumulation_steps=1) || { echo "$text" | tail -30; fail "llama3_lora_sft exited non-zero"; }
expect "$text" "finetuning lora: trainable params 74752"
expect "$text" "done: 4 steps"
"$build/lfmerge" "$out/lora/checkpoint-4" --out "$out/lora-peft" --format peft >/dev/null || fail "lfmerge --format peft of a YAML run"
"$build/lfmerge" "$out/lora/checkpoint-4" --out "$out/lora-hf" >/dev/null || fail "lfmerge of a YAML run"
"$build/tests/export_logits" "$out/lora-hf" "$out" >/dev/null || fail "export_logits"
# 1c. v1's export_lora.yaml (llamafactory-cli merge) run by lfmerge: the run's output_dir as the
#     adapter, the same merged weights as the command line's export; another base is refused.
export_yaml() {  # FILE MODEL DTYPE
  printf 'model: %s\npeft_config:\n  name: lora\n  adapter_name_or_path: %s\n  export_dir: %s\n  export_size: 5\n  infer_dtype: %s\n' \
    "$2" "$out/lora" "$out/lora-yaml" "$3" > "$1"
}
export_yaml "$out/export.yaml" "$tiny" float32
"$build/lfmerge" "$out/export.yaml" >/dev/null || fail "lfmerge export.yaml"
cmp -s "$out/lora-yaml/model.safetensors" "$out/lora-hf/model.safetensors" || fail "lfmerge export.yaml wrote other weights"
export_yaml "$out/other.yaml" "$out/lora-hf" auto
text=$("$build/lfmerge" "$out/other.yaml" --force 2>&1) && fail "an export file naming another base model was accepted"
expect "$text" "the export names model .*lora-hf, but .*checkpoint-4 was trained on"
.venv/bin/python tools/check-peft.py compare "$tiny" "$out/lora-peft" "$out/ids.safetensors" "$out/logits.safetensors" \
  || fail "peft's logits of the exported adapter differ from the merged model's"

# 2. YAML = TOML.
cat > "$out/same.toml" <<TOML
distributed = "fsdp2"
model_name_or_path = "$tiny"
stage = "sft"
dataset = "identity,alpaca_en_demo"
dataset_dir = "inputs"
template = "llama3"
cutoff_len = 128
max_samples = 64
output_dir = "$out/toml"
logging_steps = 1
max_steps = 4
per_device_train_batch_size = 8
learning_rate = 1e-5
lr_scheduler_type = "cosine"
warmup_ratio = 0.1
bf16 = true
eval_dataset = "identity"
eval_steps = 10
[dist_config]
mixed_precision = "bf16"
reshard_after_forward = true
offload_params = false
TOML
run 2 inputs/llamafactory/llama3_full_sft_fsdp2.yaml model_name_or_path="$tiny" output_dir="$out/yaml" \
  max_steps=4 cutoff_len=128 >/dev/null || fail "YAML run"
run 2 "$out/same.toml" >/dev/null || fail "TOML run"
python3 tests/e2e/compare_logs.py "$out/yaml/trainer_log.jsonl" "$out/toml/trainer_log.jsonl" 1 4 0 \
  || fail "the YAML and the TOML runs differ"

# 3. Padding to the batch leaves the losses.
common=(inputs/sft_alpaca.toml model_name_or_path="$tiny" train_dataset=../shared/data/alpaca_en_demo.json
        cutoff_len=256 max_steps=6 logging_steps=1 val_size=0 save_strategy=no)
for layout in "ddp 2" "megatron 2 mesh.tp=2 dist_config.sequence_parallel=true"; do
  set -- $layout
  engine=$1 np=$2; shift 2
  for pad in 0 8; do
    text=$(run "$np" "${common[@]}" distributed="$engine" "$@" pad_to_multiple_of=$pad \
           output_dir="$out/pad-$engine-$pad") || { echo "$text" | tail -20; fail "$engine pad $pad"; }
  done
  expect "$text" "\| pad [0-9]+%"
  python3 tests/e2e/compare_logs.py "$out/pad-$engine-0/trainer_log.jsonl" "$out/pad-$engine-8/trainer_log.jsonl" \
    1 6 1e-6 || fail "$engine: padding to the batch changed the losses"
done
echo "llamafactory_dropin: ok"
