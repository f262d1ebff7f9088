#!/usr/bin/env python3
"""Checkpoint I/O of the benchmark model (`make bench` runs it after the training table):
save and load GB/s at 2 and 4 ranks, both checkpoint formats, next to this disk's sequential
write rate measured in the same run, the training time a save costs (save seconds / step
seconds), and with async_checkpoint the time training is blocked by a save (the copy of the state
to host memory) against the synchronous save."""
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def disk_write_rate(folder, mib=512):
    path = os.path.join(folder, "ddtest")
    start = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}", "conv=fsync"],
                   check=True, capture_output=True)
    seconds = time.perf_counter() - start
    os.unlink(path)
    return mib / 1024 / seconds


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
        disk = disk_write_rate(tmp)
        print(f"\ncheckpoints of the benchmark model (weights + AdamW state); disk sequential write "
              f"(dd, fsync) {disk:.2f} GB/s")
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
