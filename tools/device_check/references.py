"""The CPU reference losses the engine check compares with, made on this machine before the
device call (tools/device-check --make-references, run by tools/device-kit --references) and
carried in the kit as references.json: for each reference run its ranks, its overrides (the
config, placement left out), the loss of every step; and the mode, commit and digests of the
inputs they were made from. A reference made from other settings is not used."""
import datetime
import hashlib
import json
import os
import subprocess

from device_check.runs import ROOT, replace

FILE = "references.json"
# What the engine runs read besides their overrides (the ZeRO-1 config is made from ds_z2's).
INPUTS = ("inputs/run.toml", "inputs/data/arithmetic.txt", "inputs/ds_z2_config.json", "inputs/ds_z3_config.json",
          "inputs/device_check_moe.toml", "inputs/tiny_qwen3_moe.toml", "inputs/models/qwen3-moe-tiny/config.json")


def inputs_digest():
    out = {}
    for path in INPUTS:
        with open(os.path.join(ROOT, path), "rb") as f:
            out[path] = hashlib.sha256(f.read()).hexdigest()[:16]
    return out


def commit():
    p = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=ROOT)
    return p.stdout.strip() if p.returncode == 0 else "an unknown commit"


def write(path, mode, references):
    """REFERENCES: {name: {"ranks", "overrides", "losses": {step: loss}, "device"}}."""
    data = {"mode": mode, "commit": commit(), "host": os.uname().nodename,
            "made": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%MZ}",
            "inputs": inputs_digest(), "references": references}
    replace(path, json.dumps(data, indent=1).encode())


class Reference:
    def __init__(self, name, losses):
        self.name, self.losses = name, {int(k): v for k, v in losses.items()}


def load(path, mode, plan):
    """({name: Reference} of PLAN's runs ({name: (ranks, overrides)}) that PATH holds as planned,
    [why the others are missing], a line on where they come from)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}, [f"{path} does not exist"], None
    except (OSError, ValueError) as e:
        return {}, [f"{path} is unreadable: {e}"], None
    origin = f"references: {path}, {data.get('mode')} mode, made on {data.get('host')} at {data.get('made')} from {data.get('commit')}"
    if data.get("mode") != mode:
        return {}, [f"made for the {data.get('mode')} mode's rows, not the {mode} mode's"], origin
    changed = [p for p, d in inputs_digest().items() if data.get("inputs", {}).get(p) != d]
    if changed:
        return {}, [f"made from other inputs ({', '.join(changed)} differ)"], origin
    found, problems, stored = {}, [], data.get("references", {})
    for name, (ranks, overrides) in plan.items():
        ref = stored.get(name)
        if ref is None:
            problems.append(f"{name} is missing")
        elif ref.get("ranks") != ranks or ref.get("overrides") != overrides:
            was = set(ref.get("overrides", []))
            diff = [f"{ref.get('ranks')} ranks where now {ranks}"] if ref.get("ranks") != ranks else []
            if was != set(overrides):
                diff.append(f"{' '.join(sorted(was - set(overrides))) or '-'} where now "
                            f"{' '.join(sorted(set(overrides) - was)) or '-'}")
            problems.append(f"{name} was made with other settings ({'; '.join(diff) or 'another order'})")
        else:
            found[name] = Reference(name, ref["losses"])
    return found, problems, origin
