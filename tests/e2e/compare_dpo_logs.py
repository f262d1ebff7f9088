#!/usr/bin/env python3
"""compare_dpo_logs.py [--judge KEY,KEY] CASE LF_STEPS.jsonl LFTRAIN.jsonl [RTOL]: lftrain's DPO
(or reward model) log agrees with LlamaFactory's classic trainer step by step.

LF_STEPS.jsonl is tools/lf-reference's lf-steps.jsonl (records {"step", "loss", "rewards/...",
"logps/...", ...}); LFTRAIN.jsonl is lftrain's trainer_log.jsonl (records {"current_steps",
"loss", ...}). At every step LlamaFactory logged: loss, logps/chosen and logps/rejected within RTOL
relative to LlamaFactory's (default 1e-5), rewards/accuracies equal (|difference| < 1e-6); the
other rewards/* keys must be present in lftrain's record and are shown, not judged (near 0 at the
first steps, where a relative difference says little). Prints a table per step and one summary line
"CASE: max rel diff loss X logps/chosen Y logps/rejected Z accuracies W". Exits 1 naming CASE and
the step on a difference or a missing step or key. --judge KEY,KEY judges those keys within RTOL
instead, and only them (a reward model: loss,grad_norm, all LlamaFactory logs of it)."""
import json
import os
import sys

JUDGED = ("loss", "logps/chosen", "logps/rejected")
SHOWN = ("rewards/chosen", "rewards/rejected", "rewards/margins")
ACC = "rewards/accuracies"
ACC_TOL = 1e-6


def records(path, step_keys):
    out = {}
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        if "loss" not in r:  # eval records have eval_loss
            continue
        out[int(next(r[k] for k in step_keys if k in r))] = r
    return out


def main():
    args = sys.argv[1:]
    judged, keys = JUDGED, (*JUDGED, ACC, *SHOWN)
    if args[:1] == ["--judge"] and len(args) > 1:
        judged = keys = tuple(args[1].split(","))
        args = args[2:]
    if len(args) not in (3, 4):
        sys.exit(__doc__)
    case, lf_path, lft_path = args[:3]
    rtol = float(args[3]) if len(args) == 4 else 1e-5
    for path in (lf_path, lft_path):
        if not os.path.isfile(path):
            print(f"compare_dpo_logs: {case}: FAIL: no {path}")
            sys.exit(1)
    lf = records(lf_path, ("step",))
    lft = records(lft_path, ("current_steps", "step"))
    if not lf:
        print(f"compare_dpo_logs: {case}: FAIL: {lf_path} has no losses")
        sys.exit(1)
    bad = []
    worst = {k: 0.0 for k in (*judged, ACC)}
    print(f"{case}: {'step':>4} {'key':<18} {'LlamaFactory':>16} {'lftrain':>16} {'diff':>9}")
    for step in sorted(lf):
        a = lf[step]
        b = lft.get(step)
        if b is None:
            print(f"{case}: {step:>4} missing from lftrain's log")
            bad.append(f"step {step} missing from lftrain's log")
            continue
        for key in keys:
            if key not in a:
                if key != "loss":
                    bad.append(f"step {step}: LlamaFactory's record has no {key} (not a DPO run?)")
                continue
            if key not in b:
                print(f"{case}: {step:>4} {key:<18} {a[key]:>16.9g} {'missing':>16}")
                bad.append(f"step {step}: lftrain's record has no {key}")
                continue
            x, y = float(a[key]), float(b[key])
            if key == ACC:
                diff, ok, kind = abs(y - x), abs(y - x) < ACC_TOL, "abs"
            elif key in judged:
                diff = abs(y - x) / abs(x) if x != 0 else abs(y - x)
                ok, kind = diff <= rtol, "rel"
            else:
                diff, ok, kind = abs(y - x), True, "abs"
            if key in worst:
                worst[key] = max(worst[key], diff)
            flag = "" if ok else "  > tol"
            print(f"{case}: {step:>4} {key:<18} {x:>16.9g} {y:>16.9g} {diff:>9.2e} {kind}{flag}")
            if not ok:
                bad.append(f"step {step}: {key} LlamaFactory {x!r} vs lftrain {y!r} ({kind} {diff:.2e})")
    if judged == JUDGED:
        print(f"{case}: max rel diff loss {worst['loss']:.2e} logps/chosen {worst['logps/chosen']:.2e} "
              f"logps/rejected {worst['logps/rejected']:.2e} accuracies(abs) {worst[ACC]:.2e}")
    else:
        print(f"{case}: max rel diff " + " ".join(f"{k} {worst[k]:.2e}" for k in judged))
    if bad:
        print(f"compare_dpo_logs: {case}: FAIL: " + "; ".join(bad))
        sys.exit(1)
    print(f"compare_dpo_logs: {case}: steps {min(lf)}-{max(lf)} agree (rtol {rtol:g}" +
          (f", accuracies within {ACC_TOL:g})" if judged == JUDGED else ")"))


if __name__ == "__main__":
    main()
