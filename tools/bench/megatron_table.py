"""The megatron rows of `make bench` (tools/bench/run.py --only megatron): the benchmark model at
global batch 8 = 2 sequences x 4 micro-batches, fp32, 1 thread per rank, beside ddp at 2 ranks:
dp 2 (megatron's data parallelism alone: its gradient all-reduce; and sharded as ZeRO-2 and ZeRO-3
by data_parallel_sharding_strategy), tp 2 (sequence parallel),
pp 2 (1f1b), tp 2 x pp 2 (4 ranks on this machine's cores: the row's rate shows
oversubscription, its bytes and bubble do not). Per row: tokens/s and the ratio
to ddp, the pipeline bubble measured (stages' receive waits / step time) beside the schedule's
idle-slot fraction, payload bytes per step on rank 0's tp and pp communicators against the
volume computed from the shapes, the communication time per step that the step waited for
(exposed) of the time collectives were in flight, peak CPU tensor memory and RSS per rank."""
import re

from run import lftrain, per_rank_text

MICRO, ACCUM = 2, 4


def theory(cfg, tp, pp, sp):
    """Payload bytes per step on rank 0 (the first stage, tensor-parallel rank 0): (tp collectives,
    pp sends), counted as tests/mpi/test_megatron.cpp (MegatronComm) counts them."""
    m = cfg["model"]
    h, layers, t = m["hidden_size"], m["num_hidden_layers"], cfg["cutoff_len"]
    act = MICRO * t * h * 4  # one micro-batch's [B, T, H] fp32
    stage_layers, last = layers // pp, pp == 1
    tp_bytes = 0.0
    if tp > 1:
        # Per micro-batch: forward, the exits of the embedding and of each attention and MLP;
        # backward, the entries of each attention and MLP (and of the lm_head on the last stage).
        ops = 4 * stage_layers + 1 + (1 if last else 0)
        tp_bytes = ACCUM * ops * act * (2 if sp else 1) + 8  # + the gradient norm
        if last:
            tp_bytes += ACCUM * 3 * MICRO * (t - 1) * 4  # the loss's max, sum and target logit
        if sp:
            tp_bytes += (2 * stage_layers + (1 if last else 0)) * h * 4  # the norms' gradients
    pp_bytes = ACCUM * act / (tp if sp else 1) if pp > 1 else 0.0
    return tp_bytes, pp_bytes


ROWS = (
    # name, ranks, engine, overrides, tp, pp, sp
    ("ddp", 2, "ddp", (), 1, 1, False),
    ("megatron dp2", 2, "megatron", (), 1, 1, False),
    ("megatron dp2 ZeRO-2", 2, "megatron", ("dist_config.data_parallel_sharding_strategy=optim_grads",), 1, 1, False),
    ("megatron dp2 ZeRO-3", 2, "megatron", ("dist_config.data_parallel_sharding_strategy=optim_grads_params",),
     1, 1, False),
    ("megatron tp2 sp", 2, "megatron", ("mesh.tp=2", "dist_config.sequence_parallel=true"), 2, 1, True),
    ("megatron pp2 1f1b", 2, "megatron", ("mesh.pp=2",), 1, 2, False),
    ("megatron tp2 x pp2 sp", 4, "megatron", ("mesh.tp=2", "mesh.pp=2", "dist_config.sequence_parallel=true"),
     2, 2, True),
)


def megatron_table(args, cfg):
    steps = args.sharded_steps
    print(f"\nMegatron: measuring {len(ROWS)} runs of {steps} steps ...", flush=True)
    rows = {}
    for name, ranks, engine, extra, tp, pp, sp in ROWS:
        micro = 8 // ranks if engine == "ddp" else MICRO
        accum = ("gradient_accumulation_steps=1",) if engine == "ddp" else (f"gradient_accumulation_steps={ACCUM}",)
        rows[name] = lftrain(args.build, args.config, ranks, 1, False, steps, engine,
                             tuple(extra) + accum + ("save_steps=0",), micro=micro)
        found = re.search(r"bubble ([\d.]+) of the step time .*idle slots: ([\d.]+)", rows[name]["text"])
        rows[name]["bubble"] = (float(found.group(1)), float(found.group(2))) if found else None
    print(f"Megatron, fp32, 1 thread per rank, global batch 8 ({MICRO} sequences x {ACCUM} micro-batches for "
          f"megatron), {steps} steps (the first {steps // 3} excluded). Bytes: payload per step and rank "
          f"(nccl-tests' size), measured / computed from the shapes.")
    head = (f"{'run':24} {'ranks':>5} {'tok/s':>7} {'/ddp':>5} {'bubble':>15}  {'tp MiB/step':>17} "
            f"{'pp MiB/step':>15}  {'exposed/in flight ms':>20}  {'tensors MiB/rank':>16} {'RSS MiB/rank':>14}")
    print(head)
    print("-" * len(head))
    for name, ranks, engine, extra, tp, pp, sp in ROWS:
        r = rows[name]
        tp_theory, pp_theory = theory(cfg, tp, pp, sp)
        tp_moved = sum(c[3] for c in r["comm"] if c[0] == "tp")
        pp_moved = sum(c[3] for c in r["comm"] if c[0] == "pp" and c[1] == "send")
        bubble = f"{r['bubble'][0]:.2f} ({r['bubble'][1]:.2f})" if r.get("bubble") else "-"
        tp_text = f"{tp_moved / 2**20:.1f} / {tp_theory / 2**20:.1f}" if tp > 1 else "-"
        pp_text = f"{pp_moved / 2**20:.2f} / {pp_theory / 2**20:.2f}" if pp > 1 else "-"
        exposed = (f"{r['exposed_ms']:.0f} / {r['in_flight_ms']:.0f}" if r.get("exposed_ms") is not None else "-")
        print(f"{name:24} {ranks:5d} {r['tokens_per_s']:7.1f} {r['tokens_per_s'] / rows['ddp']['tokens_per_s']:5.2f} "
              f"{bubble:>15}  {tp_text:>17} {pp_text:>15}  {exposed:>20}  {per_rank_text(r['tensor_mib']):>16} "
              f"{per_rank_text(r['rss_mib']):>14}", flush=True)
    return rows
