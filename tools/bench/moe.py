#!/usr/bin/env python3
"""A mixture of experts at one rank (`make bench` runs it): a Qwen3-MoE-shaped model (hidden 512,
32 experts of width 256, top-4, 4 layers, 8 heads of 64, vocabulary 8192) trained by lftrain and
by transformers 5 (its default experts implementation, no torch.compile; AdamW over fp32 weights,
the forward under CPU autocast), on the same batch shape (4 sequences of 512 tokens), with the
same threads, in one run, on random printable bytes (both sides: routing spreads over the
experts; repetitive text sends nearly every token to the same few). bf16 where the CPU's bf16 matmul beats its fp32 one, else fp32.
Both rates leave out the first third of the steps (warm-up: oneDNN builds a kernel for each new
expert row count in the first steps). Prints tokens/s and their ratio, the model FLOP/s of the active parameters (router, the 4 experts a
token uses, attention, head) against the measured GEMM rate (MFU), and lftrain's peak RSS against
its memory estimate. Then expert parallelism at 2 ranks (one thread each, fsdp2, 2 sequences a
rank): ep 1 against ep 2 on the same ranks, tokens/s, the bytes the experts' exchanges move per
step and how much of that time a rank waited, and peak RSS against the estimate.
  .venv/bin/python tools/bench/moe.py [--build build] [--steps 15] [--threads 2]"""
import argparse
import json
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import ROOT, bf16_is_faster, lftrain, run  # noqa: E402

SHAPE = dict(vocab_size=8192, hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
             num_attention_heads=8, num_key_value_heads=4, head_dim=64, num_experts=32,
             num_experts_per_tok=4, moe_intermediate_size=256, norm_topk_prob=True,
             max_position_embeddings=1024, tie_word_embeddings=False)
BATCH, SEQ = 4, 512


def flops_per_token():
    """Training FLOPs of one token through the active parameters, and causal attention."""
    s = SHAPE
    h, q, kv = s["hidden_size"], s["num_attention_heads"] * s["head_dim"], s["num_key_value_heads"] * s["head_dim"]
    layer = h * q + 2 * h * kv + q * h + s["num_experts"] * h + s["num_experts_per_tok"] * 3 * h * s["moe_intermediate_size"]
    matmul = s["num_hidden_layers"] * layer + s["vocab_size"] * h
    attention = s["num_hidden_layers"] * q * (SEQ + 1) / 2  # pairs per token of a causal sequence
    return 6 * matmul + 12 * attention


def make_model(folder):
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**SHAPE))
    model.save_pretrained(folder)


def random_text(path, seed=1):
    """Random printable bytes in lines of 200: diverse tokens, so that routing spreads over the
    experts as a trained model's does (repetitive text routes nearly every token alike)."""
    import random
    rng = random.Random(seed)
    chars = [chr(c) for c in range(33, 127)]
    with open(path, "w") as f:
        for _ in range(10000):
            f.write("".join(rng.choice(chars) for _ in range(200)) + "\n")


def transformers_step_rate(folder, bf16, threads, steps):
    """tokens/s of transformers' training steps after the first third (lftrain's first logging
    window, which its rate leaves out too), each step as lftrain's: clipped at norm 1, AdamW at
    inputs/bench_moe.toml's learning rate and weight decay."""
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.train()
    impl = getattr(model.config, "_experts_implementation", None)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(33, 127, (BATCH, SEQ), generator=gen)  # the bytes of random_text
    times = []
    for i in range(steps):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= steps // 3:
            times.append(time.perf_counter() - start)
    return BATCH * SEQ / (sum(times) / len(times)), impl


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    os.chdir(ROOT)
    gemm = json.loads(run([f"{args.build}/lft_gemm_rate"]))
    bf16 = bf16_is_faster(gemm, "bf16")
    dtype = "bf16" if bf16 else "fp32"
    rate = gemm[dtype][str(args.threads)] * 1e9
    with tempfile.TemporaryDirectory() as folder:
        make_model(folder)
        random_text(f"{folder}/text.txt")
        ours = lftrain(args.build, "inputs/bench_moe.toml", 1, args.threads, bf16, args.steps,
                       extra=[f"model_name_or_path={folder}", f"train_dataset={folder}/text.txt"])
        theirs, impl = transformers_step_rate(folder, bf16, args.threads, args.steps)
        report_one_rank(ours, theirs, impl, args.threads, dtype, rate)
        expert_parallel_rows(args.build, folder, bf16, args.steps, gemm[dtype]["1"] * 1e9, flops_per_token())


def report_one_rank(ours, theirs, impl, threads, dtype, rate):
    # The startup report's "memory ... MiB per rank at the peak: ...; with the process itself ...
    # N MiB resident".
    estimate = re.search(r"^\s*memory\s.*?([\d.]+) MiB resident", ours["text"], re.M)
    estimate_mib = float(estimate.group(1)) if estimate else None
    flops = flops_per_token()
    print(f"\nMixture of experts (Qwen3-MoE shape: hidden 512, 32 experts x 256, top-4, 4 layers), 1 rank, "
          f"{threads} threads, {dtype}, batch {BATCH} x {SEQ}; {flops / 1e6:.1f} MFLOP a token (active)")
    print(f"GEMM rate ({dtype}, {threads} threads): {rate / 1e9:.1f} GFLOP/s")
    head = f"{'trainer':34} {'tok/s':>8} {'x tf':>6} {'MFU':>6}"
    print(head)
    print("-" * len(head))
    for name, tps in (("lftrain", ours["tokens_per_s"]), (f"transformers 5 ({impl or 'default'} experts)", theirs)):
        print(f"{name:34} {tps:8.1f} {tps / theirs:6.2f} {tps * flops / rate:6.1%}")
    rss = ours["rss_mib"][0] if ours["rss_mib"] else float("nan")
    if estimate_mib:
        print(f"lftrain peak RSS {rss:.0f} MiB, estimate {estimate_mib:.0f} MiB ({rss / estimate_mib - 1:+.0%})")
    else:
        print(f"lftrain peak RSS {rss:.0f} MiB (no estimate line found)")


def expert_parallel_rows(build, folder, bf16, steps, rate_per_thread, flops):
    """fsdp2 at 2 ranks, ep 1 and ep 2: each rank 2 of the 4 sequences, one thread."""
    print(f"\nExpert parallelism, 2 ranks x 1 thread, fsdp2 ({'bf16' if bf16 else 'fp32'}), 2 sequences a rank")
    head = f"{'layout':22} {'tok/s':>8} {'x ep1':>6} {'MFU':>6} {'ep MiB/step':>12} {'ep waited':>16} {'RSS/est':>8}"
    print(head)
    print("-" * len(head))
    base = None
    for ep in (1, 2):
        r = lftrain(build, "inputs/bench_moe.toml", 2, 1, bf16, steps, distributed="fsdp2", micro=2,
                    extra=[f"model_name_or_path={folder}", f"train_dataset={folder}/text.txt", f"mesh.ep={ep}"])
        base = base or r["tokens_per_s"]
        ep_bytes = sum(c[3] for c in r["comm"] if c[0] == "ep")
        waited = re.findall(r"^\s*comm\s+'ep' \w+: .*?([\d.]+) of ([\d.]+) ms waited", r["text"], re.M)
        waited_ms = sum(float(w) for w, _ in waited)
        in_flight_ms = sum(float(f) for _, f in waited)
        estimate = re.search(r"^\s*memory\s.*?([\d.]+) MiB resident", r["text"], re.M)
        rss = max(r["rss_mib"]) if r["rss_mib"] else float("nan")
        vs = f"{rss / float(estimate.group(1)) - 1:+.0%}" if estimate else "-"
        print(f"{'ep ' + str(ep):22} {r['tokens_per_s']:8.1f} {r['tokens_per_s'] / base:6.2f} "
              f"{r['tokens_per_s'] * flops / (2 * rate_per_thread):6.1%} {ep_bytes / 2**20:12.1f} "
              f"{(f'{waited_ms:.0f} of {in_flight_ms:.0f} ms' if waited else '-'):>16} {vs:>8}")


if __name__ == "__main__":
    main()
