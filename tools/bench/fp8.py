#!/usr/bin/env python3
"""fp8 = true (float8 linears) against bf16 on the benchmark model (`make bench` runs it): tokens/s
and the ratio to bf16 in the same run, for the one-rank engine and fsdp2 at 2 ranks, 1 thread per
rank. On a CPU the float8 matmuls are LibTorch's CPU _scaled_mm: the times are informational
(the goal of >= 1.3x bf16 is for GPUs with float8 tensor cores)."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import ROOT, lftrain  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=9)
    args = ap.parse_args()
    os.chdir(ROOT)
    print(f"\nFloat8 linears vs bf16, inputs/bench.toml, 1 thread per rank, global batch 8, {args.steps} steps",
          flush=True)
    head = f"{'engine':8} {'precision':12} {'tok/s':>8} {'x bf16':>7} {'loss':>8}"
    print(head)
    print("-" * len(head))
    for engine, ranks in (("none", 1), ("fsdp2", 2)):
        bf16 = None
        for label, extra in (("bf16", []), ("bf16 + fp8", ["fp8=true"])):
            r = lftrain(args.build, "inputs/bench.toml", ranks, 1, True, args.steps, distributed=engine, extra=extra)
            bf16 = bf16 or r
            print(f"{engine:8} {label:12} {r['tokens_per_s']:8.1f} {r['tokens_per_s'] / bf16['tokens_per_s']:7.2f} "
                  f"{r['loss']:8.4f}", flush=True)


if __name__ == "__main__":
    main()
