#!/usr/bin/env python3
"""loss_falls.py TRAINER_LOG.jsonl: passes when the mean loss of the last 5 logged records is
below 0.8 x the mean of the first 5 (and there are at least 10 records)."""
import json
import sys

records = [r for r in map(json.loads, open(sys.argv[1])) if "loss" in r]  # not eval records
losses = [r["loss"] for r in records]
if len(losses) < 10:
    sys.exit(f"loss_falls: only {len(losses)} records in {sys.argv[1]}, need 10")
first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
print(f"loss_falls: first 5 mean {first:.4f}, last 5 mean {last:.4f}, ratio {last / first:.3f}")
for key in ("current_steps", "total_steps", "loss", "lr", "epoch", "percentage", "elapsed_time",
            "remaining_time", "step", "grad_norm", "tokens_per_s"):
    if key not in records[-1]:
        sys.exit(f"loss_falls: record lacks LlamaFactory field '{key}'")
sys.exit(0 if last < 0.8 * first else "loss_falls: the loss did not fall enough")
