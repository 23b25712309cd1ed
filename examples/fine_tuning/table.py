"""Prints the comparison table of docs/fine_tuning.md from the runs' own files.

``python examples/fine_tuning/table.py MODEL_DIR...``: for each run, the last
validation accuracy and the median train steps/s (``metrics.jsonl``), the parameters
that trained (the elements of the optimizer state's ``exp_avg`` in the last checkpoint:
Adam keeps one per trained parameter) and the size of that checkpoint's ``state.pt``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

import torch


def row(model_dir: str) -> str:
    with open(os.path.join(model_dir, "metrics.jsonl"), encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    accuracy = [m["accuracy"] for m in lines if m["split"] == "validation"][-1]
    speed = statistics.median(m["steps_per_second"] for m in lines if m["split"] == "train")
    last = max((n for n in os.listdir(model_dir) if n.startswith("ckpt-")),
               key=lambda n: int(n.split("-")[1]))
    path = os.path.join(model_dir, last, "state.pt")
    state = torch.load(path, map_location="cpu", weights_only=True)
    trained = sum(s["exp_avg"].numel() for s in state["optimizer"]["state"].values())
    size = os.path.getsize(path) / 1024
    return (f"| {os.path.basename(model_dir)} | {accuracy:.3f} | {trained:,} | {size:.0f} KiB "
            f"| {speed:.0f} |")


print("| run | accuracy | trained parameters | checkpoint | steps/s |")
print("| --- | --- | --- | --- | --- |")
for directory in sys.argv[1:]:
    print(row(directory))
