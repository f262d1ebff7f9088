#!/usr/bin/env python3
"""The real-size benchmark (`make bench-real`, part of `make bench`): LlamaFactory v1's own example
model, Qwen3-0.6B at its real shape (596 M parameters, vocab 151936, 28 layers, head_dim 128,
tied embeddings), generated here with random weights by `transformers` in bf16 as 3 safetensors
shards (nothing is downloaded), fine-tuned on alpaca at 2 ranks, bf16, gradient checkpointing,
one packed 512-token sequence per rank and step:

  lftrain fsdp2, deepspeed ZeRO-3 and megatron tp2, LoRA and QLoRA under fsdp2, then PyTorch FSDP2 (gloo; transformers'
  Qwen3ForCausalLM with fully_shard per decoder layer, bf16 parameters, fp32 reduction), and,
  where tools/install-v1-env installed it, LlamaFactory v1 itself on its example YAML
  (inputs/llamafactory/v1/train_full_fsdp2.yaml) beside lftrain on the same file,

one after the other in one run. Per row: tokens/s (real tokens) over the steps after the first,
model FLOP/s (torchtitan's count: docs/performance.md) as a fraction of the bf16 GEMM rate of the
machine's cores measured in this run (build/lft_gemm_rate), peak RSS per rank against lftrain's
per-rank estimate (the start-up plan's, as `--check` prints it), the seconds from launch to the end of the first step,
and tokens/s and MFU over the full steps alone (every rank a whole 512-token sequence; the epoch's
short last pack lands in step 3 of this job, where one rank idles: PyTorch's job has only full
steps, so its ratio is printed on both). Timings are ratios within one run (this machine is
noisy); nothing is asserted.

  tools/bench/real_size.py [--build build] [--steps 6] [--only fsdp2,muon,zero3,megatron,lora,qlora,torch,v1,ckpt]
                           [--dtypes bf16,fp32] [--layers 28]
  (ckpt in --only: saves of the model's state in both checkpoint formats against the disk's rate,
  and async_checkpoint's blocked time: tools/bench/checkpoint.py's real_size_table)   (fewer layers: a quick try of the script)
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = os.path.join(ROOT, ".venv", "bin", "python")
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
QWEN3_0_6B = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
                  max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6)
SEQ = 512
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")

MAKE_MODEL = r"""
import sys, torch, transformers
shape, out = eval(sys.argv[1]), sys.argv[2]
torch.manual_seed(0)
config = transformers.Qwen3Config(**shape, torch_dtype="bfloat16")
model = transformers.Qwen3ForCausalLM(config).to(torch.bfloat16)
model.save_pretrained(out, max_shard_size="500MB")
"""


def make_model(folder, layers):
    shape = dict(QWEN3_0_6B, num_hidden_layers=layers)
    if os.path.exists(os.path.join(folder, "config.json")):
        with open(os.path.join(folder, "config.json")) as f:
            if json.load(f).get("num_hidden_layers") == layers:
                return
        shutil.rmtree(folder)
    start = time.perf_counter()
    subprocess.run([PY, "-c", MAKE_MODEL, repr(shape), folder], check=True, env=ENV)
    for name in os.listdir(os.path.join(ROOT, "tests/fixtures/tokenizers/qwen2")):
        shutil.copy(os.path.join(ROOT, "tests/fixtures/tokenizers/qwen2", name), folder)
    shards = [n for n in os.listdir(folder) if n.endswith(".safetensors")]
    size = sum(os.path.getsize(os.path.join(folder, n)) for n in shards)
    print(f"model: {folder}: {len(shards)} safetensors shards, {size / 1e9:.2f} GB, written by transformers "
          f"in {time.perf_counter() - start:.0f} s")


def gemm_rate(build):
    out = subprocess.run([os.path.join(build, "lft_gemm_rate")], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def timed_lines(cmd, log_path):
    """Runs cmd, writing its output to log_path; returns (output, {pattern: seconds since launch})."""
    start, first = time.perf_counter(), {}
    lines = []
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
        for line in proc.stdout:
            log.write(line)
            lines.append(line)
            if "first_step" not in first and re.match(r"step 1/\d+", line.strip()):
                first["first_step"] = time.perf_counter() - start
            if "weights" not in first and line.startswith("weights: ready"):
                first["weights"] = time.perf_counter() - start
        proc.wait()
    text = "".join(lines)
    if proc.returncode != 0:
        sys.exit(f"real_size: {' '.join(cmd)} failed ({proc.returncode}); the end of {log_path}:\n{text[-3000:]}")
    return text, first


def mib(text, pattern):
    return [float(v) for v in re.findall(pattern, text)]


def lftrain_row(args, name, overrides, dtype):
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2", os.path.join(args.build, "lftrain")]
    common = [os.path.join(ROOT, "inputs/sft_alpaca.toml"), f"model_name_or_path={args.model}", "template=qwen3",
              f"train_dataset={os.path.join(SHARED, 'alpaca_en_demo.json')}", f"cutoff_len={SEQ}", "packing=true",
              "per_device_train_batch_size=1", "gradient_accumulation_steps=1", f"bf16={str(dtype == 'bf16').lower()}",
              "gradient_checkpointing=true", "val_size=0", f"max_steps={args.steps}", "logging_steps=1",
              "warmup_steps=0", "save_strategy=no", "plot_loss=false",
              f"output_dir={os.path.join(args.work, name.replace(' ', '-') + '-' + dtype)}"] + overrides
    text, first = timed_lines(cmd + common, os.path.join(args.work, name.replace(" ", "-") + "-" + dtype + ".log"))
    estimate = mib(text, r"([0-9.]+) MiB resident")  # the start-up plan's, as `--check` prints it
    steps = [re.search(r"\| ([0-9.]+) tok/s \| ([0-9.]+) GFLOP/s(?:.*\| hardware ([0-9.]+) GFLOP/s)?", line)
             for line in text.splitlines() if re.match(r"step \d+/\d+ \|", line)]
    steps = [m for m in steps if m]
    full = full_steps(os.path.join(args.work, name.replace(" ", "-") + "-" + dtype, "trainer_log.jsonl"), len(steps))
    timed = steps[1:] or steps  # after the first (warm-up) step
    tps = sum(float(m.group(1)) for m in timed) / len(timed)
    gflops = sum(float(m.group(2)) for m in timed) / len(timed)
    hw = sum(float(m.group(3) or m.group(2)) for m in timed) / len(timed)
    on_full = [m for k, m in enumerate(steps) if k > 0 and full[k]]
    full_tps = sum(float(m.group(1)) for m in on_full) / len(on_full) if on_full else None
    full_gflops = sum(float(m.group(2)) for m in on_full) / len(on_full) if on_full else None
    rss = mib(text, r"rank \d+ (\d+) MiB")
    rss = rss[:2]  # the summary's first line is peak RSS
    return dict(name=name, tokens_per_s=tps, model_gflops=gflops, hardware_gflops=hw, full_steps=len(on_full),
                full_tokens_per_s=full_tps, full_model_gflops=full_gflops,
                peak_rss_mib=rss, estimate_mib=estimate[0] if estimate else None,
                first_step_s=first.get("first_step"), weights_s=first.get("weights"))


def full_steps(log_path, count):
    """Per step of trainer_log.jsonl: whether it trained 2 x SEQ tokens (every rank a full sequence).
    Packing leaves shorter sequences (the epoch's last pack: 43 tokens with alpaca_en_demo, in step 3
    of this job), and a rank with one idles while the other computes: PyTorch's job has only full
    steps. The tokens of a step are its tokens/s times its seconds (trainer_log's elapsed time, to
    the second: within 10% at about 20 s a step)."""
    records = []
    if os.path.exists(log_path):
        with open(log_path) as f:
            records = [json.loads(line) for line in f if line.strip()]
    def seconds(text):
        h, m, s = (int(v) for v in text.split(":"))
        return 3600 * h + 60 * m + s
    full, previous = [], 0
    for r in records[:count]:
        now = seconds(r["elapsed_time"])
        full.append(r["tokens_per_s"] * (now - previous) >= 0.9 * 2 * SEQ)
        previous = now
    return full + [False] * (count - len(full))


TORCH_PEER = r"""
import json, os, resource, sys, time, torch, torch.distributed as dist, transformers
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
folder, steps, seq, dtype = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), getattr(torch, sys.argv[4])
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
launched = float(os.environ["LFT_LAUNCHED"])
model = transformers.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
for layer in model.model.layers:
    fully_shard(layer, mp_policy=policy)
fully_shard(model, mp_policy=policy)
opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01)
g = torch.Generator().manual_seed(rank)
times, first = [], None
for step in range(steps):
    ids = torch.randint(0, 151000, (1, seq), generator=g)
    start = time.perf_counter()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
    times.append(time.perf_counter() - start)
    if first is None:
        first = time.time() - launched
rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0])
all_rss = [torch.zeros(1) for _ in range(dist.get_world_size())]
dist.all_gather(all_rss, rss)
if rank == 0:
    timed = times[1:] or times
    print("RESULT", json.dumps(dict(step_s=sum(timed) / len(timed), first_step_s=first, rss=[float(r) for r in all_rss])))
dist.destroy_process_group()
"""


def torch_row(args, dtype):
    env = dict(ENV, LFT_LAUNCHED=str(time.time()), OMP_NUM_THREADS="1")
    script = os.path.join(args.work, "torch_fsdp2_peer.py")
    with open(script, "w") as f:
        f.write(TORCH_PEER)
    cmd = [PY, "-m", "torch.distributed.run", "--nproc_per_node", "2", script, args.model, str(args.steps), str(SEQ),
           "bfloat16" if dtype == "bf16" else "float32"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        return dict(name="PyTorch FSDP2 (gloo)", error=(out.stdout + out.stderr)[-1500:])
    result = json.loads(re.search(r"RESULT (.*)", out.stdout).group(1))
    tokens = 2 * SEQ
    return dict(name="PyTorch FSDP2 (gloo)", tokens_per_s=tokens / result["step_s"],
                model_gflops=tokens / result["step_s"] * model_flops_per_token(args.layers) / 1e9,
                peak_rss_mib=result["rss"], first_step_s=result["first_step_s"])


def model_flops_per_token(layers):
    m = dict(QWEN3_0_6B, num_hidden_layers=layers)
    h, q, kv = m["hidden_size"], m["num_attention_heads"] * m["head_dim"], m["num_key_value_heads"] * m["head_dim"]
    matmul = layers * h * (2 * q + 2 * kv + 3 * m["intermediate_size"]) + m["vocab_size"] * h
    return 6 * matmul + 12 * layers * q * SEQ


def v1_rows(args):
    """LlamaFactory v1 and lftrain on v1's own example YAML: seconds per step after the first."""
    if not os.access(os.path.join(ROOT, ".venv-v1", "bin", "python"), os.X_OK):
        print("v1: skipped (.venv-v1 absent: tools/install-v1-env installs LlamaFactory v1)")
        return []
    yaml = "inputs/llamafactory/v1/train_full_fsdp2.yaml"
    keys = [f"model={args.model}", f"cutoff_len={SEQ}", f"max_steps={args.steps}", "micro_batch_size=1"]
    rows = []
    for name, cmd in [
            ("LlamaFactory v1 (its YAML)", [os.path.join(ROOT, "tools/v1-reference"), "--np", "2", yaml,
                                             f"output_dir={os.path.join(args.work, 'v1')}"] + keys),
            ("lftrain (the same YAML)", ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2",
                                         os.path.join(args.build, "lftrain"), yaml, "logging_steps=1",
                                         f"output_dir={os.path.join(args.work, 'v1-lftrain')}"] + keys)]:
        start = time.perf_counter()
        _, first = timed_lines(cmd, os.path.join(args.work, name.split()[0] + "-v1.log"))
        rows.append(dict(name=name, wall_s=time.perf_counter() - start, first_step_s=first.get("first_step")))
    return rows


def table_rows(args, only, dtype):
    """The lftrain engines and PyTorch FSDP2 in `dtype` (bf16: autocast over fp32 masters)."""
    mixed = ["dist_config.mixed_precision=" + dtype]
    rows = []
    if "fsdp2" in only:
        rows.append(lftrain_row(args, "lftrain fsdp2", ["distributed=fsdp2"] + mixed, dtype))
    if "muon" in only:  # Muon's cost beside AdamW's on the same job (docs/optimizer.md)
        rows.append(lftrain_row(args, "lftrain fsdp2 Muon", ["distributed=fsdp2", "use_muon=true"] + mixed, dtype))
    if "zero3" in only:
        rows.append(lftrain_row(args, "lftrain ZeRO-3", ["distributed=deepspeed", "deepspeed=inputs/ds_z3_config.json"], dtype))
    if "megatron" in only:
        rows.append(lftrain_row(args, "lftrain megatron tp2", ["distributed=megatron", "mesh.tp=2"], dtype))
    # LoRA r8 beside every decoder-layer linear, and QLoRA: the same over the 4-bit NF4 base (double
    # quantization), which is whole on every rank where fsdp2 shards the frozen fp32 base.
    lora = ["distributed=fsdp2", "finetuning_type=lora", "lora_rank=8", "learning_rate=1e-4"] + mixed
    if "lora" in only:
        rows.append(lftrain_row(args, "lftrain fsdp2 LoRA r8", lora, dtype))
    if "qlora" in only:
        rows.append(lftrain_row(args, "lftrain fsdp2 QLoRA r8", lora + ["quantization_bit=4"], dtype))
    if "torch" in only:
        rows.append(torch_row(args, dtype))
    return rows


def print_table(args, rows, dtype, rate):
    print(f"\nQwen3-0.6B shape ({args.layers} layers), 2 ranks x 1 thread, {dtype}, gradient checkpointing, "
          f"{SEQ} tokens per rank and step, {args.steps} steps (the first not timed); MFU against {rate} GFLOP/s:")
    print(f"{'':24} {'tokens/s':>9} {'model GFLOP/s':>14} {'MFU':>6} {'peak RSS MiB/rank':>20} {'estimate':>9} "
          f"{'RSS/est':>8} {'first step s':>13} {'full steps: tokens/s':>21} {'MFU':>6}")
    for r in rows:
        if "error" in r:
            print(f"{r['name']:24} failed: {r['error']}")
            continue
        rss = max(r["peak_rss_mib"]) if r.get("peak_rss_mib") else float("nan")
        est = r.get("estimate_mib")
        print(f"{r['name']:24} {r['tokens_per_s']:9.1f} {r['model_gflops']:14.2f} {r['model_gflops'] / rate:6.1%} "
              f"{'/'.join(f'{v:.0f}' for v in r['peak_rss_mib']):>20} {est or float('nan'):9.0f} "
              f"{(rss / est if est else float('nan')):8.2f} {r['first_step_s'] or float('nan'):13.1f} "
              + (f"{r['full_tokens_per_s']:13.1f} ({r['full_steps']} of {args.steps - 1}) "
                 f"{r['full_model_gflops'] / rate:6.1%}" if r.get("full_tokens_per_s") else
                 (f"{r['tokens_per_s']:13.1f} (all)       {r['model_gflops'] / rate:6.1%}" if "full_steps" not in r else "")))
    torch_tps = next((r["tokens_per_s"] for r in rows if r["name"].startswith("PyTorch") and "error" not in r), None)
    if torch_tps:
        for r in rows:
            if r["name"].startswith("lftrain"):
                line = f"{r['name']} / PyTorch FSDP2 tokens/s: {r['tokens_per_s'] / torch_tps:.2f}x"
                if r.get("full_tokens_per_s"):
                    line += f"; on full steps (PyTorch's are all full): {r['full_tokens_per_s'] / torch_tps:.2f}x"
                print(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--only", default="fsdp2,muon,zero3,megatron,lora,qlora,torch,v1,ckpt")
    parser.add_argument("--dtypes", default="bf16", help="bf16, fp32 or both (bf16,fp32): one table each")
    parser.add_argument("--model", help="the model folder (default: output/bench-qwen3-0.6b, made if absent)")
    args = parser.parse_args()
    args.build = os.path.abspath(args.build)
    args.model = os.path.abspath(args.model or os.path.join(ROOT, "output", f"bench-qwen3-0.6b-{args.layers}l"))
    args.work = tempfile.mkdtemp(prefix="lft-real-size-")
    only = args.only.split(",")
    make_model(args.model, args.layers)
    # The machine's rate: the better of two measurements, one before the rows and one after them
    # (a busy neighbour on this VM lowers one now and then; a low rate would inflate the MFU).
    gemm = [gemm_rate(args.build), None]
    print(f"GEMM rate (2048^3 matmul, GFLOP/s): {json.dumps(gemm[0])}; MFU is against the rate of the run's dtype "
          f"at 2 threads, the better of this and a second measurement after the rows")
    pending = []
    for dtype in args.dtypes.split(","):
        pending.append((dtype, table_rows(args, only, dtype)))
    gemm[1] = gemm_rate(args.build)
    print(f"GEMM rate after the rows: {json.dumps(gemm[1])}")
    for dtype, rows in pending:
        print_table(args, rows, dtype, max(g[dtype]["2"] for g in gemm))
    if "ckpt" in only:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import checkpoint
        checkpoint.real_size_table(args.build, args.model, args.work, "qwen3",
                                   os.path.join(SHARED, "alpaca_en_demo.json"), SEQ)
    if "v1" in only:
        v1 = v1_rows(args)
        for r in v1:
            print(f"{r['name']:28} {r['wall_s']:8.1f} s for {args.steps} steps (first step ends at "
                  f"{r['first_step_s'] or float('nan'):.1f} s)")
        if len(v1) == 2:
            print(f"v1 wall time / lftrain's on the same YAML: {v1[0]['wall_s'] / v1[1]['wall_s']:.2f}x")
    shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
