#!/usr/bin/env python3
"""Context parallelism ([mesh] cp, both modes) against cp = 1 at the same global batch (`make bench`
runs it): the bundled example's model (inputs/run.toml, 0.8 M parameters) on sequences of 4096
tokens, 4 ranks under fsdp2, global batch 4 sequences: dp_shard 4 (cp 1), dp_shard 2 x cp 2 and
cp 4, each with Ulysses and with ring attention. Prints tokens/s and its ratio to cp 1 in the same
run, the peak tensor memory per rank, and the cp group's bytes per step (Ulysses: all-to-all of q,
k, v and the attention output; ring: the key/value blocks and their gradients; both: the losses'
all-gather).
On a CPU with fewer cores than ranks the ranks share cores: the ratios say what the exchanges
cost, not what a GPU node gains."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import ROOT, lftrain, size_text  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=4096)
    args = ap.parse_args()
    os.chdir(ROOT)
    print(f"\nContext parallelism, inputs/run.toml's model, fsdp2 at 4 ranks, global batch 4 x "
          f"{args.tokens} tokens, {args.steps} steps", flush=True)
    head = f"{'layout':26} {'tok/s':>8} {'x cp 1':>7} {'peak tensors MiB/rank':>22} {'cp bytes/step':>14} {'loss':>8}"
    print(head)
    print("-" * len(head))
    base = None
    layouts = [("dp_shard 4 (cp 1)", 4, 1, "ulysses")]
    for mode in ("ulysses", "ring"):
        layouts += [(f"dp_shard 2 x cp 2 {mode}", 2, 2, mode), (f"cp 4 {mode}", 1, 4, mode)]
    for label, dp_shard, cp, mode in layouts:
        extra = [f"mesh.dp_shard={dp_shard}", f"mesh.cp={cp}", f"dist_config.cp_mode={mode}", f"cutoff_len={args.tokens}",
                 f"model.max_position_embeddings={args.tokens}", f"gradient_accumulation_steps={cp}",
                 "warmup_steps=0"]
        r = lftrain(args.build, "inputs/run.toml", 4, 1, False, args.steps, distributed="fsdp2", extra=extra, micro=1)
        base = base or r
        cp_bytes = sum(c[3] for c in r["comm"] if c[0] == "cp")
        print(f"{label:26} {r['tokens_per_s']:8.1f} {r['tokens_per_s'] / base['tokens_per_s']:7.2f} "
              f"{max(r['tensor_mib'] or [0]):22.1f} {size_text(cp_bytes) if cp > 1 else '-':>14} {r['loss']:8.4f}",
              flush=True)


if __name__ == "__main__":
    main()
