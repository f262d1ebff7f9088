#!/usr/bin/env python3
"""lftrain's benchmark (`make bench`): the model of inputs/bench.toml trained by lftrain and by
PyTorch in the same run, side by side, fp32 and bf16:
  none with 1 and 2 threads, ddp with 2 ranks x 1 thread  (PyTorch: plain, plain, DDP gloo)
It prints tokens/s, model FLOP/s as a fraction of the GEMM rate measured in this run, bytes per
all-reduce per step, exposed communication time, peak RSS per rank, and lftrain / PyTorch.
Timings are ratios within one run: this machine is noisy; no threshold is asserted anywhere.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd, env=None):
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout


def flops_per_token(cfg):
    m = cfg["model"]
    h, layers, i, v = m["hidden_size"], m["num_hidden_layers"], m["intermediate_size"], m["vocab_size"]
    hd = h // m["num_attention_heads"]
    kv = m["num_key_value_heads"] * hd
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * i + 2 * h
    non_embedding = layers * per_layer + h  # the final norm; embeddings and lm_head excluded
    return 6 * non_embedding + 12 * layers * h * cfg["cutoff_len"]


def lftrain(build, config, ranks, threads, bf16, steps):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    with tempfile.TemporaryDirectory() as out_dir:
        args = [f"{build}/lftrain", config, f"intra_op_threads={threads}", f"bf16={str(bf16).lower()}",
                f"max_steps={steps}", f"logging_steps={steps // 3}", f"output_dir={out_dir}",
                f"distributed={'ddp' if ranks > 1 else 'none'}"]
        if ranks > 1:
            args = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)] + args
            args.append(f"per_device_train_batch_size={8 // ranks}")
        text = run(args, env)
        records = [json.loads(line) for line in open(f"{out_dir}/trainer_log.jsonl")]
    tps = [r["tokens_per_s"] for r in records[1:]]  # the first window includes warm-up
    rss = [float(x) for x in re.findall(r"rank \d+ ([\d.]+) MiB", text)]
    comm = re.search(r"all_reduce: ([\d.]+) calls, ([\d.]+ \w+) per step .*exposed ([\d.]+) ms per step of ([\d.]+) ms", text)
    return {"tokens_per_s": sum(tps) / len(tps), "rss_mib": rss,
            "comm": comm.groups() if comm else None, "loss": records[-1]["loss"]}


def torch_peer(config, ranks, threads, bf16, steps):
    args = [os.path.join(ROOT, ".venv/bin/python"), "tools/bench/torch_peer.py", config,
            "--threads", str(threads), "--ranks", str(ranks), "--steps", str(steps),
            "--warmup", str(steps // 3)] + (["--bf16"] if bf16 else [])
    r = json.loads(run(args).strip().splitlines()[-1])
    return {"tokens_per_s": r["tokens_per_s"], "rss_mib": [b / 2**20 for b in r["peak_rss_bytes"]]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--config", default="inputs/bench.toml")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--dtypes", default="fp32,bf16")
    args = ap.parse_args()
    with open(os.path.join(ROOT, args.config), "rb") as f:
        cfg = tomllib.load(f)
    fpt = flops_per_token(cfg)
    gemm = json.loads(run([f"{args.build}/lft_gemm_rate"]))
    print(f"GEMM rate (2048^3 matmul, GFLOP/s): {json.dumps(gemm)}")
    print(f"model: {cfg['model']}, sequence {cfg['cutoff_len']}, global batch 8; "
          f"{fpt / 1e6:.1f} MFLOP per token\n")
    head = (f"{'dtype':5} {'run':16} {'lftrain tok/s':>13} {'MFU':>6} {'PyTorch tok/s':>13} {'MFU':>6} "
            f"{'ratio':>6}  {'lftrain RSS/rank MiB':>20} {'PyTorch RSS MiB':>15}  all-reduce per step")
    print(head)
    print("-" * len(head))
    for dtype in args.dtypes.split(","):
        bf16 = dtype == "bf16"
        if gemm[dtype]["1"] < 0.25 * gemm["fp32"]["1"]:
            print(f"{dtype:5} skipped: this CPU has no fast {dtype} matmul ({gemm[dtype]['1']} GFLOP/s "
                  f"against {gemm['fp32']['1']} in fp32), so neither lftrain nor PyTorch can train "
                  f"in {dtype} here at a useful speed", flush=True)
            continue
        for name, ranks, threads in (("none 1 thread", 1, 1), ("none 2 threads", 1, 2),
                                     ("ddp 2 x 1 thread", 2, 1)):
            ours = lftrain(args.build, args.config, ranks, threads, bf16, args.steps)
            peer = torch_peer(args.config, ranks, threads, bf16, args.steps)
            rate = gemm[dtype][str(threads)] * ranks * 1e9
            mfu_ours = ours["tokens_per_s"] * fpt / rate
            mfu_peer = peer["tokens_per_s"] * fpt / rate
            comm = (f"{ours['comm'][1]} in {ours['comm'][0]} calls, exposed {ours['comm'][2]} of "
                    f"{ours['comm'][3]} ms" if ours["comm"] else "-")
            print(f"{dtype:5} {name:16} {ours['tokens_per_s']:13.1f} {mfu_ours:6.1%} "
                  f"{peer['tokens_per_s']:13.1f} {mfu_peer:6.1%} "
                  f"{ours['tokens_per_s'] / peer['tokens_per_s']:6.2f}  "
                  f"{'/'.join(f'{x:.0f}' for x in ours['rss_mib']):>20} "
                  f"{'/'.join(f'{x:.0f}' for x in peer['rss_mib']):>15}  {comm}", flush=True)


if __name__ == "__main__":
    main()
