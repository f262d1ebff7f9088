#!/usr/bin/env python3
"""The PyTorch peer of lftrain's benchmark: the same Llama (shapes from a TOML file), the same
batch, AdamW and bf16 autocast, written as a plain PyTorch user would write it, and PyTorch DDP
with gloo, or with --fsdp2 PyTorch's FSDP2 (`fully_shard` on each decoder layer and on the root,
gloo, CPU). Prints one JSON object: tokens_per_s, step_seconds, peak_rss_bytes (per rank), and
with --fsdp2 comm_bytes_per_step: the payload of the all-gathers and reduce-scatters FSDP2 issued
per step (counted by wrapping torch.distributed's functions), or error: the exception if
fully_shard failed. With --device cuda (one rank) it trains on the GPU and adds
peak_device_bytes (torch.cuda.max_memory_allocated); --gemm-rate prints the device's matmul rate
instead of training: {"gemm_flops": {"bf16": FLOP/s, "fp32": FLOP/s}}. CONFIG may be TOML or JSON.

  torch_peer.py CONFIG.toml --threads 2 [--bf16] [--compile] [--ranks 2] [--micro-batch 4] [--fsdp2 [--no-reshard]]
  torch_peer.py CONFIG.json --device cuda --bf16 [--compile]     (tools/device-check)
  torch_peer.py --gemm-rate --device cuda
"""
import argparse
import json
import math
import os
import resource
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self, m):
        super().__init__()
        h, self.nh, self.nkv = m["hidden_size"], m["num_attention_heads"], m["num_key_value_heads"]
        self.hd = h // self.nh
        self.q_proj = nn.Linear(h, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(h, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(h, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, h, bias=False)
        i = m["intermediate_size"]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)
        self.input_layernorm = RMSNorm(h, m.get("rms_norm_eps", 1e-6))
        self.post_attention_layernorm = RMSNorm(h, m.get("rms_norm_eps", 1e-6))

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        y = self.input_layernorm(x)
        q = self.q_proj(y).view(b, t, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(y).view(b, t, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(y).view(b, t, self.nkv, self.hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, -1))
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


class Llama(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.embed_tokens = nn.Embedding(m["vocab_size"], m["hidden_size"])
        self.layers = nn.ModuleList(Block(m) for _ in range(m["num_hidden_layers"]))
        self.norm = RMSNorm(m["hidden_size"], m.get("rms_norm_eps", 1e-6))
        self.lm_head = nn.Linear(m["hidden_size"], m["vocab_size"], bias=False)
        hd = m["hidden_size"] // m["num_attention_heads"]
        inv = 1.0 / (m.get("rope_theta", 10000.0) ** (torch.arange(0, hd, 2).float() / hd))
        self.register_buffer("inv_freq", inv, persistent=False)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids):
        t = ids.shape[1]
        freqs = torch.outer(torch.arange(t, dtype=torch.float32, device=ids.device), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        x = self.embed_tokens(ids)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


COLLECTIVE_BYTES = {}  # name -> payload bytes (the gathered / the reduced tensor) since the reset


def count_collectives():
    """Wraps the torch.distributed functions FSDP2 calls, to count their payload bytes."""
    def wrap(name, payload_arg):
        real = getattr(dist, name)

        def counted(*a, **kw):
            t = kw.get(payload_arg, a[0] if a else None)
            if isinstance(t, torch.Tensor):
                COLLECTIVE_BYTES[name] = COLLECTIVE_BYTES.get(name, 0) + t.numel() * t.element_size()
            return real(*a, **kw)
        setattr(dist, name, counted)
    wrap("all_gather_into_tensor", "output_tensor")
    wrap("reduce_scatter_tensor", "input")
    wrap("all_reduce", "tensor")


def worker(rank, args, cfg, result_file):
    try:
        train(rank, args, cfg, result_file)
    except Exception as e:  # reported in the result, so that the bench can print it
        with open(f"{result_file}.{rank}", "w") as out:
            json.dump({"error": f"{type(e).__name__}: {e}".strip().splitlines()[0][:400],
                       "traceback": traceback.format_exc()}, out)
        raise  # spawn then ends the other ranks, which may wait in a collective


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gemm_rate(args):
    """The best of several n x n matmuls per dtype on --device, in FLOP/s."""
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    n = args.gemm_size or (8192 if device.type == "cuda" else 1024)
    rates = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        c = a @ b  # warm-up
        best = 0.0
        for _ in range(10 if device.type == "cuda" else 3):
            synchronize(device)
            start = time.perf_counter()
            c = a @ b
            synchronize(device)
            best = max(best, 2.0 * n ** 3 / (time.perf_counter() - start))
        rates[name] = best
        del a, b, c
    print(json.dumps({"gemm_flops": rates, "n": n, "device": args.device}))


def train(rank, args, cfg, result_file):
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.ranks > 1:
        dist.init_process_group("gloo", init_method=f"file://{args.init_file}", rank=rank,
                                world_size=args.ranks)
    torch.manual_seed(1)
    model = Llama(cfg["model"]).to(device)
    if args.fsdp2:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        count_collectives()
        mesh = init_device_mesh("cpu", (args.ranks,))
        # reshard: None = True for the layers, False for the root (gathered once per step, as
        # lftrain's fsdp2 does); --no-reshard: False everywhere.
        reshard = False if args.no_reshard else None
        for layer in model.layers:
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    elif args.ranks > 1:
        model = nn.parallel.DistributedDataParallel(model)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.get("weight_decay", 0.0)},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.get("learning_rate", 3e-4))
    micro = args.micro_batch or cfg.get("per_device_train_batch_size", 8)
    seq = cfg.get("cutoff_len", 256)
    gen = torch.Generator().manual_seed(rank)
    ids = torch.randint(0, 259, (micro, seq), generator=gen).to(device)
    def forward_loss(ids):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(ids)
        return F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                               ids[:, 1:].reshape(-1))

    if args.compile:  # inductor: the forward and the loss compiled, backward through AOTAutograd
        forward_loss = torch.compile(forward_loss)
    times = []
    for step in range(args.steps):
        start = time.perf_counter()
        loss = forward_loss(ids)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        synchronize(device)
        times.append(time.perf_counter() - start)
        if step + 1 == args.warmup:
            COLLECTIVE_BYTES.clear()
    warm = times[args.warmup:]
    step_s = sum(warm) / len(warm)
    result = {"tokens_per_s": micro * seq * args.ranks / step_s, "step_seconds": step_s,
              "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
              "loss": float(loss.detach())}
    if device.type == "cuda":
        result["peak_device_bytes"] = torch.cuda.max_memory_allocated(device)
    if args.fsdp2:
        result["comm_bytes_per_step"] = {k: v / len(warm) for k, v in COLLECTIVE_BYTES.items()}
    with open(f"{result_file}.{rank}", "w") as out:
        json.dump(result, out)
    if args.ranks > 1:
        dist.destroy_process_group()


def load_config(path):
    if path.endswith(".json"):
        with open(path) as f:
            return json.load(f)
    import tomllib  # Python 3.11+; a JSON config needs only 3.8
    with open(path, "rb") as f:
        return tomllib.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config", nargs="?", help="TOML or JSON with [model] and the batch keys")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--micro-batch", type=int, default=0,
                    help="sequences per rank per step (default: the config's per_device_train_batch_size)")
    ap.add_argument("--fsdp2", action="store_true", help="FSDP2 fully_shard instead of DDP")
    ap.add_argument("--compile", action="store_true", help="torch.compile the forward and loss")
    ap.add_argument("--no-reshard", action="store_true",
                    help="with --fsdp2: reshard_after_forward=False")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (one rank) [cpu]")
    ap.add_argument("--gemm-rate", action="store_true", help="print the matmul rate of --device and exit")
    ap.add_argument("--gemm-size", type=int, default=0, help="with --gemm-rate: n of the n x n matmul")
    args = ap.parse_args()
    if args.gemm_rate:
        gemm_rate(args)
        return
    if args.config is None:
        ap.error("a CONFIG is needed unless --gemm-rate")
    if args.device != "cpu" and args.ranks > 1:
        ap.error("--device cuda runs one rank (the multi-rank peers use gloo on the CPU)")
    cfg = load_config(args.config)
    with tempfile.TemporaryDirectory() as tmp:
        args.init_file = os.path.join(tmp, "init")
        result_file = os.path.join(tmp, "result")
        if args.ranks == 1:
            worker(0, args, cfg, result_file)
        else:
            try:
                torch.multiprocessing.spawn(worker, args=(args, cfg, result_file), nprocs=args.ranks)
            except Exception:  # a rank failed: its result file says why
                if not any(os.path.exists(f"{result_file}.{r}") for r in range(args.ranks)):
                    raise
        results = [json.load(open(f"{result_file}.{r}")) if os.path.exists(f"{result_file}.{r}")
                   else {"error": f"rank {r} ended without a result"} for r in range(args.ranks)]
    errors = [r for r in results if "error" in r and "traceback" in r] or \
             [r for r in results if "error" in r]
    if errors:
        print(errors[0].get("traceback", ""), file=sys.stderr)
        print(json.dumps({"error": errors[0]["error"]}))
        return
    summary = {"tokens_per_s": results[0]["tokens_per_s"],
               "step_seconds": results[0]["step_seconds"],
               "peak_rss_bytes": [r["peak_rss_bytes"] for r in results]}
    if args.fsdp2:
        summary["comm_bytes_per_step"] = results[0]["comm_bytes_per_step"]
    if "peak_device_bytes" in results[0]:
        summary["peak_device_bytes"] = results[0]["peak_device_bytes"]
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
