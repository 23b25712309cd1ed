"""The layout of a model_dir, checked before anything is written there.

```
<model_dir>/.torchgarden.lock     held by the one trainer writing here (see run_lock)
<model_dir>/params.yaml           the resolved config (a file)
<model_dir>/metrics.jsonl         every summary written, one JSON object per line
<model_dir>/compile_cache/        compiled code of an enable_xla run (compile/cache.py)
<model_dir>/ckpt-<step>/          checkpoints
<model_dir>/train/  validation/   TensorBoard events of the trainer
<model_dir>/best_ckpt/            the trainer's best-checkpoint export
<model_dir>/eval/                 everything `eval` / `continuous_eval` write (own lock)
```
"""

from __future__ import annotations

import errno
import os

from torchgarden.config import ExperimentConfig

#: Written by every run (summary.METRICS_FILE, run_lock.LOCK_FILE; not imported: no cycles).
_METRICS_FILE, _LOCK_FILE = "metrics.jsonl", ".torchgarden.lock"

__all__ = [
    "COMPILE_CACHE_SUBDIR",
    "EVAL_SUBDIR",
    "ModelDirError",
    "NoCheckpointError",
    "best_export_dir",
    "check_model_dir",
    "eval_dir",
]

#: Where evaluation jobs write (summaries, best export): never where a trainer writes.
EVAL_SUBDIR = "eval"
#: Where a compiled (``runtime.enable_xla``) run keeps its traced step (compile/cache.py).
COMPILE_CACHE_SUBDIR = "compile_cache"


class ModelDirError(ValueError):
    """The model_dir cannot be used as it is (named, with what to do)."""


class NoCheckpointError(ValueError):
    """``eval`` was asked of a model_dir that holds no checkpoint."""


def eval_dir(model_dir: str) -> str:
    """The directory an ``eval`` / ``continuous_eval`` job writes in."""
    return os.path.join(model_dir, EVAL_SUBDIR)


def best_export_dir(params: ExperimentConfig, directory: str | os.PathLike[str] | None) -> str | None:
    """Where the best checkpoint is exported under ``directory``: its
    ``best_checkpoint_export_subdir`` when that and ``best_checkpoint_eval_metric`` are set,
    else None (no export)."""
    cfg = params.trainer
    subdir, metric = cfg.best_checkpoint_export_subdir, cfg.best_checkpoint_eval_metric
    if not (directory and subdir and metric):
        return None
    return os.path.join(directory, subdir)


def check_model_dir(
    model_dir: str | os.PathLike[str] | None, params: ExperimentConfig, *, training: bool
) -> str:
    """Checks that ``model_dir`` can be used, without writing anything; returns it.

    Args:
        model_dir: The run's directory (it may not exist yet).
        params: The config (names the summary and export subdirectories).
        training: Whether the run writes as a trainer (else as an evaluator, in ``eval/``).

    Raises:
        ModelDirError: The path is empty, a file, under a file, a broken or looping link,
            not writable, or an entry the run writes is of the wrong kind or a symbolic
            link (the model_dir itself may be one).
    """
    if not model_dir:
        raise ModelDirError("model_dir must be specified (--model_dir is required): the "
                            "directory for checkpoints and summaries.")
    model_dir = os.fspath(model_dir)
    _check_path(model_dir)
    cfg = params.trainer
    if training:
        files = ("params.yaml",)
        written = (*files, _METRICS_FILE, _LOCK_FILE)
        dirs = ("train", cfg.validation_summary_subdir, cfg.best_checkpoint_export_subdir,
                COMPILE_CACHE_SUBDIR if params.runtime.enable_xla else "")
    else:
        files = ()
        written = tuple(os.path.join(EVAL_SUBDIR, name) for name in (_METRICS_FILE, _LOCK_FILE))
        dirs = (EVAL_SUBDIR,)
    for name in (*written, *dirs):
        path = os.path.join(model_dir, name) if name else ""
        if path and os.path.islink(path):
            # Writing through it would write (or truncate) whatever it points at.
            raise ModelDirError(
                f"{path} is a symbolic link (to {os.readlink(path)}); the run writes there and "
                "never through a link: replace it with the real file or directory, or use "
                "another --model_dir.")
    for name in files:
        path = os.path.join(model_dir, name)
        if os.path.lexists(path) and not os.path.isfile(path):
            raise ModelDirError(
                f"{path} exists and is not a file; the run writes a file there: move it "
                "aside or use another --model_dir."
            )
    for name in dirs:
        path = os.path.join(model_dir, name) if name else ""
        if path and os.path.lexists(path) and not os.path.isdir(path):
            raise ModelDirError(
                f"{path} exists and is not a directory; the run writes "
                f"{'summaries or exports' if training else 'its evaluation'} there: move it "
                "aside or use another --model_dir."
            )
    return model_dir


def _check_path(model_dir: str) -> None:
    try:
        os.stat(model_dir)
    except FileNotFoundError:
        if os.path.lexists(model_dir):
            raise ModelDirError(
                f"--model_dir {model_dir} is a symbolic link to nothing; remove it or point "
                "it at a directory."
            ) from None
    except NotADirectoryError:
        pass  # Under a file: reported below.
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ModelDirError(
                f"--model_dir {model_dir} is a loop of symbolic links; remove it or point it "
                "at a directory."
            ) from None
        raise ModelDirError(f"--model_dir {model_dir} cannot be used: {e.strerror}.") from None
    if os.path.exists(model_dir) and not os.path.isdir(model_dir):
        raise ModelDirError(f"--model_dir {model_dir} exists and is not a directory.")
    probe = os.path.abspath(model_dir)
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise ModelDirError(
            f"--model_dir {model_dir} cannot be created: {probe} is a file, not a directory; "
            "choose a path under a directory."
        )
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ModelDirError(
            f"--model_dir {model_dir} is not writable (check permissions of {probe})."
        )
