#!/usr/bin/env python3
"""Makes PEFT LoRA adapters for a base model, and checks logits computed by lftrain against PEFT's.

usage: check-peft.py make-adapter BASE_DIR OUT_DIR [--r 4] [--alpha 8] [--targets all|q_proj,...]
                                   [--modules-to-save lm_head] [--rslora] [--dora] [--seed 0] [--std 0.05]
       check-peft.py compare BASE_DIR ADAPTER_DIR INPUT_IDS_SAFETENSORS EXPECTED_LOGITS_SAFETENSORS
                                   [--tol 1e-4]
       check-peft.py merged BASE_DIR ADAPTER_DIR EXPORT_DIR [--tol 1e-6]

make-adapter: loads BASE_DIR with transformers (float32), wraps it with peft.get_peft_model (a
LoraConfig of rank --r, lora_alpha --alpha, the --targets linears: "all" is every linear of the
decoder layers, q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj; --rslora for alpha /
sqrt(r) scaling; --dora for DoRA, whose magnitude vectors start at PEFT's row norms of the base
weights and are then scaled by 1 + noise; --modules-to-save: comma-separated modules trained whole), then gives every
lora_A and lora_B random nonzero values (normal, --std, from a generator seeded with --seed; PEFT
starts lora_B at zero, which would leave the logits unchanged) and adds such noise to the
modules_to_save copies, and writes OUT_DIR with save_pretrained (adapter_config.json,
adapter_model.safetensors). Prints how much the adapter changes the base's logits.

compare: loads BASE_DIR with transformers.AutoModelForCausalLM (float32), puts the adapter in
ADAPTER_DIR over it with peft.PeftModel.from_pretrained, runs the input ids ([batch, seq]
integers: the tensor "input_ids", or the file's only tensor) and compares the logits with the
expected ones ("logits", or the only tensor; [batch, seq, vocab]), as written by
tests/export_logits MODEL_DIR OUT_DIR --adapter ADAPTER_DIR (or by export_logits on an lfmerge
export of the run that trained the adapter). Prints the max abs difference, and how much the
adapter changes the base's logits (a check against an adapter that does nothing is no check).

merged: loads BASE_DIR (float32) with ADAPTER_DIR over it as compare does, merges it
(merge_and_unload, what LlamaFactory's `llamafactory-cli merge` does) and compares every tensor of
the merged model's state dict with EXPORT_DIR's safetensors (lfmerge's export of that adapter):
the same names, and the max abs difference. Prints it, and how far the merge moved the base.

Exit status: 0 when the difference is <= the tolerance (make-adapter: the adapter was written), 1
when it is larger (or the shapes differ, or the base or adapter does not load), 2 for a wrong
command line or unreadable input files.

Run it with the project's Python environment (.venv/bin/python), which has torch, transformers
and peft.
"""
import argparse
import json
import os
import sys

ALL_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def fail_usage(message):
    print(f"check-peft: {message}", file=sys.stderr)
    return 2


def load_tensor(path, preferred):
    from safetensors.torch import load_file

    tensors = load_file(path)
    if preferred in tensors:
        return tensors[preferred]
    if len(tensors) == 1:
        return next(iter(tensors.values()))
    raise ValueError(f"{path} has no tensor '{preferred}' and holds {len(tensors)} tensors "
                     f"({', '.join(sorted(tensors))}): name the one to use '{preferred}'")


def load_base(base_dir):
    import warnings

    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    # `dtype` since 4.56; `torch_dtype` before (and deprecated after).
    dtype_key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    model = transformers.AutoModelForCausalLM.from_pretrained(base_dir, **{dtype_key: torch.float32})
    model.eval()
    return model


def names(text):
    return [n.strip() for n in text.split(",") if n.strip()]


def make_adapter(args):
    if not os.path.isfile(os.path.join(args.base_dir, "config.json")):
        return fail_usage(f"{args.base_dir} has no config.json: is it a Hugging Face model folder?")
    if os.path.exists(os.path.join(args.out_dir, "adapter_config.json")):
        return fail_usage(f"{args.out_dir} already holds an adapter: choose another folder")
    targets = ALL_TARGETS if args.targets == "all" else names(args.targets)
    if not targets:
        return fail_usage("--targets names no module")
    modules_to_save = names(args.modules_to_save) if args.modules_to_save else None

    import torch
    from peft import LoraConfig, get_peft_model

    try:
        base = load_base(args.base_dir)
    except Exception as e:  # noqa: BLE001 - report why the base does not load
        print(f"check-peft: transformers cannot load {args.base_dir}: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1
    ids = (torch.arange(32) * 7 + 3).remainder(base.config.vocab_size).view(2, 16)
    with torch.no_grad():
        before = base(input_ids=ids).logits.clone()
    config = LoraConfig(r=args.r, lora_alpha=args.alpha, lora_dropout=0.0, target_modules=targets,
                        modules_to_save=modules_to_save, use_rslora=args.rslora, use_dora=args.dora, bias="none",
                        task_type="CAUSAL_LM")
    try:
        model = get_peft_model(base, config)
    except Exception as e:  # noqa: BLE001 - a target or module the base lacks is a usage error
        return fail_usage(f"peft cannot make the adapter: {type(e).__name__}: {e}")
    generator = torch.Generator().manual_seed(args.seed)
    lora, saved = 0, 0
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=generator, dtype=torch.float32) * args.std
            if ".lora_A." in name or ".lora_B." in name:
                p.copy_(noise.to(p.dtype))
                lora += 1
            elif ".modules_to_save." in name:
                p.add_(noise.to(p.dtype))
                saved += 1
            elif ".lora_magnitude_vector." in name:
                p.mul_((1 + noise).to(p.dtype))
                lora += 1
    if lora == 0:
        print(f"check-peft: no LoRA parameters were made for targets {targets}", file=sys.stderr)
        return 1
    if modules_to_save and saved == 0:
        print(f"check-peft: no modules_to_save copies were made for {modules_to_save}",
              file=sys.stderr)
        return 1
    model.eval()
    with torch.no_grad():
        after = model(input_ids=ids).logits
    model.save_pretrained(args.out_dir)
    # PEFT writes target_modules from a set, in the order of this process's string hashes: sorted,
    # the same adapter is the same bytes in every run (tools/peer-runs keys runs by their inputs).
    config_path = os.path.join(args.out_dir, "adapter_config.json")
    with open(config_path) as f:
        config = json.load(f)
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
        with open(config_path, "w") as f:
            f.write(json.dumps(config, indent=2, sort_keys=True))
    print(f"check-peft: wrote {args.out_dir}: r {args.r}, alpha {args.alpha}"
          f"{' (rslora)' if args.rslora else ''}{' (dora)' if args.dora else ''}, targets {','.join(targets)}, "
          f"{lora} lora tensors, modules_to_save {','.join(modules_to_save or []) or 'none'} "
          f"({saved} tensors); it changes the base's logits by up to "
          f"{(after - before).abs().max().item():.3e}")
    return 0


def compare(args):
    for path in (args.input_ids, args.expected_logits):
        if not os.path.isfile(path):
            return fail_usage(f"{path} does not exist")
    if not os.path.isfile(os.path.join(args.base_dir, "config.json")):
        return fail_usage(f"{args.base_dir} has no config.json: is it a Hugging Face model folder?")
    if not os.path.isfile(os.path.join(args.adapter_dir, "adapter_config.json")):
        return fail_usage(f"{args.adapter_dir} has no adapter_config.json: is it a PEFT adapter "
                          "folder (lfmerge --format peft)?")

    import torch

    try:
        ids = load_tensor(args.input_ids, "input_ids").to(torch.long)
        expected = load_tensor(args.expected_logits, "logits").to(torch.float32)
    except Exception as e:  # noqa: BLE001 - any unreadable input is a usage error
        return fail_usage(str(e))
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if expected.dim() == 2:
        expected = expected.unsqueeze(0)

    from peft import PeftModel

    try:
        base = load_base(args.base_dir)
        model = PeftModel.from_pretrained(base, args.adapter_dir)
    except Exception as e:  # noqa: BLE001 - report why the base or adapter does not load
        print(f"check-peft: PEFT cannot load {args.adapter_dir} over {args.base_dir}: "
              f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids).logits.to(torch.float32)
        with model.disable_adapter():
            plain = model(input_ids=ids).logits.to(torch.float32)

    if logits.shape != expected.shape:
        print(f"check-peft: logits have shape {list(logits.shape)}, expected {list(expected.shape)}")
        return 1
    diff = (logits - expected).abs().max().item()
    ok = diff <= args.tol
    print(f"check-peft: PEFT {args.adapter_dir} over {args.base_dir}: max abs logit diff "
          f"{diff:.3e} over {list(logits.shape)} ({'ok' if ok else 'FAIL'}, tolerance {args.tol:g}); "
          f"the adapter changes the base's logits by up to {(logits - plain).abs().max().item():.3e}")
    return 0 if ok else 1


def merged(args):
    import glob

    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    try:
        base = AutoModelForCausalLM.from_pretrained(args.base_dir, dtype=torch.float32)
        before = {k: v.detach().clone() for k, v in base.state_dict().items()}
        model = PeftModel.from_pretrained(base, args.adapter_dir).merge_and_unload()
    except Exception as e:  # noqa: BLE001 - any load failure is the answer
        print(f"check-peft: merged: cannot load {args.base_dir} with {args.adapter_dir}: {e}")
        return 1
    want = {k: v for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        want.pop("lm_head.weight", None)
    have = {}
    for f in sorted(glob.glob(os.path.join(args.export_dir, "*.safetensors"))):
        have.update(load_file(f))
    if set(want) != set(have):
        print(f"check-peft: merged: names differ: only PEFT {sorted(set(want) - set(have))[:5]}, "
              f"only the export {sorted(set(have) - set(want))[:5]}")
        return 1
    worst = max((want[k].float() - have[k].float()).abs().max().item() for k in want)
    moved = max((want[k].float() - before[k].float()).abs().max().item() for k in want if k in before)
    ok = worst <= args.tol
    print(f"check-peft: merged: {len(want)} tensors, max abs difference {worst:.3e} "
          f"({'<=' if ok else '>'} {args.tol:g}); the merge moved the base by up to {moved:.3e}")
    return 0 if ok and moved > 0 else 1


def main(argv=None):
    """argv: the command line after the program's name (default sys.argv's); a test that runs
    several commands imports this file and calls main once for each, in one Python start-up."""
    parser = argparse.ArgumentParser(prog="check-peft.py", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("make-adapter", help="write a random nonzero LoRA adapter")
    make.add_argument("base_dir")
    make.add_argument("out_dir")
    make.add_argument("--r", type=int, default=4, help="LoRA rank (4)")
    make.add_argument("--alpha", type=int, default=8, help="lora_alpha (8)")
    make.add_argument("--targets", default="all",
                      help="all, or comma-separated module names (q_proj,v_proj,...)")
    make.add_argument("--modules-to-save", default="",
                      help="comma-separated modules trained whole (lm_head, embed_tokens, norm)")
    make.add_argument("--rslora", action="store_true", help="alpha / sqrt(r) scaling")
    make.add_argument("--dora", action="store_true", help="DoRA (use_dora): magnitude vectors too")
    make.add_argument("--seed", type=int, default=0, help="random seed (0)")
    make.add_argument("--std", type=float, default=0.05, help="std of the random values (0.05)")
    cmp = commands.add_parser("compare", help="PEFT's logits against expected ones")
    cmp.add_argument("base_dir")
    cmp.add_argument("adapter_dir")
    cmp.add_argument("input_ids")
    cmp.add_argument("expected_logits")
    cmp.add_argument("--tol", type=float, default=1e-4, help="max abs difference (1e-4)")
    mrg = commands.add_parser("merged", help="PEFT's merge_and_unload against an export")
    mrg.add_argument("base_dir")
    mrg.add_argument("adapter_dir")
    mrg.add_argument("export_dir")
    mrg.add_argument("--tol", type=float, default=1e-6, help="max abs difference (1e-6)")
    args = parser.parse_args(argv)
    if args.command == "merged":
        return merged(args)
    if args.command == "make-adapter":
        if args.r < 1 or args.alpha < 1 or args.std <= 0:
            return fail_usage("--r and --alpha must be >= 1 and --std > 0")
        return make_adapter(args)
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
