"""device-check's machinery: the report and what comes back of it, lftrain and gtest runs under a
budget and their own timeouts, the kit's binaries, and the training runs' logs (tools/device-check)."""
import concurrent.futures
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIN_RUN_SECONDS = 15  # a run with less of the budget left is skipped
BUDGET = "(budget)"  # a skip reason starting so is reported "SKIPPED (budget)", never FAIL
LOG_CAP = 2 << 20  # logs.tar.gz keeps at most the last 2 MiB of each file
TAIL_LINES = 25


# ---------------------------------------------------------------------------------------------
# The report


class Section:
    def __init__(self, report, key, title):
        self.report, self.key, self.title, self.checks, self.notes = report, key, title, [], []

    def add(self, status, name, detail):
        budget = status == "SKIPPED" and detail.startswith(BUDGET)
        check = {"status": status, "name": name, "detail": detail[len(BUDGET):].strip() if budget else detail}
        if budget:
            check["budget"] = True
        self.report.record(lambda: self.checks.append(check), f"[{self.key}] {line(check)}")

    def note(self, text):
        self.report.record(lambda: self.notes.append(text), f"[{self.key}] {text}")


def line(check):
    status = check["status"] + (f" {BUDGET}" if check.get("budget") else "")
    return f"{status:<7} {check['name']}: {check['detail']}"


class Report:
    """Checks by section, printed as they finish (with their section's key: checks run together).
    After each, OUT holds only report.txt,
    report.json and logs.tar.gz (WORK's logs/, runs/*/trainer_log.jsonl and the configs written
    there), each replaced whole, so that a run cut short still leaves what it found."""

    def __init__(self, out, work, header):
        self.out, self.work, self.header, self.lock = out, work, header, threading.Lock()
        self.sections, self.preflight_failed = {}, None
        print("\n".join(header), flush=True)

    def section(self, key, title):
        """The section KEY (sections are written in the order of their keys), made once."""
        with self.lock:
            if key not in self.sections:
                self.sections[key] = Section(self, key, title)
                print(f"\n== {title}", flush=True)
            return self.sections[key]

    def record(self, change, text):
        with self.lock:
            change()
            print(text, flush=True)
            self.write_locked()

    def fail_preflight(self, name, problem, log):
        with self.lock:
            self.preflight_failed = {"check": name, "problem": problem, "log": log_name(self.work, log),
                                     "tail": tail(log)}
            self.write_locked()

    def ordered(self):
        return [self.sections[k] for k in sorted(self.sections)]

    def counts(self):
        statuses = [c["status"] for s in self.ordered() for c in s.checks]
        return {s: statuses.count(s) for s in ("PASS", "FAIL", "SKIPPED")}

    def text(self):
        lines = list(self.header)
        p = self.preflight_failed
        if p:
            lines += ["", f"PREFLIGHT FAILED: {p['check']}: {p['problem']}",
                      "nothing else was run; the last lines of " + p["log"] + " (in logs.tar.gz):"]
            lines += ["  | " + l for l in p["tail"]]
        for s in self.ordered():
            lines += ["", f"== {s.title}"] + [line(c) for c in s.checks] + s.notes
        n = self.counts()
        lines += ["", f"summary: {n['PASS']} PASS, {n['FAIL']} FAIL, {n['SKIPPED']} SKIPPED"
                  + ("; PREFLIGHT FAILED" if p else "")]
        return "\n".join(lines) + "\n"

    def write(self):
        with self.lock:
            self.write_locked()

    def write_locked(self):
        data = {"header": self.header, "counts": self.counts(), "preflight_failed": self.preflight_failed,
                "sections": [{"title": s.title, "checks": s.checks, "notes": s.notes} for s in self.ordered()]}
        replace(os.path.join(self.out, "report.txt"), self.text().encode())
        replace(os.path.join(self.out, "report.json"), json.dumps(data, indent=1).encode())
        replace(os.path.join(self.out, "logs.tar.gz"), logs_archive(self.work))


def replace(path, data):
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def logs_archive(work):
    """WORK's logs, trainer logs and configs as a .tar.gz (bytes); files still being written are
    read as they are now, at most the last LOG_CAP bytes of each."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for path in archived_files(work):
            try:
                with open(path, "rb") as f:
                    f.seek(max(0, os.fstat(f.fileno()).st_size - LOG_CAP))
                    data = f.read(LOG_CAP)
            except OSError:
                continue
            info = tarfile.TarInfo(os.path.relpath(path, work))
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def archived_files(work):
    found = []
    for top, dirs, files in os.walk(work):
        dirs.sort()
        rel = os.path.relpath(top, work)
        for name in sorted(files):
            if rel == "." or rel.startswith("logs") or name == "trainer_log.jsonl":
                found.append(os.path.join(top, name))
    return found


def log_name(work, log):
    return os.path.relpath(log, work) if log else "(no log)"


def tail(path, n=TAIL_LINES):
    try:
        with open(path, errors="replace") as f:
            return [l.rstrip("\n")[:300] for l in f.readlines()[-n:]]
    except (OSError, TypeError):
        return []


# ---------------------------------------------------------------------------------------------
# Running things


class Budget:
    def __init__(self, seconds, what):
        self.deadline, self.what = time.monotonic() + seconds, what

    def left(self):
        return self.deadline - time.monotonic()

    def timeout(self, wanted):
        """The timeout a run starting now gets, or None when too little time is left."""
        left = self.left()
        return min(wanted, left) if left >= MIN_RUN_SECONDS else None


class Proc:
    def __init__(self, rc=None, text="", seconds=0.0, timed_out=False, skipped=None, log=None):
        self.rc, self.text, self.seconds, self.timed_out = rc, text, seconds, timed_out
        self.skipped, self.log = skipped, log

    def skip(self):
        """Why the run was skipped (and its log, if it started); None when it was not."""
        if self.skipped and self.log:
            return f"{self.skipped} (log: {os.path.relpath(self.log, os.path.dirname(os.path.dirname(self.log)))})"
        return self.skipped

    def problem(self):
        """Why the run failed, in one line; None when it succeeded."""
        if self.skipped:
            return self.skipped
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s"
        if self.rc == 0:
            return None
        return f"exit status {self.rc}: {last_error(self.text)}"


def last_error(text):
    """The most telling line of a failed run's output: lftrain's own message, else an error."""
    lines = [l.strip() for l in text.splitlines()[1:] if l.strip()]  # [0] is the command line
    for pattern in (r"lftrain: ", r"what\(\)", r"error", r"not found|FAILED|refused|Killed|signal"):
        found = [l for l in lines if re.search(pattern, l, re.I)]
        if found:
            return found[0][:300]
    return lines[-1][:300] if lines else "no output"


def run(argv, env, log, timeout, budget, own_budget=False):
    """Runs argv with its own process group (so that a timeout ends mpirun and every rank), the
    output in LOG. A run the budget cuts short (or, with OWN_BUDGET, any that times out: its
    timeout is its budget) is a skip, not a failure."""
    if STOPPING.is_set():
        return Proc(skipped=STOPPED)
    limit = budget.timeout(timeout)
    if limit is None:
        return Proc(skipped=f"{BUDGET} not started: the time budget ({budget.what}) is spent")
    os.makedirs(os.path.dirname(log), exist_ok=True)
    start = time.monotonic()
    with open(log, "w") as f:
        f.write("$ " + " ".join(argv) + "\n")
        f.flush()
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                             start_new_session=True)
        RUNNING.add(p)
        timed_out = False
        try:
            p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            stop_group(p)
        finally:
            RUNNING.discard(p)
    with open(log, errors="replace") as f:
        text = f.read()
    seconds = time.monotonic() - start
    skipped = None
    if STOPPING.is_set() and p.returncode != 0:
        skipped = STOPPED
    elif timed_out and (own_budget or limit < timeout):
        skipped = f"{BUDGET} cut after {seconds:.0f} s by the time budget ({budget.what})"
    return Proc(p.returncode, text, seconds, timed_out, skipped, log)


RUNNING = set()  # the process groups to end when device-check itself is stopped
STOPPING = threading.Event()  # no run starts after device-check was stopped
STOPPED = "device-check was stopped by a signal"


def stop_running(signum, frame):
    STOPPING.set()
    for p in list(RUNNING):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    sys.exit(f"device-check: stopped by signal {signum}; the report so far is in report.txt")


def stop_group(p):
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            pass


class Tools:
    """Where the binaries are and the environments they run in: the kit's (env.sh) or this
    checkout's build/ with the environment as it is."""

    def __init__(self, kit):
        self.kit, self.notes = kit, []
        if kit:
            self.env = self.kit_environment(kit)
            bins = tests = os.path.join(kit, "bin")
            # The machine's Python must not load the kit's copies of system libraries.
            self.peer_env = dict(self.env)
            base = self.env.get("LFT_KIT_BASE_LD_LIBRARY_PATH", "")
            if base:
                self.peer_env["LD_LIBRARY_PATH"] = base
            else:
                self.peer_env.pop("LD_LIBRARY_PATH", None)
        else:
            self.env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            self.peer_env = self.env
            bins, tests = os.path.join(ROOT, "build"), os.path.join(ROOT, "build", "tests")
        self.lftrain = os.path.join(bins, "lftrain")
        self.gemm_rate = os.path.join(bins, "lft_gemm_rate")
        self.mpi_tests = os.path.join(tests, "lft_mpi_tests")
        self.mpirun = shutil.which("mpirun", path=self.env.get("PATH", ""))
        missing = [b for b in (self.lftrain, self.mpi_tests, self.mpirun) if not b or not os.access(b, os.X_OK)]
        if missing:
            sys.exit(f"device-check: not found: {', '.join(str(m) for m in missing)}")

    def kit_environment(self, kit):
        if not os.path.exists(os.path.join(kit, "env.sh")):
            sys.exit(f"device-check: {kit} has no env.sh: make it with tools/device-kit")
        p = subprocess.run(["bash", "-c", 'source "$1/env.sh" >&2 && env -0', "_", kit],
                           capture_output=True, text=True, cwd=ROOT)
        if p.returncode != 0:
            sys.exit(f"device-check: sourcing {kit}/env.sh failed:\n{p.stderr}")
        self.notes += [f"env.sh: {l}" for l in p.stderr.splitlines() if l.strip()]
        return dict(item.split("=", 1) for item in p.stdout.split("\0") if "=" in item)

    def mpirun_argv(self, ranks):
        return [self.mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(ranks)]

    def peer_python(self, want_cuda):
        """(python, torch version) of the first Python here that imports torch (with CUDA when
        wanted), or (None, why not)."""
        why = "no Python with torch (python3, .venv/bin/python)"
        for py in dict.fromkeys([sys.executable, shutil.which("python3") or "", os.path.join(ROOT, ".venv/bin/python")]):
            if not py or not os.access(py, os.X_OK):
                continue
            p = subprocess.run([py, "-c", "import torch; print(torch.__version__, torch.cuda.is_available())"],
                               capture_output=True, text=True, env=self.peer_env)
            if p.returncode != 0:
                continue
            version, cuda = p.stdout.split()[-2:]
            if want_cuda and cuda != "True":
                why = f"{py}: torch {version} sees no CUDA device"
                continue
            return py, version
        return None, why


class DeviceMemory:
    """The peak of nvidia-smi's memory.used while a run lasts, less the idle value (MiB): the
    whole process, CUDA context included."""

    def __init__(self, enabled):
        self.enabled = enabled and shutil.which("nvidia-smi") is not None
        self.peak = None

    @staticmethod
    def used():
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10).stdout
            return int(out.split()[0])
        except (subprocess.SubprocessError, ValueError, IndexError, OSError):
            return None

    def __enter__(self):
        if self.enabled:
            self.idle, self.samples, self.stop = self.used() or 0, [], threading.Event()
            self.thread = threading.Thread(target=self.sample, daemon=True)
            self.thread.start()
        return self

    def sample(self):
        while not self.stop.wait(0.25):
            value = self.used()
            if value is not None:
                self.samples.append(value)

    def __exit__(self, *exc):
        if self.enabled:
            self.stop.set()
            self.thread.join()
            self.peak = max(self.samples) - self.idle if self.samples else None


# ---------------------------------------------------------------------------------------------
# lftrain runs


class Train:
    """One lftrain job: its process, logged losses by step, the device rank 0 reported."""

    def __init__(self, name, proc, output_dir):
        self.name, self.proc = name, proc
        self.records = read_log(os.path.join(output_dir, "trainer_log.jsonl"))
        self.losses = {r["current_steps"]: r["loss"] for r in self.records if "loss" in r}
        m = re.search(r"^\s*device\s+(.*)$", proc.text, re.M)
        self.device = m.group(1).strip() if m else "?"

    def problem(self, steps=None, on_gpu=None):
        p = self.proc.problem()
        if p:
            return p
        if on_gpu is not None and self.device.startswith("cuda") != on_gpu:
            return f"ran on {self.device}, not on the {'GPU' if on_gpu else 'CPU'}"
        if steps is not None:
            missing = [s for s in range(1, steps + 1) if s not in self.losses]
            if missing:
                return f"steps {missing[:5]} missing from trainer_log.jsonl"
        return None


def read_log(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


class Runner:
    """Runs lftrain jobs (and other calls) ARGS.jobs at a time, their logs and output under
    ARGS.work; each run gets the time BUDGET leaves it."""

    def __init__(self, args, tools, budget):
        self.args, self.tools, self.budget = args, tools, budget
        self.pool = concurrent.futures.ThreadPoolExecutor(args.jobs)

    def call(self, fn, *a):
        return self.pool.submit(fn, *a)

    def submit(self, name, ranks, config, overrides, on_gpu, timeout=None, flags=()):
        return self.pool.submit(self.train, name, ranks, config, overrides, timeout or self.args.run_timeout, flags)

    def train(self, name, ranks, config, overrides, timeout, flags):
        output_dir = os.path.join(self.args.work, "runs", name)
        shutil.rmtree(output_dir, ignore_errors=True)
        argv = self.tools.mpirun_argv(ranks) + [self.tools.lftrain, *flags, config, *overrides,
                                                f"output_dir={output_dir}"]
        proc = run(argv, self.tools.env, self.log(name), timeout, self.budget)
        return Train(name, proc, output_dir)

    def log(self, name):
        return os.path.join(self.args.work, "logs", name + ".log")

    def close(self):
        self.pool.shutdown(wait=False, cancel_futures=True)


def common_overrides(steps, accumulation=True):
    """The runs' common overrides (ACCUMULATION: with 2 micro-steps a step; else the caller's)."""
    # lftrain's own timeouts end a hung collective before ours kills the job, with its report.
    return [f"max_steps={steps}", "logging_steps=1", "warmup_steps=2", "save_strategy=no", "comm_timeout=60",
            "setup_timeout=90"] + (["gradient_accumulation_steps=2"] if accumulation else [])


def placement(args, ranks, on_gpu):
    """use_cpu or ranks_per_gpu, and the threads of each rank, for a run on the GPU (all ranks
    sharing it) or on the CPU (the cores shared by the ranks of ARGS.jobs runs)."""
    threads = args.threads or max(1, (os.cpu_count() or 1) // (ranks * args.jobs))
    out = [f"intra_op_threads={threads}"]
    if not on_gpu:
        out.append("use_cpu=true")
    elif ranks > 1:
        out.append(f"ranks_per_gpu={ranks}")
    return out


def data_parallel(label, ranks):
    """The data-parallel ranks of an engine row (megatron's tp or pp and cp2 rows: none but one)."""
    return 1 if label.startswith("megatron") or label.endswith("cp2") else ranks


def micro_batch(label, ranks):
    """Sequences per rank per micro-step so that every row trains 8 sequences a step."""
    return f"per_device_train_batch_size={4 // data_parallel(label, ranks)}"


def max_diff(a, b, steps):
    diffs = [(abs(a.losses[s] - b.losses[s]), s) for s in range(1, steps + 1)]
    return max(diffs)
