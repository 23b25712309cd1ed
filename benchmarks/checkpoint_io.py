"""Checkpoint save and restore against the disk's raw speed (wall clock, fresh files).

For a state of ``--megabytes`` (default 268 MB: a 4-layer 4096-wide MLP's weights), in
the directory of ``--dir`` (default: a temporary directory on the disk of /tmp), in a
fresh random order per repeat, medians and ranges over ``--repeats``:

* raw write: the same number of bytes written with ``O_DIRECT`` (no page cache) in 16 MiB
  blocks, then one ``fsync``: what the disk itself sustains;
* ``torch.save`` + ``fsync``: the state written by torch alone, no checksum;
* ``CheckpointManager.save``: a whole checkpoint (hashing while writing, meta.json,
  fsyncs, atomic rename), synchronous;
* the training stall of ``CheckpointManager(enable_async=True).save`` (the host copy;
  the write goes on in a background thread);
* ``torch.load(weights_only=True)`` of the state file, and the verified restore
  (``load_state(verify_files=True)``: the checksums computed on a second thread while
  ``torch.load`` reads; what ``CheckpointManager.restore`` does), each from a file first
  dropped from the page cache, as a resumed process finds it.

Targets from issue 16: save >= 50 % of the raw write bandwidth, verified restore <=
1.2x ``torch.load``, async stall <= 10 % of a synchronous save.

Usage:
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/checkpoint_io.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

import _common
import torch

from torchgarden.checkpoint import Checkpoint, CheckpointManager, layout, load_state

_BLOCK = 16 << 20


def _raw_write(path: str, size: int) -> None:
    """``size`` bytes with O_DIRECT in page-aligned 16 MiB blocks, then one fsync."""
    block = mmap.mmap(-1, _BLOCK)  # Page-aligned, as O_DIRECT requires.
    block.write(os.urandom(1 << 20) * (_BLOCK >> 20))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    try:
        written = 0
        while written < size:
            written += os.write(fd, block)
        os.fsync(fd)
    finally:
        os.close(fd)


def _evict(path: str) -> None:
    """Drops the file's (clean) pages from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _torch_save(state: dict, path: str) -> None:
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())


def _model(megabytes: float) -> torch.nn.Module:
    width = 4096
    layers = max(1, round(megabytes * 1e6 / (4 * width * width)))
    return torch.nn.Sequential(*(torch.nn.Linear(width, width, bias=False)
                                 for _ in range(layers)))


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--megabytes", type=float, default=268)
    parser.add_argument("--dir", default=None, help="where files are written")
    args = parser.parse_args(argv)
    _common.setup_threads()
    _common.print_header("checkpoint save / restore vs the disk", "checkpoint_io.py", argv)
    model = _model(args.megabytes)
    root = tempfile.mkdtemp(prefix="tg-bench-ckpt-io-", dir=args.dir)
    state = {"model": model.state_dict()}
    size = sum(t.numel() * t.element_size() for t in state["model"].values())
    counter = iter(range(1, 10**6))
    sync = CheckpointManager(Checkpoint(model=model), os.path.join(root, "sync"), max_to_keep=1)
    async_ = CheckpointManager(Checkpoint(model=model), os.path.join(root, "async"),
                               max_to_keep=1, enable_async=True)
    saved = sync.save(next(counter), check_interval=False)
    state_file = os.path.join(saved, layout.STATE_FILE)
    jobs: dict[str, Callable[[], object]] = {
        "raw write (O_DIRECT) + fsync": lambda: _raw_write(os.path.join(root, "raw"), size),
        "torch.save + fsync": lambda: _torch_save(state, os.path.join(root, "torch.pt")),
        "CheckpointManager.save (sync)": lambda: sync.save(next(counter), check_interval=False),
        "async save: training stall": lambda: async_.save(next(counter), check_interval=False),
        "torch.load": lambda: torch.load(state_file, map_location="cpu", weights_only=True),
        "verified restore": lambda: load_state(os.path.dirname(state_file), verify_files=True),
    }
    times: dict[str, list[float]] = {name: [] for name in jobs}
    rng = random.Random(0)
    try:
        for _ in range(args.repeats):
            for name in rng.sample(list(jobs), len(jobs)):
                if name in ("verified restore", "torch.load"):
                    state_file = os.path.join(sync.latest_checkpoint, layout.STATE_FILE)
                    _evict(state_file)  # Both read a cold file, as a resumed process does.
                start = time.perf_counter()
                jobs[name]()
                times[name].append(time.perf_counter() - start)
                async_.sync()  # The background write never overlaps the next job.
    finally:
        sync.close()
        async_.close()
        shutil.rmtree(root, ignore_errors=True)
    seconds = {name: _common.median(values) for name, values in times.items()}
    raw = seconds["raw write (O_DIRECT) + fsync"]
    print(f"\n{size / 1e6:.0f} MB state, wall clock, median of {args.repeats}; "
          f"machine: {_common.machine_load()}")
    sync_save, load = seconds["CheckpointManager.save (sync)"], seconds["torch.load"]

    def versus(name: str, value: float) -> str:
        if "stall" in name:
            return f"{value / sync_save:.0%} of a sync save"
        if "load" in name or "restore" in name:
            return f"{value / load:.2f}x torch.load"
        return f"{raw / value:.0%} of raw write"

    _common.print_table(
        ["operation", "seconds", "range s", "GB/s", "compared"],
        [(name, f"{value:.3f}", _common.spread(times[name], 1, 3), f"{size / value / 1e9:.2f}",
          versus(name, value)) for name, value in seconds.items()],
    )
    return seconds


if __name__ == "__main__":
    main(sys.argv[1:])
