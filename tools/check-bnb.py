#!/usr/bin/env python3
"""Compares lftrain's 4-bit quantization (build/tests/quantize_4bit_dump) with bitsandbytes'.

usage: check-bnb.py DUMP_TOOL WORK_DIR

For NF4 and FP4, with and without double quantization, on weights of several kinds (normal, with
an all-zero block, a size that leaves a short last block, values on the code's midpoints, a
bfloat16 weight, a 300-block weight so that the absmax values fill two 256-blocks): the packed
bytes, the per-block absmax (dequantized with double quantization), the 8-bit absmax codes, their
scales and offset, and the dequantized weight must equal bitsandbytes.functional's bit for bit.
Prints one line per case; exit status 0 when every case is equal, 1 otherwise, 2 for a usage
error. Run it with the project's Python environment (.venv/bin/python), which has bitsandbytes.
"""
import os
import subprocess
import sys
import warnings


def weights(torch):
    g = torch.Generator().manual_seed(0)
    normal = torch.randn(96, 128, generator=g) * 0.05
    zero_block = normal.clone()
    zero_block[3, :64] = 0
    short = torch.randn(7, 33, generator=g)  # 231 elements: a last block of 39, an odd count
    nf4 = torch.tensor([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                        -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                        0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                        0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                        0.7229568362236023, 1.0])
    midpoints = ((nf4[:-1] + nf4[1:]) / 2).repeat(5)[:64].view(1, 64)
    many_blocks = torch.randn(300, 64, generator=g) * torch.rand(300, 1, generator=g)
    bf16 = (torch.randn(64, 64, generator=g) * 0.02).to(torch.bfloat16)
    return {"normal": normal, "zero_block": zero_block, "short": short, "midpoints": midpoints,
            "many_blocks": many_blocks, "bf16": bf16}


def main():
    if len(sys.argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    tool, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    warnings.filterwarnings("ignore")
    import torch
    import bitsandbytes.functional as F
    from safetensors.torch import load_file, save_file

    failed = 0
    for name, w in weights(torch).items():
        src = os.path.join(work, f"{name}.safetensors")
        save_file({"w": w.contiguous()}, src)
        subprocess.run([tool, src, os.path.join(work, name)], check=True, stdout=subprocess.DEVNULL)
        for quant_type in ("nf4", "fp4"):
            for double in (False, True):
                out = os.path.join(work, f"{name}-{quant_type}-{int(double)}.safetensors")
                got = load_file(out)
                packed, state = F.quantize_4bit(w, quant_type=quant_type, compress_statistics=double, blocksize=64)
                want = {"packed": packed.view(-1),
                        "dequantized": F.dequantize_4bit(packed, state).float().view(w.shape)}
                if double:
                    want["quantized_absmax"] = state.absmax
                    want["absmax_scale"] = state.state2.absmax
                    want["offset"] = state.offset.view(1).float()
                    absmax = F.dequantize_blockwise(state.absmax, state.state2)
                    want["absmax"] = absmax + state.offset
                else:
                    want["absmax"] = state.absmax
                problems = [k for k in want if got[k].shape != want[k].shape or not torch.equal(got[k], want[k])]
                case = f"{name} {list(w.shape)} {w.dtype} {quant_type}{' double' if double else ''}"
                if problems:
                    failed += 1
                    detail = "; ".join(
                        f"{k}: {int((got[k] != want[k]).sum()) if got[k].shape == want[k].shape else 'shape'} differ"
                        for k in problems)
                    print(f"check-bnb: {case}: FAIL: {detail}")
                else:
                    print(f"check-bnb: {case}: equal ({', '.join(sorted(want))})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
