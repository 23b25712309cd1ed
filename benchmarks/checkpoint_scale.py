"""Saving and resuming an FSDP2 model: full state on rank 0 (``single``) versus DCP.

Runs under torchrun (gloo on CPU, or NCCL with ``--device cuda``). The model (a stack of
square ``Linear`` layers, ~400 MB of float32 weights by default) is built on the
``meta`` device and sharded before its memory is allocated, so each rank holds only its
shard, as a model too big for one host would. Each format is saved ``--repeats`` times
(synchronously, into a fresh directory) and resumed once, through torchgarden's
``CheckpointManager``; rank 0's resident memory is sampled every 2 ms from
``/proc/self/statm``. Measure one format per launch: memory a save has freed stays in
the process (allocator caches), so a second format measured after it would look free.

Usage:
    for format in single dcp; do
      OMP_NUM_THREADS=1 .venv/bin/python -m torch.distributed.run --standalone \\
          --nproc_per_node 2 benchmarks/checkpoint_scale.py --format $format
    done
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time

import torch
import torch.distributed as dist
from torch import nn

from torchgarden import distribute
from torchgarden.checkpoint import Checkpoint, CheckpointManager

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


class _PeakRss:
    """The highest resident set size seen while the block runs (2 ms samples)."""

    def __enter__(self) -> _PeakRss:
        self.start = self.peak = _rss()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.wait(0.002):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())


def _build(width: int, layers: int, device: torch.device) -> tuple[nn.Module, torch.optim.Optimizer]:
    with torch.device("meta"):
        model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
    distribute.shard_model(model, module_classes=(nn.Linear,))
    model.to_empty(device=device)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0, 0.02)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, optimizer


def _checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer, fmt: str) -> Checkpoint:
    items = {"model": model, "optimizer": optimizer}
    return Checkpoint(**distribute.full_state_items(items, model=model, optimizer=optimizer))


def _measure(fmt: str, model: nn.Module, optimizer: torch.optim.Optimizer, root: str,
             repeats: int) -> dict[str, float]:
    times, peaks = [], []
    for i in range(repeats):
        directory = os.path.join(root, f"{fmt}-{i}")
        manager = CheckpointManager(_checkpoint(model, optimizer, fmt), directory,
                                    checkpoint_format=fmt)
        dist.barrier()
        with _PeakRss() as rss:
            start = time.perf_counter()
            manager.save(1)
            dist.barrier()
            times.append(time.perf_counter() - start)
        peaks.append(rss.peak - rss.start)
    manager = CheckpointManager(_checkpoint(model, optimizer, fmt), directory,
                                checkpoint_format=fmt)
    dist.barrier()
    with _PeakRss() as rss:
        start = time.perf_counter()
        manager.restore()
        dist.barrier()
        resume = time.perf_counter() - start
    return {"save_s": sorted(times)[len(times) // 2], "save_peak_mb": max(peaks) / 2**20,
            "resume_s": resume, "resume_peak_mb": (rss.peak - rss.start) / 2**20,
            "peak_mb": rss.peak / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=3584)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--format", choices=("single", "dcp"), default="dcp")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    dist.init_process_group("cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    root = distribute.broadcast_object(tempfile.mkdtemp(dir=args.dir) if rank == 0 else None)
    model, optimizer = _build(args.width, args.layers, device)
    megabytes = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    before = _rss() / 2**20
    row = _measure(args.format, model, optimizer, root, args.repeats)
    if rank == 0:
        print(f"FSDP2 model of {megabytes:.0f} MB (float32) on {world_size} ranks "
              f"({device.type}); rank 0 RSS before saving: {before:.0f} MB")
        print("| format | save (median s) | rank-0 RSS added by save (peak) | resume (s) | "
              "rank-0 RSS added by resume (peak) | rank-0 peak RSS |")
        print(f"| {args.format} | {row['save_s']:.2f} | {row['save_peak_mb']:.0f} MB | "
              f"{row['resume_s']:.2f} | {row['resume_peak_mb']:.0f} MB | {row['peak_mb']:.0f} MB |")
        shutil.rmtree(root, ignore_errors=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    distribute.exit_worker(0)  # Not the interpreter's exit: it can abort under gloo.
