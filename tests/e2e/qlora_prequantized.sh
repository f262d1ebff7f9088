#!/usr/bin/env bash
# qlora_prequantized.sh BUILD_DIR: a model folder that transformers + bitsandbytes saved already
# quantized to 4 bits (NF4 with double quantization, and FP4) trains as QLoRA with the same losses,
# bitwise, as the full-precision folder with quantization_bit = 4 (the same 4-bit weights: lftrain
# quantizes as bitsandbytes does), at 2 ranks under fsdp2; full fine-tuning over it and a
# contradicting quantization_type are refused naming the key; lfmerge exports the adapter and
# refuses a merged model over the 4-bit weights, saying why. Run from the repository root.
set -u
build=$1
out=$(mktemp -d /tmp/lft-qlora-pre-XXXXXX)
trap 'rm -rf "$out"' EXIT
fail() { echo "qlora_prequantized: FAIL: $*"; exit 1; }
py=.venv/bin/python
$py tests/e2e/tool_calls.py installed transformers bitsandbytes \
  || fail "transformers or bitsandbytes is not installed: run tools/install-python-env (make test does)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# The llama-tiny architecture with the byte tokenizer's vocabulary, in fp32, and its 4-bit saves.
$py - tests/fixtures/llama-tiny "$out" <<'PY' 2>&1 | grep -v "Loading\|Writing\|kernels\|triton" || true
import sys, warnings, torch, transformers
from transformers import AutoConfig, AutoModelForCausalLM, BitsAndBytesConfig
warnings.filterwarnings("ignore")
transformers.utils.logging.disable_progress_bar()
torch.manual_seed(0)
config = AutoConfig.from_pretrained(sys.argv[1])
config.vocab_size = 300
AutoModelForCausalLM.from_config(config).save_pretrained(sys.argv[2] + "/base")
for name, kind, double in (("nf4", "nf4", True), ("fp4", "fp4", False)):
    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=kind, bnb_4bit_use_double_quant=double,
                           bnb_4bit_compute_dtype=torch.float32)
    m = AutoModelForCausalLM.from_pretrained(sys.argv[2] + "/base", quantization_config=q, dtype=torch.float32,
                                             device_map={"": "cpu"})
    m.save_pretrained(sys.argv[2] + "/" + name)
PY
for f in base nf4 fp4; do [ -f "$out/$f/config.json" ] || fail "transformers did not write $out/$f"; done

printf '%s\n' 'distributed = "fsdp2"' 'tokenizer = "bytes"' 'train_dataset = "inputs/data/arithmetic.txt"' \
  'per_device_train_batch_size = 2' 'cutoff_len = 32' 'learning_rate = 1e-3' 'max_steps = 4' 'logging_steps = 1' \
  'save_strategy = "no"' > "$out/job.toml"
run() {  # run NAME MODEL [key=value ...]: 4 QLoRA steps at 2 ranks, the losses in NAME.losses
  local name=$1 model=$2; shift 2
  mpirun --oversubscribe --bind-to none -np 2 "$build/lftrain" "$out/job.toml" model_name_or_path="$model" \
    finetuning_type=lora lora_rank=4 output_dir="$out/$name-run" "$@" > "$out/$name.log" 2>&1 \
    || { tail -20 "$out/$name.log"; fail "$name"; }
  grep -o '"loss":[0-9.e+-]*' "$out/$name-run/trainer_log.jsonl" > "$out/$name.losses"
  [ "$(wc -l < "$out/$name.losses")" -eq 4 ] || fail "$name: not 4 logged steps"
}
run nf4-saved "$out/nf4" save_strategy=steps save_steps=4
run nf4-here "$out/base" quantization_bit=4
grep -q "quantized to 4-bit nf4 (double quantization)" "$out/nf4-saved.log" || fail "the saved NF4 folder's run does not say its base"
cmp -s "$out/nf4-saved.losses" "$out/nf4-here.losses" || { paste "$out/nf4-saved.losses" "$out/nf4-here.losses"; fail "NF4: the saved folder's losses differ from quantization_bit = 4's"; }
run fp4-saved "$out/fp4"
run fp4-here "$out/base" quantization_bit=4 quantization_type=fp4 double_quantization=false
cmp -s "$out/fp4-saved.losses" "$out/fp4-here.losses" || { paste "$out/fp4-saved.losses" "$out/fp4-here.losses"; fail "FP4: the saved folder's losses differ"; }
cmp -s "$out/nf4-saved.losses" "$out/fp4-saved.losses" && fail "NF4 and FP4 gave the same losses: was the base quantized?"
echo "qlora_prequantized: NF4 and FP4 folders saved by bitsandbytes train as quantization_bit = 4 does, bitwise: $(tr '\n' ' ' < "$out/nf4-saved.losses")"

# lfmerge: the adapter exports (PEFT format); a merged model needs the full-precision original.
"$build/lfmerge" "$out/nf4-saved-run/checkpoint-4" --out "$out/peft" --format peft >/dev/null || fail "lfmerge --format peft"
text=$("$build/lfmerge" "$out/nf4-saved-run/checkpoint-4" --out "$out/merged" 2>&1) && fail "lfmerge merged onto 4-bit weights"
grep -q "holds 4-bit weights saved by bitsandbytes: a merged model needs the full-precision" <<<"$text" || { echo "$text"; fail "lfmerge's refusal does not say why"; }
text=$("$build/lftrain" --check "$out/job.toml" model_name_or_path="$out/nf4" 2>&1) && fail "full fine-tuning over a 4-bit folder was accepted"
grep -q "holds 4-bit linears saved by bitsandbytes, over which only adapters train" <<<"$text" || { echo "$text"; fail "no reason for refusing full fine-tuning"; }
text=$("$build/lftrain" --check "$out/job.toml" model_name_or_path="$out/nf4" finetuning_type=lora \
       quantization_type=fp4 2>&1) && fail "quantization_type = fp4 over an NF4 folder was accepted"
grep -q "quantization_type' contradicts it" <<<"$text" || { echo "$text"; fail "no contradiction named"; }
echo "qlora_prequantized: ok"
