#!/usr/bin/env python3
"""compare_logs.py A.jsonl B.jsonl FIRST LAST RTOL: the losses of steps FIRST..LAST in two
trainer logs agree within RTOL (relative)."""
import json
import sys

a_path, b_path, first, last, rtol = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
a = {r["step"]: r["loss"] for r in map(json.loads, open(a_path)) if "loss" in r}  # eval records have eval_loss
b = {r["step"]: r["loss"] for r in map(json.loads, open(b_path)) if "loss" in r}
worst = 0.0
for step in range(first, last + 1):
    if step not in a or step not in b:
        sys.exit(f"compare_logs: step {step} missing ({'A' if step not in a else 'B'})")
    rel = abs(a[step] - b[step]) / abs(a[step])
    worst = max(worst, rel)
    if rel > rtol:
        sys.exit(f"compare_logs: step {step}: {a[step]} vs {b[step]} (relative {rel:.2e} > {rtol})")
print(f"compare_logs: steps {first}-{last} agree, worst relative difference {worst:.2e}")
