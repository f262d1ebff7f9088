#!/usr/bin/env python3
"""Checks an lfmerge export against logits computed by lftrain.

usage: check-export.py EXPORT_DIR INPUT_IDS_SAFETENSORS EXPECTED_LOGITS_SAFETENSORS [--tol 1e-4]

Loads EXPORT_DIR with transformers.AutoModelForCausalLM.from_pretrained(..., float32), runs the
input ids ([batch, seq] integers: the tensor "input_ids", or the file's only tensor) and compares
the logits with the expected ones ("logits", or the only tensor; [batch, seq, vocab]). Prints the
max abs difference. Exit status: 0 when it is <= the tolerance, 1 when it is larger (or the shapes
differ, or the folder does not load), 2 for a wrong command line or unreadable input files.

Run it with the project's Python environment (.venv/bin/python), which has torch and
transformers.
"""
import argparse
import os
import sys


def load_tensor(path, preferred):
    from safetensors.torch import load_file

    tensors = load_file(path)
    if preferred in tensors:
        return tensors[preferred]
    if len(tensors) == 1:
        return next(iter(tensors.values()))
    raise ValueError(f"{path} has no tensor '{preferred}' and holds {len(tensors)} tensors "
                     f"({', '.join(sorted(tensors))}): name the one to use '{preferred}'")


def main(argv=None):
    """argv: the command line after the program's name (default sys.argv's); a test may import
    this file and call main for each check, in one Python start-up."""
    parser = argparse.ArgumentParser(prog="check-export.py", description=__doc__.splitlines()[0])
    parser.add_argument("export_dir")
    parser.add_argument("input_ids")
    parser.add_argument("expected_logits")
    parser.add_argument("--tol", type=float, default=1e-4, help="max abs difference (1e-4)")
    args = parser.parse_args(argv)

    for path in (args.input_ids, args.expected_logits):
        if not os.path.isfile(path):
            print(f"check-export: {path} does not exist", file=sys.stderr)
            return 2
    if not os.path.isfile(os.path.join(args.export_dir, "config.json")):
        print(f"check-export: {args.export_dir} has no config.json: is it an lfmerge --format hf "
              "export?", file=sys.stderr)
        return 2

    import torch

    try:
        ids = load_tensor(args.input_ids, "input_ids").to(torch.long)
        expected = load_tensor(args.expected_logits, "logits").to(torch.float32)
    except Exception as e:  # noqa: BLE001 - any unreadable input is a usage error
        print(f"check-export: {e}", file=sys.stderr)
        return 2
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if expected.dim() == 2:
        expected = expected.unsqueeze(0)

    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    # `dtype` since 4.56; `torch_dtype` before (and deprecated after).
    dtype_key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            args.export_dir, **{dtype_key: torch.float32})
    except Exception as e:  # noqa: BLE001 - report why the export does not load
        print(f"check-export: transformers cannot load {args.export_dir}: "
              f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids).logits.to(torch.float32)

    if logits.shape != expected.shape:
        print(f"check-export: logits have shape {list(logits.shape)}, expected "
              f"{list(expected.shape)}")
        return 1
    diff = (logits - expected).abs().max().item()
    ok = diff <= args.tol
    print(f"check-export: {type(model).__name__} from {args.export_dir}: max abs logit diff "
          f"{diff:.3e} over {list(logits.shape)} ({'ok' if ok else 'FAIL'}, tolerance "
          f"{args.tol:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
