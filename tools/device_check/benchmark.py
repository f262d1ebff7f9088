"""device-check's fourth check: lftrain (bf16, bf16 + fp8) beside PyTorch eager and torch.compile
on a ~1.1 B Llama, with tokens/s, MFU against the bf16 GEMM rate and peak memory."""
import json
import os
import re

from device_check.runs import BUDGET, ROOT, DeviceMemory, last_error, run

BENCH_MODEL_GPU = {"vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 8192,
                   "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 8,
                   "max_position_embeddings": 2048, "rope_theta": 10000.0}
BENCH_MODEL_CPU = {"vocab_size": 259, "hidden_size": 128, "intermediate_size": 352,
                   "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "max_position_embeddings": 128, "rope_theta": 10000.0}


def parameter_count(m):
    h, layers, ffn, vocab = m["hidden_size"], m["num_hidden_layers"], m["intermediate_size"], m["vocab_size"]
    kv = m["num_key_value_heads"] * (h // m["num_attention_heads"])
    layer = 2 * h * h + 2 * h * kv + 3 * h * ffn + 2 * h  # q, o; k, v; gate, up, down; two norms
    non_embedding = layers * layer + h
    return non_embedding, non_embedding + 2 * vocab * h  # embeddings and lm_head untied


def flops_per_token(m, seq):
    """lftrain's count (src/train/metrics.cpp): 6 x the matmul weights (layers and head) + attention."""
    h, layers, ffn, vocab = m["hidden_size"], m["num_hidden_layers"], m["intermediate_size"], m["vocab_size"]
    kv = m["num_key_value_heads"] * (h // m["num_attention_heads"])
    matmul = layers * h * (2 * h + 2 * kv + 3 * ffn) + vocab * h
    return 6 * matmul + 12 * layers * h * seq


def bench_config(args, model):
    """The benchmark model as TOML for lftrain and JSON for the PyTorch peer."""
    seq = 2048 if not args.cpu else 128
    keys = {"distributed": "none", "train_dataset": os.path.join(ROOT, "inputs/data/arithmetic.txt"),
            "per_device_train_batch_size": args.bench_batch, "cutoff_len": seq, "learning_rate": 3e-4,
            "weight_decay": 0.01, "lr_scheduler_type": "constant", "logging_steps": 1,
            "save_strategy": "no", "seed": 1, "bf16": True}
    path = os.path.join(args.work, "bench")
    with open(path + ".toml", "w") as f:
        for k, v in keys.items():
            f.write(f"{k} = {toml_value(v)}\n")
        f.write("\n[model]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in model.items()))
    with open(path + ".json", "w") as f:
        json.dump(dict(keys, model=model), f, indent=1)
    return path + ".toml", path + ".json", seq


def toml_value(v):
    return ("true" if v else "false") if isinstance(v, bool) else json.dumps(v)


def gemm_rate(args, tools, runner, peer):
    """bf16 GEMM FLOP/s of the device the benchmark runs on, and where the figure comes from."""
    if args.cpu:
        proc = run([tools.gemm_rate, "512"], tools.env, runner.log("gemm_rate"), 120, runner.budget)
        try:
            rates = json.loads(proc.text.splitlines()[-1])["bf16"]
            return max(rates.values()) * 1e9, "lft_gemm_rate (CPU, n 512, best thread count)"
        except (ValueError, KeyError, IndexError):
            return None, f"lft_gemm_rate failed: {proc.problem() or last_error(proc.text)}"
    if not peer[0]:
        return None, f"no GEMM rate: {peer[1]} (lft_gemm_rate measures the CPU only)"
    proc = run([peer[0], os.path.join(ROOT, "tools/bench/torch_peer.py"), "--gemm-rate", "--device", "cuda"],
               tools.peer_env, runner.log("gemm_rate_cuda"), 120, runner.budget)
    try:
        return json.loads(proc.text.splitlines()[-1])["gemm_flops"]["bf16"], \
            "torch.matmul bf16 8192^3 (lft_gemm_rate has no CUDA mode)"
    except (ValueError, KeyError, IndexError):
        return None, f"GEMM rate: {proc.problem() or last_error(proc.text)}"


def bench_lftrain(args, runner, config, fp8):
    overrides = [f"max_steps={args.bench_steps}"] + (["fp8=true"] if fp8 else []) + \
        (["use_cpu=true"] if args.cpu else [])
    with DeviceMemory(not args.cpu) as memory:
        job = runner.submit("bench-lftrain" + ("-fp8" if fp8 else ""), 1, config, overrides,
                            on_gpu=not args.cpu, timeout=args.bench_timeout).result()
    problem = job.problem(on_gpu=not args.cpu)
    if problem:
        return {"problem": problem, "skipped": job.proc.skipped, "log": job.name}
    timed = [r["tokens_per_s"] for r in job.records if "loss" in r and r["current_steps"] > args.bench_warmup]
    if not timed:
        return {"problem": f"no step after the first {args.bench_warmup} in trainer_log.jsonl", "log": job.name}
    tensors = re.search(r"peak GPU tensors\s+rank 0 (\d+) MiB", job.proc.text)
    rss = re.search(r"peak RSS\s+rank 0 (\d+) MiB", job.proc.text)
    mem = [f"{tensors.group(1)} MiB allocated" if tensors else None,
           f"{memory.peak} MiB (nvidia-smi)" if memory.peak is not None else None,
           f"{rss.group(1)} MiB RSS" if rss and args.cpu else None]
    return {"tokens_per_s": sum(timed) / len(timed), "memory": ", ".join(m for m in mem if m) or "-"}


def bench_peer(args, tools, runner, budget, peer, json_config, compile):
    """PyTorch eager, or torch.compile: last, with what is left of BUDGET (everything's), a cut
    being a skip (its own budget, --compile-budget, is kept for it by the rows before)."""
    if compile and args.cpu:
        return {"problem": "not run on --cpu (compiling takes minutes on 2 cores)", "skipped": True}
    if not peer[0]:
        return {"problem": peer[1], "skipped": True}
    argv = [peer[0], os.path.join(ROOT, "tools/bench/torch_peer.py"), json_config, "--bf16",
            "--threads", str(os.cpu_count() or 1), "--steps", str(args.bench_steps),
            "--warmup", str(args.bench_warmup), "--micro-batch", str(args.bench_batch),
            "--device", "cpu" if args.cpu else "cuda"] + (["--compile"] if compile else [])
    name = "bench-torch-" + ("compile" if compile else "eager")
    with DeviceMemory(not args.cpu) as memory:
        if compile:
            proc = run(argv, tools.peer_env, runner.log(name), budget.left(), budget, own_budget=True)
        else:
            proc = run(argv, tools.peer_env, runner.log(name), args.bench_timeout, runner.budget)
    try:
        result = json.loads(proc.text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result = {}
    problem = proc.problem() or result.get("error") or (None if "tokens_per_s" in result else "no result")
    if problem:
        return {"problem": problem, "skipped": proc.skipped, "log": name}
    if "peak_device_bytes" in result:
        mem = f"{result['peak_device_bytes'] / 2**20:.0f} MiB allocated" + \
            (f", {memory.peak} MiB (nvidia-smi)" if memory.peak is not None else "")
    else:
        mem = f"{result['peak_rss_bytes'][0] / 2**20:.0f} MiB RSS"
    return {"tokens_per_s": result["tokens_per_s"], "memory": mem}


def gpu_problem(args, runner, config):
    """Why lftrain would not train the benchmark on the GPU (from --check), or None: a 1 B model
    is not trained on the CPU until its timeout."""
    job = runner.submit("bench-check", 1, config, [], on_gpu=True, timeout=120, flags=["--check"]).result()
    problem = job.proc.problem()
    if not problem and not job.device.startswith("cuda"):
        problem = f"lftrain --check chose {job.device}"
    return problem


def check_benchmark(args, tools, runner, budget, report):
    """BUDGET: everything's, of which torch.compile, last, gets what is left; the other rows run
    within RUNNER's (which ends --compile-budget earlier)."""
    model = BENCH_MODEL_CPU if args.cpu else BENCH_MODEL_GPU
    toml_config, json_config, seq = bench_config(args, model)
    non_embedding, total = parameter_count(model)
    size = f"{total / 1e9:.3f} B" if total >= 1e8 else f"{total / 1e6:.2f} M"
    sec = report.section("4", f"4. benchmark: Llama {size} parameters ({non_embedding / 1e6:.1f} M without "
                         f"embeddings), hidden {model['hidden_size']}, {model['num_hidden_layers']} layers, "
                         f"{model['num_attention_heads']} heads ({model['num_key_value_heads']} kv), ffn "
                         f"{model['intermediate_size']}, vocab {model['vocab_size']}; {args.bench_batch} x {seq} "
                         f"tokens a step, bf16, AdamW, {args.bench_steps} steps timed after the first "
                         f"{args.bench_warmup}; torch.compile last, with what is left of the budget")
    if not args.cpu:
        problem = gpu_problem(args, runner, toml_config)
        if problem:
            return sec.add("SKIPPED" if problem.startswith(BUDGET) else "FAIL", "benchmark",
                           f"{problem}; no row run (log: logs/bench-check.log)")
    peer = tools.peer_python(want_cuda=not args.cpu)
    rate, rate_source = gemm_rate(args, tools, runner, peer)
    sec.note(f"GEMM rate: {rate / 1e12:.2f} TFLOP/s bf16 from {rate_source}" if rate else rate_source)
    fpt = flops_per_token(model, seq)
    rows = [("lftrain bf16", lambda: bench_lftrain(args, runner, toml_config, fp8=False)),
            ("lftrain bf16 + fp8", lambda: bench_lftrain(args, runner, toml_config, fp8=True)),
            (f"PyTorch {peer[1] if peer[0] else ''} eager".replace("  ", " "),
             lambda: bench_peer(args, tools, runner, budget, peer, json_config, compile=False)),
            ("torch.compile", lambda: bench_peer(args, tools, runner, budget, peer, json_config, compile=True))]
    table = []
    for name, measure in rows:
        r = measure()
        if "problem" in r:
            sec.add("SKIPPED" if r.get("skipped") else "FAIL", name,
                    r["problem"] + (f" (log: logs/{r['log']}.log)" if r.get("log") and os.path.exists(runner.log(r["log"])) else ""))
            continue
        tps = r["tokens_per_s"]
        flops = tps * fpt
        share = f"{flops / rate:.1%} of the GEMM rate" if rate else "GEMM rate unknown"
        sec.add("PASS", name, f"{tps:,.0f} tokens/s, {flops / 1e12:.2f} TFLOP/s model ({share}), "
                f"peak memory {r['memory']}")
        table.append((name, tps))
    if table:
        base = table[0][1] if table[0][0] == "lftrain bf16" else None
        sec.note("tokens/s: " + "; ".join(f"{n} {t:,.0f}" + (f" ({t / base:.2f}x lftrain)" if base and n != table[0][0] else "")
                                          for n, t in table) + " (no threshold: figures only)")


