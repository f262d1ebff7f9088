#!/usr/bin/env python3
"""compare_v1_logs.py CASE V1.jsonl LFTRAIN.jsonl [RTOL]: the per-step losses of LlamaFactory v1's
trainer_log.jsonl (records {"step", "loss", ...}) and lftrain's (records {"current_steps",
"loss", ...}) agree within RTOL (relative to v1's, default 1e-6) at every step v1 logged. Prints
a table; on a difference or a missing step, exits 1 naming CASE and the step."""
import json
import sys


def losses(path, step_keys):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if "loss" not in r:  # eval records have eval_loss
            continue
        step = next(r[k] for k in step_keys if k in r)
        out[int(step)] = float(r["loss"])
    return out


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    case, v1_path, lft_path = sys.argv[1:4]
    rtol = float(sys.argv[4]) if len(sys.argv) == 5 else 1e-6
    v1 = losses(v1_path, ("step",))
    lft = losses(lft_path, ("current_steps", "step"))
    if not v1:
        print(f"compare_v1_logs: {case}: FAIL: {v1_path} has no losses")
        sys.exit(1)
    print(f"{case}: {'step':>4}  {'v1 loss':>20}  {'lftrain loss':>20}  {'rel diff':>9}")
    bad = []
    for step in sorted(v1):
        if step not in lft:
            print(f"{case}: {step:>4}  {v1[step]:>20.12g}  {'missing':>20}")
            bad.append(f"step {step} missing from lftrain's log")
            continue
        rel = abs(lft[step] - v1[step]) / abs(v1[step])
        flag = "" if rel <= rtol else "  > rtol"
        print(f"{case}: {step:>4}  {v1[step]:>20.12g}  {lft[step]:>20.12g}  {rel:>9.2e}{flag}")
        if rel > rtol:
            bad.append(f"step {step}: v1 {v1[step]!r} vs lftrain {lft[step]!r} "
                       f"(relative {rel:.2e} > {rtol:g})")
    if bad:
        print(f"compare_v1_logs: {case}: FAIL: " + "; ".join(bad))
        sys.exit(1)
    print(f"compare_v1_logs: {case}: steps {min(v1)}-{max(v1)} agree within {rtol:g}")


if __name__ == "__main__":
    main()
