#!/usr/bin/env python3
"""plan_check.py --build BUILD: `lftrain --plan` against step times measured here.

Makes two namespace hosts (tools/netns-hosts, needs root), measures this machine the way a cluster
file describes one (the fp32 GEMM rate of one thread, shared by the ranks of the 2 cores; an
all-reduce's latency and bus bandwidth inside one host and across the two; the compute efficiency
of a one-rank run of the model), writes that as a cluster file, then for each layout runs lftrain
across the hosts and asks `lftrain --plan CLUSTER CONFIG --this-layout` for its prediction: the
table shows predicted and measured step time side by side, with the link as it is and with its
rate limited (tc). Time is informational: the ratio is what the check reports, never a test.
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOSTS = os.path.join(ROOT, "tools", "netns-hosts")
ENV = dict(os.environ, LFT_NETNS_PREFIX="lftpc", LFT_NETNS_SUBNET="10.81.0", LFT_NETNS_BRIDGE="lftpcbr0",
           OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
H1, H2 = "lftpc1", "lftpc2"
COMMON = ["logging_steps=1", "lr_scheduler_type=constant", "warmup_steps=0", "save_strategy=no", "bf16=false"]
STEPS = 10
# (name, config, overrides): every layout at 4 ranks = 2 hosts x 2, one at 8 = 2 hosts x 4.
LAYOUTS = [
    ("ddp", "inputs/run.toml", []),
    ("fsdp2 HSDP 2x2", "inputs/fsdp2.toml", ["mesh.dp_replicate=2", "mesh.dp_shard=2", 'dist_config.mixed_precision="fp32"']),
    ("fsdp2 shard 4", "inputs/fsdp2.toml", ["mesh.dp_shard=4", 'dist_config.mixed_precision="fp32"']),
    ("megatron tp2 pp2", "inputs/megatron.toml", ["mesh.tp=2", "mesh.pp=2", "gradient_accumulation_steps=2"]),
    ("ddp 8 ranks", "inputs/run.toml", []),
]


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=isinstance(cmd, str), env=ENV, check=True, text=True,
                          capture_output=True, **kw).stdout


def on_host(host, command, timeout=600):
    return sh([HOSTS, "exec", host, f"cd {shlex.quote(ROOT)} && {command}"], timeout=timeout)


def mpirun(hosts, np):
    return f"mpirun {sh([HOSTS, 'mpirun-args']).strip()} --bind-to none --host {hosts} -np {np}"


def link(hosts, np, build):
    return json.loads(on_host(H1, f"{mpirun(hosts, np)} {build}/lft_allreduce_sweep"))


def cluster_file(path, nodes, per_node, gemm_gflops, mfu, intra, inter=None):
    ranks = nodes * per_node
    cores = os.cpu_count() or 1
    inter_lines = "" if inter is None else (f"inter_node_gbps = {inter['busbw_gbps']:.4f}\n"
                                            f"inter_node_latency_us = {inter['latency_us']:.2f}\n")
    with open(path, "w") as f:
        f.write(f"""# Measured by tools/bench/plan_check.py on this machine: {nodes} namespace host(s) x {per_node} ranks on {cores} cores.
[cluster]
name = "namespace-hosts-{ranks}"
nodes = {nodes}
devices_per_node = {per_node}
device_memory_gib = 4
device_tflops = {gemm_gflops * min(1.0, cores / ranks) / 1000:.6f}   # fp32 GEMM of one thread x the share of a core each rank gets
mfu_ceiling = {mfu:.4f}           # a one-rank run's model FLOP/s over that GEMM rate
intra_node_gbps = {intra['busbw_gbps']:.4f}
intra_node_latency_us = {intra['latency_us']:.2f}
{inter_lines}backend = "mpi"
overlap_comm = false    # Open MPI here progresses only inside MPI calls: nothing overlaps (docs/performance.md)
""")


def measured_step(log_dir):
    rows = [json.loads(line) for line in open(os.path.join(log_dir, "trainer_log.jsonl")) if '"loss"' in line]
    tps = [r["tokens_per_s"] for r in rows if r["step"] > 2]
    return statistics.median(tps)


def predicted(build, cluster, config, overrides):
    out = sh([f"{build}/lftrain", "--plan", cluster, config, *overrides, "--this-layout"], cwd=ROOT)
    step = float(re.search(r"^step\s+([0-9.]+) s", out, re.M).group(1))
    tps = re.search(r"^speed\s+([0-9.]+)(k?) tokens/s", out, re.M)
    return step, float(tps.group(1)) * (1000 if tps.group(2) else 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rate", default="100mbit", help="the limited link's rate (tc)")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    if os.geteuid() != 0:
        sys.exit("plan_check: needs root (network namespaces)")
    sh([HOSTS, "down"])
    sh([HOSTS, "up", "2"])
    try:
        run(build, args.rate)
    finally:
        sh([HOSTS, "down"])


def run(build, rate):
    gemm = json.loads(sh([f"{build}/lft_gemm_rate", "1024"]))["fp32"]["1"]
    tmp = tempfile.mkdtemp(prefix="lft-plan-check-")
    # Compute efficiency: one rank, one thread, the ddp example's model.
    one = os.path.join(tmp, "one")
    sh(f"{build}/lftrain inputs/run.toml distributed=none intra_op_threads=1 max_steps={STEPS} "
       f"output_dir={one} {' '.join(COMMON)}", cwd=ROOT)
    one_tps = measured_step(one)
    tmp_cluster = os.path.join(tmp, "calibrate.toml")
    cluster_file(tmp_cluster, 1, 1, gemm, 1.0, {"busbw_gbps": 1, "latency_us": 1})
    _, ideal_tps = predicted(build, tmp_cluster, "inputs/run.toml", ["distributed=none"] + COMMON)
    mfu = one_tps / ideal_tps  # the one-rank run has a whole core, as the calibration cluster says
    print(f"GEMM fp32, 1 thread: {gemm:.1f} GFLOP/s; one rank trains at {one_tps:.0f} tokens/s = "
          f"{100 * mfu:.1f}% of it (the cluster files' mfu_ceiling)")
    print(f"{'link':10} {'layout':18} {'ranks':>5} {'predicted s':>11} {'measured s':>10} {'measured/predicted':>18}")
    ratios = []
    for shaped in (False, True):
        for h in (H1, H2):
            sh([HOSTS, "shape", h, *(["rate", rate] if shaped else ["off"])])
        links = {}
        # The hosts' link, one rank on each; a host's ranks share it, so each gets its share
        # (the cluster file's inter_node_gbps is per device).
        host_link = link(f"{H1}:1,{H2}:1", 2, build)
        for per_node in (2, 4):
            intra = link(f"{H1}:{per_node}", per_node, build)
            inter = dict(host_link, busbw_gbps=host_link["busbw_gbps"] / per_node)
            links[per_node] = os.path.join(tmp, f"cluster-{per_node}-{int(shaped)}.toml")
            cluster_file(links[per_node], 2, per_node, gemm, mfu, intra, inter)
            if per_node == 2:
                print(f"# {'rate ' + rate if shaped else 'link as is'}: in a host {intra['latency_us']:.1f} us, "
                      f"{intra['busbw_gbps']:.3f} GB/s; between the hosts {host_link['latency_us']:.1f} us, "
                      f"{host_link['busbw_gbps']:.4f} GB/s")
        for name, config, overrides in LAYOUTS:
            per_node = 4 if "8 ranks" in name else 2
            out = os.path.join(tmp, f"{name.replace(' ', '_')}-{int(shaped)}")
            argv = " ".join(shlex.quote(a) for a in [config, *overrides, *COMMON, f"max_steps={STEPS}", f"output_dir={out}"])
            on_host(H1, f"{mpirun(f'{H1}:{per_node},{H2}:{per_node}', 2 * per_node)} {build}/lftrain {argv}")
            tokens = measured_step(out)
            pred_step, pred_tps = predicted(build, links[per_node], config, overrides + COMMON)
            meas_step = pred_step * pred_tps / tokens  # same tokens per step
            ratios.append(meas_step / pred_step)
            print(f"{('rate ' + rate) if shaped else 'as is':10} {name:18} {2 * per_node:5} {pred_step:11.3f} "
                  f"{meas_step:10.3f} {meas_step / pred_step:18.2f}")
    print(f"measured/predicted: median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}")


if __name__ == "__main__":
    main()
