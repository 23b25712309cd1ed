"""``python faulty_cli.py train ...``: the real CLI with one fault injected by env var.

Runs ``python -m torchgarden`` unchanged except that, when ``TG_FAULT`` is set, the
process kills itself with SIGKILL at the named point (a real SIGKILL: no handler,
no ``finally`` block, no flush runs). Points (``N`` is a global step):

* ``step:N`` — inside the train step that would take the model from N-1 to N,
  after its batch was fetched and before the weights change (single- and multi-task
  trainers alike).
* ``save:N:state`` — while writing ``state.pt`` of checkpoint N: half of its bytes
  are on disk in the hidden temp directory.
* ``save:N:meta`` — ``state.pt`` complete, ``meta.json`` not yet written.
* ``save:N:rename`` — the temp directory is complete and synced, not yet renamed.
* ``save:N:retention`` — ``ckpt-N`` is in place; old checkpoints are not yet deleted.
* ``save:N:rmtree`` — deleting the first old checkpoint: its ``state.pt`` is gone,
  its ``meta.json`` is still there.
* ``summary:N`` — while writing the train summaries of step N (half of the tags).
* ``eval:N`` — in the middle of the evaluation at step N (after its first batch).

``TG_FAULT=signal:N:SIGTERM`` (or ``signal:N:SIGUSR1+SIGUSR1`` for two) instead sends
the process those signals itself at the start of step N, as a scheduler would.

``TG_FAULT_DISK_FULL=N`` instead makes the write of checkpoint N fail with
``OSError(ENOSPC)`` halfway through ``state.pt`` (the process is not killed).

``TG_FAULT_STALL=N:SECONDS`` sleeps that long inside step N, so a test can deliver a
signal while a step is in flight.

``TG_FAULT_WHERE=RANK:ATTEMPT`` (under torchrun) injects the faults above only into that
rank of that restart attempt (``TORCHELASTIC_RESTART_COUNT``), so a restarted job runs
clean.

``TG_FAULT_HOLD=N:PATH`` prints ``faulty_cli: holding at step N`` at the start of step N
and waits (at most two minutes) until the file ``PATH`` exists, so a test can act while
the run holds its model_dir's lock.
"""

from __future__ import annotations

import errno
import io
import os
import runpy
import signal
import sys
import time


def _die() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _target(f) -> str:
    """The path torch.save writes to: a path, or a file object's name (torchgarden saves
    through one that hashes and writes with direct I/O)."""
    return f if isinstance(f, str) else str(getattr(f, "name", ""))


def _checkpoint_step(path: str) -> int | None:
    """The N of ``.../ckpt-N/...`` or ``.../.ckpt-N.tmp-.../...``, else None."""
    for part in reversed(os.path.normpath(path).split(os.sep)):
        name = part.lstrip(".")
        if name.startswith("ckpt-"):
            digits = name[len("ckpt-"):].split(".", 1)[0]
            if digits.isdigit():
                return int(digits)
    return None


def _patch_train_steps(make) -> None:
    """Replaces ``train_step`` of the Trainer and of the multi-task trainers (each defines
    its own) with ``make(original)``."""
    from torchgarden.core.trainer import Trainer
    from torchgarden.multitask import MultiTaskBaseTrainer, MultiTaskInterleavingTrainer

    for cls in (Trainer, MultiTaskBaseTrainer, MultiTaskInterleavingTrainer):
        cls.train_step = make(cls.__dict__["train_step"])


def _install_step_fault(target: int, stall: float | None = None) -> None:
    def make(original):
        def train_step(self, iterator):
            if self.global_step.value == target - 1:
                if stall is None:
                    self.next_train_inputs(iterator)
                    _die()
                time.sleep(stall)
            return original(self, iterator)

        return train_step

    _patch_train_steps(make)


def _install_eval_fault(target: int) -> None:
    from torchgarden.core.evaluator import Evaluator

    original = Evaluator.eval_step
    seen = [0]

    def eval_step(self, iterator):
        if self.global_step.value == target:
            seen[0] += 1
            if seen[0] == 2:
                _die()
        return original(self, iterator)

    Evaluator.eval_step = eval_step


def _install_signal_fault(target: int, signals: list[signal.Signals]) -> None:
    def make(original):
        def train_step(self, iterator):
            if self.global_step.value == target - 1:
                for sig in signals:
                    os.kill(os.getpid(), sig)
            return original(self, iterator)

        return train_step

    _patch_train_steps(make)


def _install_save_fault(target: int, phase: str) -> None:
    import shutil

    import torch

    from torchgarden.checkpoint import layout

    if phase in ("state", "meta"):
        real_save = torch.save

        def save(obj, f, *args, **kwargs):
            path = _target(f)
            if path.endswith(layout.STATE_FILE) and _checkpoint_step(path) == target:
                if phase == "meta":
                    real_save(obj, f, *args, **kwargs)
                    if hasattr(f, "close"):
                        f.close()  # torchgarden's file object: complete state.pt on disk.
                    _die()
                buffer = io.BytesIO()
                real_save(obj, buffer, *args, **kwargs)
                data = buffer.getvalue()
                with open(path, "wb") as out:
                    out.write(data[: len(data) // 2])
                    out.flush()
                    os.fsync(out.fileno())
                _die()
            return real_save(obj, f, *args, **kwargs)

        torch.save = save
    elif phase in ("rename", "retention"):
        real_fsync_dir = layout.fsync_dir

        def fsync_dir(path):
            real_fsync_dir(path)
            is_temp = _checkpoint_step(path) == target
            if (phase == "rename" and is_temp) or (
                phase == "retention" and not is_temp and _checkpoint_step(path) is None
                and any(n == f"ckpt-{target}" for n in os.listdir(path))
            ):
                _die()

        layout.fsync_dir = fsync_dir
    elif phase == "rmtree":
        from torchgarden.checkpoint import manager

        real_retention = manager.CheckpointManager._on_written

        def apply_retention(self, keep):
            if _checkpoint_step(keep) == target:

                def partial_rmtree(path, *args, **kwargs):
                    os.remove(os.path.join(path, layout.STATE_FILE))
                    _die()

                shutil_rmtree, shutil.rmtree = shutil.rmtree, partial_rmtree
                try:
                    return real_retention(self, keep)
                finally:
                    shutil.rmtree = shutil_rmtree
            return real_retention(self, keep)

        manager.CheckpointManager._on_written = apply_retention
    else:
        raise SystemExit(f"faulty_cli: unknown save phase {phase!r}")


def _install_summary_fault(target: int) -> None:
    from torchgarden.summary import manager

    real_write = manager.SummaryManager._write

    def write(self, summary_dict, relative_path, step):
        if step == target and summary_dict and "training_loss" in summary_dict:
            items = list(summary_dict.items())
            real_write(self, dict(items[: len(items) // 2]), relative_path, step)
            self.flush()
            _die()
        return real_write(self, summary_dict, relative_path, step)

    manager.SummaryManager._write = write


def _install_disk_full(target: int) -> None:
    import torch

    from torchgarden.checkpoint import layout

    real_save = torch.save

    def save(obj, f, *args, **kwargs):
        path = _target(f)
        if path.endswith(layout.STATE_FILE) and _checkpoint_step(path) == target:
            buffer = io.BytesIO()
            real_save(obj, buffer, *args, **kwargs)
            with open(path, "wb") as out:
                out.write(buffer.getvalue()[:100])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return real_save(obj, f, *args, **kwargs)

    torch.save = save


def _install_hold(target: int, gate: str) -> None:
    def make(original):
        def train_step(self, iterator):
            if self.global_step.value == target - 1:
                print(f"faulty_cli: holding at step {target}", flush=True)
                deadline = time.monotonic() + 120
                while not os.path.exists(gate) and time.monotonic() < deadline:
                    time.sleep(0.05)
            return original(self, iterator)

        return train_step

    _patch_train_steps(make)


def install(fault: str) -> None:
    """Installs the fault named by a ``TG_FAULT`` value (see the module docstring)."""
    kind, _, rest = fault.partition(":")
    if kind == "step":
        _install_step_fault(int(rest))
    elif kind == "save":
        number, _, phase = rest.partition(":")
        _install_save_fault(int(number), phase)
    elif kind == "summary":
        _install_summary_fault(int(rest))
    elif kind == "eval":
        _install_eval_fault(int(rest))
    elif kind == "signal":
        number, _, names = rest.partition(":")
        _install_signal_fault(int(number), [signal.Signals[n] for n in names.split("+")])
    else:
        raise SystemExit(f"faulty_cli: unknown fault {fault!r}")


def main() -> None:
    where = os.environ.get("TG_FAULT_WHERE")
    here = f"{os.environ.get('RANK', '0')}:{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    if where and where != here:
        os.environ.pop("TG_FAULT", None)
    if os.environ.get("TG_FAULT"):
        install(os.environ["TG_FAULT"])
    if os.environ.get("TG_FAULT_DISK_FULL"):
        _install_disk_full(int(os.environ["TG_FAULT_DISK_FULL"]))
    if os.environ.get("TG_FAULT_HOLD"):
        step, _, gate = os.environ["TG_FAULT_HOLD"].partition(":")
        _install_hold(int(step), gate)
    if os.environ.get("TG_FAULT_STALL"):
        step, _, seconds = os.environ["TG_FAULT_STALL"].partition(":")
        _install_step_fault(int(step), stall=float(seconds))
    sys.argv = ["torchgarden", *sys.argv[1:]]
    runpy.run_module("torchgarden", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
