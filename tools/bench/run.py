#!/usr/bin/env python3
"""lftrain's benchmark (`make bench`): the model of inputs/bench.toml trained by lftrain and by
PyTorch (eager, and torch.compile) in the same run, side by side, fp32 and bf16 (bf16 where this
CPU's bf16 GEMM beats its fp32 GEMM, measured in the run):
  none with 1 and 2 threads, ddp with 2 ranks x 1 thread  (PyTorch: plain, plain, DDP gloo)
then the ablation of lftrain's fused kernels (each alone, all, none) and the overlap table
(exposed vs in-flight communication with and without the MPI progress thread).
It prints tokens/s, model FLOP/s as a fraction of the GEMM rate measured in this run, bytes per
all-reduce per step, exposed communication time, peak RSS per rank, and lftrain / PyTorch.
Then the sharded engines at 2 ranks x 1 thread, fp32 (one row each: ddp, fsdp2 with and without
reshard_after_forward, fsdp FULL_SHARD, deepspeed ZeRO-1/2/3, and PyTorch DDP and FSDP2 beside
them): tokens/s and the ratio to ddp, peak CPU tensor bytes and RSS per rank, and the bus bytes
moved per step against the algorithm's. `--only sharded` runs just that table, `--only main`
just the first, `--only megatron` the megatron rows (tools/bench/megatron_table.py).
Timings are ratios within one run: this machine is noisy; no threshold is asserted anywhere.
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


LAST = {}  # how contended the last run() was: cpu_share and cpu_pressure


def cpu_pressure_us():
    """Linux PSI: microseconds in which some runnable task waited for a CPU (None without PSI)."""
    try:
        with open("/proc/pressure/cpu") as f:
            return int(f.readline().split("total=")[1])
    except (OSError, IndexError, ValueError):
        return None


def run(cmd, env=None):
    before, psi, start = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_pressure_us(), time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter() - start
    # The run's CPU time over all cores: ~1 when it had the machine to itself (MPI ranks poll
    # while they wait), ~0.5 when as many other processes shared it.
    LAST["cpu_share"] = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / \
        (wall * (os.cpu_count() or 1))
    # The fraction of the run's wall time in which some task waited for a CPU: ~0 alone, ~1
    # when other processes competed for the cores all along.
    psi_after = cpu_pressure_us()
    LAST["cpu_pressure"] = (psi_after - psi) / 1e6 / wall if psi is not None and psi_after is not None else None
    if out.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout


def flops_per_token(cfg):
    """Model FLOPs per token as lftrain counts them (src/train/metrics.cpp, torchtitan's count):
    6 x the matmul weights (layers and the head) + 12 x layers x attention width x sequence."""
    m = cfg["model"]
    h, layers, i, v = m["hidden_size"], m["num_hidden_layers"], m["intermediate_size"], m["vocab_size"]
    q = m["num_attention_heads"] * m.get("head_dim", h // m["num_attention_heads"])
    kv = m["num_key_value_heads"] * m.get("head_dim", h // m["num_attention_heads"])
    per_layer = h * (2 * q + 2 * kv + 3 * i)
    return 6 * (layers * per_layer + v * h) + 12 * layers * q * cfg["cutoff_len"]


def param_bytes(cfg):
    """fp32 bytes of the model's parameters: (all of them, the decoder layers' alone)."""
    m = cfg["model"]
    h, layers, i, v = m["hidden_size"], m["num_hidden_layers"], m["intermediate_size"], m["vocab_size"]
    hd = h // m["num_attention_heads"]
    kv = m.get("num_key_value_heads", m["num_attention_heads"]) * hd
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * i + 2 * h  # q, o; k, v; gate, up, down; 2 norms
    root = v * h * (1 if m.get("tie_word_embeddings", False) else 2) + h  # embed, lm_head, norm
    return 4 * (layers * per_layer + root), 4 * layers * per_layer


UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def to_bytes(text):
    number, unit = text.split()
    return float(number) * UNITS[unit]


def parse_summary(text):
    """lftrain's end-of-run summary (rank 0): peak RSS and CPU tensor MiB per rank, one
    (communicator, kind, calls, bytes, bus bytes) per communication line, exposed and in-flight
    ms per step."""
    def per_rank(label):
        line = re.search(rf"^\s*{label}\s+(.*)$", text, re.M)
        return [float(x) for x in re.findall(r"rank \d+ ([\d.]+) MiB", line.group(1))] if line else []
    comm = [(c, kind, float(calls), to_bytes(payload), to_bytes(bus)) for c, kind, calls, payload, bus in
            re.findall(r"^\s*comm\s+'([^']+)' (\w+): ([\d.]+) calls, ([\d.]+ \w+) per step "
                       r"\(bus ([\d.]+ \w+)\)", text, re.M)]
    exposed = re.search(r"exposed\s+([\d.]+) ms of communication per step, of ([\d.]+) ms in flight", text)
    return {"rss_mib": per_rank("peak RSS"), "tensor_mib": per_rank("peak CPU tensors"), "comm": comm,
            "exposed_ms": float(exposed.group(1)) if exposed else None,
            "in_flight_ms": float(exposed.group(2)) if exposed else None}


def lftrain(build, config, ranks, threads, bf16, steps, distributed=None, extra=(), micro=None):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    with tempfile.TemporaryDirectory() as out_dir:
        args = [f"{build}/lftrain", config,
                f"distributed={distributed or ('ddp' if ranks > 1 else 'none')}", *extra,
                f"intra_op_threads={threads}", f"bf16={str(bf16).lower()}",
                f"max_steps={steps}", f"logging_steps={steps // 3}", f"output_dir={out_dir}"]
        if ranks > 1:
            args = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)] + args
            args.append(f"per_device_train_batch_size={micro or 8 // ranks}")
        text = run(args, env)
        records = [json.loads(line) for line in open(f"{out_dir}/trainer_log.jsonl")]
    tps = [r["tokens_per_s"] for r in records[1:]]  # the first window includes warm-up
    return {"tokens_per_s": sum(tps) / len(tps), "loss": records[-1]["loss"], "cpu_share": LAST["cpu_share"],
            "cpu_pressure": LAST["cpu_pressure"], "text": text, **parse_summary(text)}


def torch_peer(config, ranks, threads, bf16, steps, fsdp2=False, compile=False):
    args = [os.path.join(ROOT, ".venv/bin/python"), "tools/bench/torch_peer.py", config,
            "--threads", str(threads), "--ranks", str(ranks), "--steps", str(steps),
            "--warmup", str(steps // 3), "--micro-batch", str(8 // ranks)] + \
        (["--bf16"] if bf16 else []) + (["--fsdp2"] if fsdp2 else []) + (["--compile"] if compile else [])
    r = json.loads(run(args).strip().splitlines()[-1])
    if "error" in r:
        return {"error": r["error"]}
    return {"tokens_per_s": r["tokens_per_s"], "rss_mib": [b / 2**20 for b in r["peak_rss_bytes"]],
            "comm_bytes": r.get("comm_bytes_per_step"), "cpu_share": LAST["cpu_share"],
            "cpu_pressure": LAST["cpu_pressure"]}


def per_rank_text(mib):
    return "/".join(f"{x:.0f}" for x in mib) or "-"


def size_text(b):
    return f"{b / 2**20:.1f} MiB" if b >= 2**20 else f"{b:.0f} B"


def ddp_comm(ours):
    """The main table's communication column: the gradient all-reduce and the exposed time."""
    ar = [c for c in ours["comm"] if c[1] == "all_reduce" and c[3] > 2**20]
    if not ar:
        return "-"
    return (f"{sum(c[3] for c in ar) / 2**20:.1f} MiB in {sum(c[2] for c in ar):.0f} calls, exposed "
            f"{ours['exposed_ms']:.0f} of {ours['in_flight_ms']:.0f} ms")


# (row name, lftrain `distributed`, extra overrides, theory: "2P" or "2P+layers")
SHARDED = (
    ("ddp", "ddp", (), "2P"),
    ("fsdp2", "fsdp2", (), "2P+layers"),
    ("fsdp2 no-reshard", "fsdp2", ("dist_config.reshard_after_forward=false",), "2P"),
    ("fsdp FULL_SHARD", "fsdp", ("dist_config.sharding_strategy=FULL_SHARD",), "2P+layers"),
    ("ZeRO-1", "deepspeed", ("deepspeed={z1}",), "2P"),
    ("ZeRO-2", "deepspeed", ("deepspeed=inputs/ds_z2_config.json",), "2P"),
    ("ZeRO-3", "deepspeed", ("deepspeed=inputs/ds_z3_config.json",), "2P+layers"),
)
# PyTorch's peers, printed under the lftrain row of the same algorithm
PEERS = {"ddp": ("PyTorch DDP gloo", False), "fsdp2": ("PyTorch FSDP2 gloo", True)}
CONTENDED = 0.5  # cpu pressure above which a row is measured once more at the end
ZERO1 = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
         "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
         "zero_optimization": {"stage": 1}}


def contention_text(r):
    psi = f"{r['cpu_pressure']:.2f}" if r["cpu_pressure"] is not None else "-"
    return f"{r['cpu_share']:.2f}/{psi}" + ("*" if r.get("rerun") else "")


def sharded_table(args, cfg):
    """One row per sharded engine at 2 ranks x 1 thread, fp32, against ddp in the same run; a row
    measured while other processes competed for the CPUs is measured once more at the end, and
    the faster of the two is kept (contention only slows a run down)."""
    n, steps = 2, args.sharded_steps
    p_all, p_layers = param_bytes(cfg)
    theory = {"2P": 2 * p_all * (n - 1) / n, "2P+layers": (2 * p_all + p_layers) * (n - 1) / n}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as z1:
        json.dump(ZERO1, z1)

    def measure(name):
        if name in PEERS.values():
            return torch_peer(args.config, n, 1, False, steps, fsdp2=name[1])
        engine, extra = next((e, x) for row, e, x, _ in SHARDED if row == name)
        return lftrain(args.build, args.config, n, 1, False, steps, engine,
                       tuple(e.format(z1=z1.name) for e in extra) + ("save_strategy=no",))

    order = []
    for name, _, _, _ in SHARDED:
        order.append(name)
        if name in PEERS:
            order.append(PEERS[name])
    rows = {}
    print(f"\nSharded engines: measuring {len(order)} runs of {steps} steps ...", flush=True)
    try:
        for key in order:
            rows[key] = measure(key)
        contended = {key for key in order if rows[key].get("cpu_pressure") is not None and
                     rows[key]["cpu_pressure"] > CONTENDED}
        # Rows measured alone and rows measured on a shared machine do not compare: measure the
        # latter once more. When every row was shared, they were alike, and a second pass would
        # only double the time.
        for key in order if len(contended) < len(order) else ():
            r = rows[key]
            if "error" in r or key not in contended:
                continue
            again = measure(key)
            if "error" not in again and again["tokens_per_s"] > r["tokens_per_s"]:
                rows[key] = again
            rows[key]["rerun"] = True
    finally:
        os.unlink(z1.name)

    print(f"Sharded engines, {n} ranks x 1 thread, fp32, global batch 8, {steps} steps (the first "
          f"{steps // 3} excluded as warm-up).\nP = {p_all / 2**20:.1f} MiB of fp32 parameters, "
          f"of which the decoder layers {p_layers / 2**20:.1f} MiB; theory per rank per step: "
          f"2P(n-1)/n = {theory['2P'] / 2**20:.1f} MiB, (2P + P_layers)(n-1)/n = "
          f"{theory['2P+layers'] / 2**20:.1f} MiB.\n"
          f"cpu/psi: the run's CPU time / (wall time x {os.cpu_count()} cores), and the fraction of its wall "
          f"time in which some task waited for a CPU (/proc/pressure/cpu); ~1/~0 alone, ~0.5/~1 with\n"
          f"other processes on the machine (timing not clean); * measured twice (psi > {CONTENDED} where "
          f"other rows were not), the faster kept.\nPyTorch's /ddp is to PyTorch DDP; its bytes are its "
          f"FSDP2 collectives' payloads x (n-1)/n.")
    if all((rows[key].get("cpu_pressure") or 0) > CONTENDED for key in order):
        print(f"note: every run shared the CPUs with other processes (psi > {CONTENDED}); the table's ratios "
              f"compare runs at alike contention, its absolute rates are not this machine's.")
    head = (f"{'engine':22} {'tok/s':>7} {'/ddp':>5} {'cpu/psi':>10}  {'tensors MiB/rank':>16} "
            f"{'RSS MiB/rank':>12}  {'bus MiB/step':>12} {'theory':>7} {'ratio':>5}  "
            f"{'exposed/in flight ms':>20}  collectives per step")
    print(head)
    print("-" * len(head))
    for name, _, _, algo in SHARDED:
        r = rows[name]
        bus = sum(c[4] for c in r["comm"])
        calls = ", ".join(f"{kind} {k:g} x {size_text(payload)}" for _, kind, k, payload, _ in r["comm"])
        exposed = f"{r['exposed_ms']:.0f} / {r['in_flight_ms']:.0f}" if r["exposed_ms"] is not None else "-"
        print(f"{name:22} {r['tokens_per_s']:7.1f} {r['tokens_per_s'] / rows['ddp']['tokens_per_s']:5.2f} "
              f"{contention_text(r):>10}  {per_rank_text(r['tensor_mib']):>16} {per_rank_text(r['rss_mib']):>12}  "
              f"{bus / 2**20:12.1f} {theory[algo] / 2**20:7.1f} {bus / theory[algo]:5.2f}  "
              f"{exposed:>20}  {calls}")
        if name not in PEERS:
            continue
        label = "  " + PEERS[name][0]
        peer = rows[PEERS[name]]
        if "error" in peer:
            print(f"{label:22} failed: {peer['error']}")
            continue
        bus_text, theory_text, ratio_text = "-", "-", "-"
        if peer["comm_bytes"]:  # payloads; bus = (n-1)/n x payload (x 2 for all-reduce)
            bus = sum(v * (n - 1) / n * (2 if k == "all_reduce" else 1) for k, v in peer["comm_bytes"].items())
            bus_text, theory_text = f"{bus / 2**20:.1f}", f"{theory[algo] / 2**20:.1f}"
            ratio_text = f"{bus / theory[algo]:.2f}"
        ref = rows[PEERS["ddp"]] if "tokens_per_s" in rows[PEERS["ddp"]] else rows["ddp"]
        print(f"{label:22} {peer['tokens_per_s']:7.1f} {peer['tokens_per_s'] / ref['tokens_per_s']:5.2f} "
              f"{contention_text(peer):>10}  {'-':>16} {per_rank_text(peer['rss_mib']):>12}  {bus_text:>12} "
              f"{theory_text:>7} {ratio_text:>5}  {'-':>20}  "
              f"lftrain / PyTorch {r['tokens_per_s'] / peer['tokens_per_s']:.2f}")
    sys.stdout.flush()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--config", default="inputs/bench.toml")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--only", choices=("all", "main", "ablation", "overlap", "sharded", "megatron"), default="all",
                    help="main: the none/ddp table beside PyTorch eager and torch.compile; ablation: each fused "
                         "kernel on its own; overlap: exposed communication with and without the MPI progress "
                         "thread; sharded: the sharded engines' table (with ddp); megatron: tensor and pipeline "
                         "parallel rows (with ddp)")
    ap.add_argument("--sharded-steps", type=int, default=9)
    args = ap.parse_args()
    with open(os.path.join(ROOT, args.config), "rb") as f:
        cfg = tomllib.load(f)
    if args.only in ("all", "main"):
        main_table(args, cfg)
    if args.only in ("all", "ablation"):
        ablation_table(args, cfg)
    if args.only in ("all", "overlap"):
        overlap_table(args, cfg)
    if args.only in ("all", "sharded"):
        sharded_table(args, cfg)
    if args.only in ("all", "megatron"):
        import megatron_table
        megatron_table.megatron_table(args, cfg)


def bf16_is_faster(gemm, dtype):
    """bf16 rows only where this CPU's bf16 GEMM, measured in this run, beats its fp32 GEMM."""
    if dtype == "fp32" or gemm[dtype]["1"] > gemm["fp32"]["1"]:
        return True
    print(f"{dtype:5} skipped: this CPU's {dtype} matmul ({gemm[dtype]['1']} GFLOP/s) is not faster than "
          f"its fp32 one ({gemm['fp32']['1']}), so {dtype} training is no gain here", flush=True)
    return False


def main_table(args, cfg):
    fpt = flops_per_token(cfg)
    gemm = json.loads(run([f"{args.build}/lft_gemm_rate"]))
    print(f"GEMM rate (2048^3 matmul, GFLOP/s): {json.dumps(gemm)}")
    print(f"model: {cfg['model']}, sequence {cfg['cutoff_len']}, global batch 8; "
          f"{fpt / 1e6:.1f} MFLOP per token; lftrain with its defaults (fused_kernels = all, "
          f"MPI progress thread)\n")
    head = (f"{'dtype':5} {'run':16} {'lftrain tok/s':>13} {'MFU':>6} {'eager tok/s':>11} {'MFU':>6} "
            f"{'compile tok/s':>13} {'/eager':>6} {'/compile':>8}  {'RSS MiB lftrain/eager/compile':>30}  "
            f"all-reduce per step")
    print(head)
    print("-" * len(head))
    for dtype in args.dtypes.split(","):
        bf16 = dtype == "bf16"
        if not bf16_is_faster(gemm, dtype):
            continue
        for name, ranks, threads in (("none 1 thread", 1, 1), ("none 2 threads", 1, 2),
                                     ("ddp 2 x 1 thread", 2, 1)):
            ours = lftrain(args.build, args.config, ranks, threads, bf16, args.steps)
            eager = torch_peer(args.config, ranks, threads, bf16, args.steps)
            compiled = torch_peer(args.config, ranks, threads, bf16, args.steps, compile=True)
            rate = gemm[dtype][str(threads)] * ranks * 1e9
            c_tps = compiled.get("tokens_per_s")
            rss = "/".join(per_rank_text(r.get("rss_mib", [])) for r in (ours, eager, compiled))
            print(f"{dtype:5} {name:16} {ours['tokens_per_s']:13.1f} {ours['tokens_per_s'] * fpt / rate:6.1%} "
                  f"{eager['tokens_per_s']:11.1f} {eager['tokens_per_s'] * fpt / rate:6.1%} "
                  f"{c_tps or float('nan'):13.1f} {ours['tokens_per_s'] / eager['tokens_per_s']:6.2f} "
                  f"{ours['tokens_per_s'] / c_tps if c_tps else float('nan'):8.2f}  {rss:>30}  {ddp_comm(ours)}"
                  + (f"  (compile failed: {compiled['error']})" if "error" in compiled else ""), flush=True)


ABLATION = ("all", "none", "rmsnorm", "swiglu", "rotary", "cross_entropy", "attention")


def ablation_table(args, cfg):
    """lftrain at one rank and one thread with each fused kernel alone, all of them and none."""
    gemm = json.loads(run([f"{args.build}/lft_gemm_rate"]))
    print(f"\nAblation: fused_kernels at one rank x 1 thread ({args.steps} steps; tokens/s over "
          f"fused_kernels = none in the same run)")
    print(f"{'dtype':5} " + " ".join(f"{k:>13}" for k in ABLATION))
    for dtype in args.dtypes.split(","):
        bf16 = dtype == "bf16"
        if not bf16_is_faster(gemm, dtype):
            continue
        tps = {k: lftrain(args.build, args.config, 1, 1, bf16, args.steps, extra=(f"fused_kernels={k}",))["tokens_per_s"]
               for k in ABLATION}
        print(f"{dtype:5} " + " ".join(f"{tps[k]:7.1f} {tps[k] / tps['none']:5.2f}" for k in ABLATION), flush=True)


OVERLAP = (("ddp", "ddp", ()), ("ZeRO-1", "deepspeed", ("deepspeed={z1}",)),
           ("ZeRO-2", "deepspeed", ("deepspeed=inputs/ds_z2_config.json",)),
           ("ZeRO-3", "deepspeed", ("deepspeed=inputs/ds_z3_config.json",)), ("fsdp2", "fsdp2", ()))


def overlap_table(args, cfg):
    """Exposed against in-flight communication at 2 ranks x 1 thread, fp32, with the MPI progress
    thread (the default) and without it (comm_progress_us = 0)."""
    print(f"\nOverlap: 2 ranks x 1 thread, fp32, {args.sharded_steps} steps; hidden = 1 - exposed / in flight "
          f"(the summary's waited time over the time collectives were in flight)")
    head = (f"{'engine':8} {'progress thread':>24} {'no progress thread':>24} {'losses':>8}")
    print(head + "\n" + f"{'':8} {'tok/s  hidden  exp/flight ms':>24} {'tok/s  hidden  exp/flight ms':>24}")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as z1:
        json.dump(ZERO1, z1)
    try:
        for name, engine, extra in OVERLAP:
            cells, losses = [], []
            for progress in ("1000", "0"):
                r = lftrain(args.build, args.config, 2, 1, False, args.sharded_steps, engine,
                            tuple(e.format(z1=z1.name) for e in extra) + ("save_strategy=no", f"comm_progress_us={progress}"))
                hidden = 1 - r["exposed_ms"] / r["in_flight_ms"] if r["in_flight_ms"] else float("nan")
                cells.append(f"{r['tokens_per_s']:6.0f} {hidden:6.1%} {r['exposed_ms']:5.0f}/{r['in_flight_ms']:<5.0f}")
                losses.append(r["loss"])
            same = "equal" if losses[0] == losses[1] else f"{abs(losses[0] - losses[1]):.1e}"
            print(f"{name:8} {cells[0]:>24} {cells[1]:>24} {same:>8}", flush=True)
    finally:
        os.unlink(z1.name)


if __name__ == "__main__":
    main()
