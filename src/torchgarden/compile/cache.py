"""Compile artifacts kept in the model_dir: a restarted compiled run does not compile again.

``torch.compiler``'s cache artifacts (Inductor's generated code and autotuning results,
keyed by torch version, device and graph) are written to ``<model_dir>/compile_cache.bin``
after a train loop in which the compiled step met new guards (its first graph call), and
at the end of the run; a resumed run loads them before its first graph call, so a job
restarted on another machine (an empty Inductor disk cache) skips code generation. What
is left of the first call is Dynamo's tracing of the step (docs/performance.md).
Artifacts of another torch version or device are simply not hit.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

from torchgarden.utils.files import atomic_write_bytes

__all__ = ["CACHE_FILE", "CompileCacheWriter", "load_compile_cache"]

CACHE_FILE = "compile_cache.bin"

_logger = logging.getLogger("torchgarden")


def load_compile_cache(model_dir: str) -> int:
    """Loads ``model_dir``'s compile artifacts, if any; returns the bytes read (0: none)."""
    path = os.path.join(model_dir, CACHE_FILE)
    try:
        with open(path, "rb") as f:
            artifacts = f.read()
    except FileNotFoundError:
        return 0
    torch_logger = logging.getLogger("torch.compiler._cache")
    level = torch_logger.level
    torch_logger.setLevel(logging.ERROR)  # It logs a damaged file's traceback as a warning.
    try:
        info = torch.compiler.load_cache_artifacts(artifacts)
    except Exception as error:  # A stale or damaged cache only costs a compile.
        info, reason = None, f"{type(error).__name__}: {error}"
    else:
        reason = "damaged or not torch.compiler's"
    finally:
        torch_logger.setLevel(level)
    if info is None:
        _logger.warning("compile artifacts %s not used (%s); compiling.", path, reason)
        return 0
    _logger.info("loaded compile artifacts from %s (%.0f kB).", path, len(artifacts) / 1e3)
    return len(artifacts)


class CompileCacheWriter:
    """A callback that saves the compile artifacts when the compiled step met new guards.

    Args:
        model_dir: Where ``compile_cache.bin`` goes (the chief's model_dir).
        step_fn: The compiled step (its ``guarded_calls`` count what may have compiled).
    """

    def __init__(self, model_dir: str, step_fn: Any) -> None:
        self._path = os.path.join(model_dir, CACHE_FILE)
        self._step_fn = step_fn
        self._saved_at = 0

    def _save(self, *_: Any) -> None:
        calls = self._step_fn.guarded_calls
        if calls == self._saved_at:
            return
        self._saved_at = calls
        saved = torch.compiler.save_cache_artifacts()
        if saved is not None and saved[0]:
            atomic_write_bytes(self._path, saved[0])

    on_train_loop_end = on_experiment_end = _save
