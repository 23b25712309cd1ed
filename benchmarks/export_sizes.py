"""Export time, file sizes and |export - eager| for every built-in experiment.

Each experiment (its registered config; only the schedule is cut to 20 steps) is trained
from scratch in a temporary model_dir, then exported with ``export_model`` (all three
formats, the verification included in the time). The exported program and the ONNX
graph are run on 8 new inputs and compared with the eager serving module, output by
output. Not a test: timings on a shared machine are noisy.

Usage:
    .venv/bin/python benchmarks/export_sizes.py [--experiments toy_regression,retinanet]
        [--retinanet-score-threshold 0.0]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch
from safetensors.torch import load_file

import torchgarden as tg
from torchgarden.export import export_model
from torchgarden.export.verify import flatten_outputs, max_abs_difference, run_onnx, run_pt2

EXPERIMENTS = ("toy_regression", "image_classification", "semantic_segmentation", "retinanet")
SCHEDULE = {"train_steps": 20, "steps_per_loop": 10, "summary_interval": 10,
            "checkpoint_interval": 20, "validation_interval": 20, "progress_bar": False}


def _inputs(example: tuple[torch.Tensor, ...], batch: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(123)
    return tuple(torch.randint(0, 256, (batch, *x.shape[1:]), generator=generator,
                               dtype=x.dtype) if x.dtype == torch.uint8
                 else torch.randn(batch, *x.shape[1:], generator=generator) for x in example)


def measure(name: str, root: str, overrides: dict) -> dict:
    params = tg.get_experiment(name)
    params.override({"trainer": SCHEDULE, **overrides})
    params.validate()
    model_dir = os.path.join(root, name)
    started = time.perf_counter()
    tg.run_experiment(task=tg.get_task(params.task), mode="train_and_eval", params=params,
                      model_dir=model_dir)
    train_seconds = time.perf_counter() - started
    started = time.perf_counter()
    result = export_model(model_dir)
    export_seconds = time.perf_counter() - started
    task = tg.get_task(params.task)
    model = task.build_model()
    model.load_state_dict(load_file(os.path.join(result.output_dir, "model.safetensors")))
    serving = task.build_serving_module(model.eval())
    inputs = _inputs(serving.example_inputs, 8)
    with torch.no_grad():
        eager = flatten_outputs(serving.module(*inputs), serving.output_names)
    names = tuple(eager)
    pt2 = run_pt2(os.path.join(result.output_dir, "model.pt2"), inputs, names)
    onnx = run_onnx(os.path.join(result.output_dir, "model.onnx"), inputs, serving)
    sizes = {k: v["bytes"] for k, v in result.manifest["files"].items()}
    return {
        "train_s": train_seconds, "export_s": export_seconds, "sizes": sizes,
        "pt2": {k: max_abs_difference({k: eager[k]}, pt2) for k in names},
        "onnx": {k: max_abs_difference({k: eager[k]}, onnx) for k in names},
        "detections": eager["num_detections"].tolist() if "num_detections" in eager else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", default=",".join(EXPERIMENTS))
    parser.add_argument("--retinanet-score-threshold", type=float, default=None,
                        help="override task.model.score_threshold (default: the config's)")
    args = parser.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    print(f"torch {torch.__version__}, load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as root:
        for name in args.experiments.split(","):
            overrides = {}
            if name == "retinanet" and args.retinanet_score_threshold is not None:
                overrides = {"task": {"model": {
                    "score_threshold": args.retinanet_score_threshold}}}
            row = measure(name, root, overrides)
            sizes = ", ".join(f"{k} {v / 1024:.1f} KiB" for k, v in sorted(row["sizes"].items()))
            print(f"\n{name}: trained 20 steps in {row['train_s']:.1f} s, exported in "
                  f"{row['export_s']:.1f} s\n  files: {sizes}")
            for kind in ("pt2", "onnx"):
                print(f"  max |{kind} - eager| by output: "
                      + ", ".join(f"{k} {v:.3g}" for k, v in row[kind].items()))
            if row["detections"] is not None:
                print(f"  detections per image (eager): {row['detections']}")


if __name__ == "__main__":
    main()
