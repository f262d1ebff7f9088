#!/usr/bin/env python3
"""Checkpoint I/O of the benchmark model (`make bench` runs it after the training table):
save and load GB/s at 2 and 4 ranks, both checkpoint formats, next to this disk's sequential
write rate measured in the same run, the training time a save costs (save seconds / step
seconds), and with async_checkpoint the time training is blocked by a save (the copy of the state
to host memory) against the synchronous save."""
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def _write_stream(path, nbytes, block):
    with open(path, "wb", buffering=0) as f:
        written = 0
        while written < nbytes:
            written += f.write(block[:min(len(block), nbytes - written)])
        os.fsync(f.fileno())


def disk_rate_gbps(folder, nbytes, streams):
    """GB/s (10^9 bytes) of `streams` processes each writing nbytes / streams of random bytes to a
    file of its own and fsyncing it: what a checkpoint of nbytes written that way can reach."""
    block = os.urandom(64 << 20)  # random: this virtual disk writes zeros far faster
    paths = [os.path.join(folder, f"disktest-{i}") for i in range(streams)]
    start = time.perf_counter()
    procs = [multiprocessing.Process(target=_write_stream, args=(p, nbytes // streams, block)) for p in paths]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    seconds = time.perf_counter() - start
    for p in paths:
        os.unlink(p)
    return nbytes / seconds / 1e9


def real_size_table(build, model, work, template, dataset, seq, saves=3):
    """Saves of a real-size model's state (weights and AdamW moments in fp32) by lftrain fsdp2 at 2
    ranks, both formats, a run saving every step between two measurements of the disk writing as
    many bytes (one file for the shared format, one per rank for per_rank): the steady save's rate
    (the last) over the mean of the two. The first save of a process is slower on this virtual
    machine (the page cache's fresh pages fault in at ~1 GB/s). Then async_checkpoint's blocked time."""
    base = [f"model_name_or_path={model}", f"template={template}", f"train_dataset={dataset}",
            f"cutoff_len={seq}", "packing=true", "per_device_train_batch_size=1", "gradient_accumulation_steps=1",
            "bf16=true", "gradient_checkpointing=true", "val_size=0", "logging_steps=1", "warmup_steps=0",
            "plot_loss=false", "distributed=fsdp2", "save_steps=1"]
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2", f"{build}/lftrain",
           os.path.join(ROOT, "inputs/sft_alpaca.toml")]

    def run(args):
        out = subprocess.run(cmd + base + args, cwd=ROOT, capture_output=True, text=True, env=ENV)
        if out.returncode != 0:
            sys.exit(f"checkpoint bench: {' '.join(cmd + base + args)} failed:\n{out.stdout}\n{out.stderr}")
        return out.stdout

    print(f"\ncheckpoints of {os.path.basename(model)} (fp32 weights + AdamW moments) saved by lftrain fsdp2 at 2 "
          f"ranks, one run of {saves} steps saving each step per format, between two measurements of the disk writing "
          f"as many bytes with fsync (this disk's rate varies several-fold from minute to minute: compare within a row)")
    print(f"{'format':9} {'GB':>6} {'save s':>16} {'save GB/s':>16} {'disk GB/s (streams)':>21} {'last save / disk':>17}")
    # The state is 12 bytes a parameter (fp32 weights, two fp32 moments); the bf16 model files 2.
    nbytes = 6 * sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model) if f.endswith(".safetensors"))
    for fmt, streams in (("shared", 1), ("per_rank", 2)):
        out_dir = os.path.join(work, f"ckpt-{fmt}")
        before = disk_rate_gbps(work, nbytes, streams)
        text = run([f"output_dir={out_dir}", f"max_steps={saves}", f"checkpoint_format={fmt}"])
        after = disk_rate_gbps(work, nbytes, streams)
        subprocess.run(["rm", "-rf", out_dir], check=True)
        found = re.findall(r"saved \S+checkpoint-\d+ in ([\d.]+) s: ([\d.]+) GB at ([\d.]+) GB/s", text)
        seconds, gb = [float(f[0]) for f in found], float(found[0][1])
        print(f"{fmt:9} {gb:6.2f} {'/'.join(f'{x:.1f}' for x in seconds):>16} "
              f"{'/'.join(f'{gb / x:.2f}' for x in seconds):>16} {before:8.2f}/{after:.2f} ({streams}) "
              f"{gb / seconds[-1] / ((before + after) / 2):16.0%}", flush=True)
    out_dir = os.path.join(work, "ckpt-async")
    text = run([f"output_dir={out_dir}", "max_steps=3", "checkpoint_format=per_rank", "async_checkpoint=true"])
    subprocess.run(["rm", "-rf", out_dir], check=True)
    blocked = [float(x) for x in re.findall(r"checkpoint of step \d+: training blocked ([\d.]+) s", text)]
    final = float(re.findall(r"saved \S+checkpoint-3 in ([\d.]+) s:", text)[0])
    print(f"async_checkpoint (per_rank): training blocked {blocked[0]:.2f} s by the first save (it allocates the "
          f"host copies), {blocked[1]:.2f} s by the next ({blocked[1] / final:.0%} of a synchronous save's "
          f"{final:.2f} s)")


def lftrain(build, ranks, args):
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks), f"{build}/lftrain",
           "inputs/bench.toml", "intra_op_threads=1", "logging_steps=1",
           f"per_device_train_batch_size={8 // ranks}", "distributed=ddp"] + args
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=ENV)
    if out.returncode != 0:
        sys.exit(f"checkpoint bench: {' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    return out.stdout


def size_of(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def main(build="build"):
    with tempfile.TemporaryDirectory(dir=os.path.join(ROOT, "build")) as tmp:
        disk = disk_rate_gbps(tmp, 512 << 20, 1) * 1e9 / 2**30
        print(f"\ncheckpoints of the benchmark model (weights + AdamW state); disk sequential write "
              f"(one file of random bytes, fsync) {disk:.2f} GiB/s")
        print(f"{'ranks':>5} {'format':9} {'size GB':>8} {'save s':>7} {'save GB/s':>9} {'load s':>7} "
              f"{'load GB/s':>9} {'save / step':>11} {'async blocked s':>15} {'blocked / save':>14}")
        for ranks in (2, 4):
            for fmt in ("shared", "per_rank"):
                out_dir = os.path.join(tmp, f"{fmt}-{ranks}")
                text = lftrain(build, ranks, [f"output_dir={out_dir}", "max_steps=2", "save_steps=1",
                                              f"checkpoint_format={fmt}"])
                save_s = float(re.findall(r"saved \S+checkpoint-1 in ([\d.]+) s", text)[0])
                step_s = [float(x) for x in re.findall(r"\| (\d+) tok/s", text)]
                step_seconds = 8 * 256 / step_s[-1]
                state = os.path.join(out_dir, "checkpoint-1", "state.h5" if fmt == "shared" else "state")
                gb = size_of(state) / 2**30
                text = lftrain(build, ranks, [f"output_dir={out_dir}-resume", "max_steps=2",
                                              "save_strategy=no",
                                              f"resume_from_checkpoint={out_dir}/checkpoint-1"])
                load_s = float(re.findall(r"loaded in ([\d.]+) s", text)[0])
                text = lftrain(build, ranks, [f"output_dir={out_dir}-async", "max_steps=2", "save_steps=1",
                                              f"checkpoint_format={fmt}", "async_checkpoint=true"])
                blocked_s = float(re.findall(r"checkpoint of step 1: training blocked ([\d.]+) s", text)[0])
                print(f"{ranks:5d} {fmt:9} {gb:8.2f} {save_s:7.2f} {gb / save_s:9.2f} {load_s:7.2f} "
                      f"{gb / load_s:9.2f} {save_s / step_seconds:10.0%} {blocked_s:15.3f} "
                      f"{blocked_s / save_s:13.1%}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:2])
