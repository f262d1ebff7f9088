#!/usr/bin/env python3
"""LoRA and freeze against full fine-tuning on the benchmark model (`make bench` runs it): tokens/s
(and the ratio to full training under the same engine, measured in this run), peak CPU tensor
bytes per rank, and the gradient communication per step, for the one-rank engine, ddp and fsdp2 at
2 ranks. LoRA: rank 8 beside every linear of the decoder layers; freeze: the last 2 layers."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import ROOT, lftrain, size_text  # noqa: E402

KINDS = {
    "full": [],
    "lora r8": ["finetuning_type=lora", "lora_rank=8"],
    "freeze last 2": ["finetuning_type=freeze", "freeze_trainable_layers=2"],
}


def comm_bytes(r):
    """Bytes per step of the gradient collectives (all-reduce, reduce-scatter) on rank 0."""
    return sum(payload for _, kind, _, payload, _ in r["comm"] if kind in ("all_reduce", "reduce_scatter"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=9)
    args = ap.parse_args()
    os.chdir(ROOT)
    print(f"\nFine-tuning: full vs LoRA vs freeze, inputs/bench.toml, 1 thread per rank, fp32, global batch 8, "
          f"{args.steps} steps (the first window is warm-up)", flush=True)
    head = f"{'engine':8} {'finetuning':14} {'tok/s':>8} {'x full':>7} {'peak tensors MiB/rank':>22} {'grad comm/step':>15}"
    print(head)
    print("-" * len(head))
    for engine, ranks in (("none", 1), ("ddp", 2), ("fsdp2", 2)):
        full = None
        for kind, extra in KINDS.items():
            r = lftrain(args.build, "inputs/bench.toml", ranks, 1, False, args.steps, distributed=engine, extra=extra)
            full = full or r
            peak = "/".join(f"{m:.0f}" for m in r["tensor_mib"])
            comm = size_text(comm_bytes(r)) if ranks > 1 else "-"
            print(f"{engine:8} {kind:14} {r['tokens_per_s']:8.1f} {r['tokens_per_s'] / full['tokens_per_s']:7.2f} "
                  f"{peak:>22} {comm:>15}", flush=True)


if __name__ == "__main__":
    main()
