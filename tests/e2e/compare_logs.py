#!/usr/bin/env python3
"""compare_logs.py A.jsonl B.jsonl FIRST LAST RTOL [FIELD]: the losses (or FIELD, e.g. logps/chosen)
of steps FIRST..LAST in two trainer logs agree within RTOL (relative; absolute where A's is 0)."""
import json
import sys

a_path, b_path, first, last, rtol = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
field = sys.argv[6] if len(sys.argv) > 6 else "loss"
a = {r["step"]: r[field] for r in map(json.loads, open(a_path)) if field in r}  # eval records have eval_loss
b = {r["step"]: r[field] for r in map(json.loads, open(b_path)) if field in r}
worst = 0.0
for step in range(first, last + 1):
    if step not in a or step not in b:
        sys.exit(f"compare_logs: step {step} missing ({'A' if step not in a else 'B'})")
    rel = abs(a[step] - b[step]) / (abs(a[step]) if a[step] != 0 else 1.0)
    worst = max(worst, rel)
    if rel > rtol:
        sys.exit(f"compare_logs: step {step}: {a[step]} vs {b[step]} (relative {rel:.2e} > {rtol})")
print(f"compare_logs: {field} of steps {first}-{last} agree, worst relative difference {worst:.2e}")
