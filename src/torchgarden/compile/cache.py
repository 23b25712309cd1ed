"""Compile artifacts kept in the model_dir: a restarted compiled run does not compile again.

In a directory of the run's own (``<model_dir>/compile_cache/``, ``docs/performance.md``):

* **The traced step** (torch's ahead-of-time ``aot_compile``), ``step-<key>.bin``: what
  Dynamo, AOTAutograd and Inductor made of the step (the generated code included), so a
  resumed run neither traces nor compiles it. It keeps no guards: ``<key>`` hashes
  everything the graph was traced from (:func:`step_key`), and a resumed run uses the file
  only when its own key is the same. Inductor's built kernels stay in its machine-wide
  disk cache (``TORCHINDUCTOR_CACHE_DIR``), which fresh runs on the machine share: on
  another machine a CPU run builds them again from the generated code (a GPU run's Triton
  kernels are in the file).
* **Inductor's CPU probe** (a test build and a child process per vector ISA, ~1 s in every
  process that compiles), ``vec_isa.json``, here and in Inductor's machine-wide cache: when
  every ISA the CPU flags allow passed it, a later process with the same flags, compiler
  and torch skips it (fresh runs on the machine too).

A file that cannot be used (another torch, damaged) costs a compile, with one log line.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import platform
import shutil
import sys
from collections.abc import Callable
from typing import Any

import torch

from torchgarden.utils.files import atomic_write_bytes, atomic_write_json

__all__ = [
    "load_traced_step", "save_traced_step", "step_key", "traced_step", "use_compile_cache",
]

_ISA_FILE = "vec_isa.json"
_logger = logging.getLogger("torchgarden")


def use_compile_cache(directory: str) -> str:
    """The absolute ``directory`` where the traced step is kept; trusts the CPU probe
    recorded there."""
    directory = os.path.abspath(directory)
    if platform.machine() in ("x86_64", "AMD64"):
        _trust_recorded_probe(directory)
    return directory


def _probe_records(directory: str) -> list[str]:
    """Where the CPU probe's outcome is kept: ``directory`` and Inductor's own cache."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return [os.path.join(directory, _ISA_FILE), os.path.join(cache_dir(), _ISA_FILE)]


def traced_step(traceable: Any, arguments: tuple[Any, ...], key: Any, directory: str, *,
                save: bool) -> Callable[..., Any] | None:
    """The step traced ahead of time for this setup: loaded from ``directory``, else traced
    by ``traceable`` (a ``torch.compile`` without guards) and, when ``save``, written
    there; None where torch cannot trace it ahead of time (compile it as usual).

    Raises:
        torch._dynamo.exc.TorchDynamoException: The step is not one graph.
    """
    step = arguments[0]
    name = step_key(step, arguments, key)
    traced = load_traced_step(directory, name, step)
    if traced is not None:
        return traced
    try:
        traced = traceable.aot_compile((arguments, {}))
    except torch._dynamo.exc.TorchDynamoException:
        raise  # The caller's fallbacks.
    except Exception as error:  # noqa: BLE001 - torch's ahead-of-time API is young.
        _logger.info("runtime.enable_xla: the step cannot be traced ahead of time, it is "
                     "compiled as usual and not kept for restarts (%s)", _short(error))
        return None
    traced.disable_guard_check()  # It has none: the key stands for them.
    if save:
        try:
            save_traced_step(directory, name, traced, step)
        except Exception as error:  # noqa: BLE001 - a restart compiles again.
            _logger.warning("runtime.enable_xla: the compiled step is not kept for restarts "
                            "(%s)", _short(error))
    return traced


def _short(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"


def step_key(step: Any, arguments: tuple[Any, ...], key: Any) -> str:
    """A hash of what the step's graph was traced from: torch, Python and the device; the
    tensors' names, shapes, dtypes and strides; the updates' hyperparameters; the batch
    layout, K and modes (``key``); the metrics; and the source of the task's, the model's,
    the metrics' and torchgarden's code."""
    _, params, buffers, states, scalars, _, _, metrics = arguments
    tensors = [(t.shape, t.dtype, t.stride(), t.device.type, t.requires_grad)
               for t in [*params, *buffers, scalars]]
    state = [[[(t.shape, t.dtype, t.stride()) if isinstance(t, torch.Tensor) else type(t)
               for t in entry] for entry in lists] for lists in states]
    updates = [(u.kind, u.group, u.indices, sorted(u.hyper.items()), u.offset,
                u.steps_in_graph) for u in step.updates]
    classes = {type(step.task), *(type(m) for m in step.model.modules()),
               *(type(m) for m in metrics)}
    sources = sorted(filter(None, map(_source_file, classes)))
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sources += sorted(os.path.join(root, name) for root, _, names in os.walk(package)
                      for name in names if name.endswith(".py"))
    digest = hashlib.sha256(repr((
        torch.__version__, sys.version, step.names, step.buffer_names, tensors, state,
        updates, step.clip_layout, key, [type(m).__qualname__ for m in metrics], repr(step.model),
        torch.get_float32_matmul_precision(), torch.get_default_dtype(),
    )).encode())
    for path in dict.fromkeys(sources):
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:20]


def _source_file(cls: type) -> str | None:
    try:
        return inspect.getsourcefile(cls)
    except TypeError:  # Built-in classes.
        return None


def load_traced_step(directory: str, key: str, step: Any) -> Callable[..., Any] | None:
    """The traced step saved under ``key``, or None (none saved, or unusable: logged)."""
    path = os.path.join(directory, f"step-{key}.bin")
    if not os.path.exists(path):
        return None
    try:
        with open(path, "rb") as f:
            traced = torch.compiler.load_compiled_function(f, external_data={"step": step})
    except Exception as error:  # Another torch, a damaged file: it costs a compile.
        _logger.warning("compiled step %s not used (%s); compiling.", path, _short(error))
        return None
    traced.disable_guard_check()  # It has none: the key stands for them.
    _logger.info("loaded the compiled step from %s.", path)
    return traced


def save_traced_step(directory: str, key: str, traced: Any, step: Any) -> None:
    """Writes ``traced`` (an ``aot_compile`` result) as ``step-<key>.bin``, and the CPU
    probe's outcome, atomically."""
    os.makedirs(directory, exist_ok=True)
    data = type(traced).serialize(traced, external_data={"step": step}).serialized_data
    atomic_write_bytes(os.path.join(directory, f"step-{key}.bin"), data)
    if platform.machine() in ("x86_64", "AMD64"):
        _record_probe(directory)


def _probe_facts() -> dict[str, Any]:
    """What decides Inductor's CPU probe: torch, the C++ compiler, the CPU's ISA flags."""
    from torch._inductor import cpu_vec_isa
    from torch._inductor.cpp_builder import get_cpp_compiler

    flags = sorted(cpu_vec_isa.x86_isa_checker())
    allowed = [str(isa) for isa in cpu_vec_isa.supported_vec_isa_list
               if all(flag in flags for flag in str(isa).split())]
    compiler = shutil.which(get_cpp_compiler()) or get_cpp_compiler()
    built = os.stat(compiler).st_mtime if os.path.exists(compiler) else None
    return {"torch": torch.__version__, "compiler": [compiler, built], "flags": flags,
            "allowed": allowed}


def _record_probe(directory: str) -> None:
    """Records the probe's outcome when every ISA the flags allow passed it."""
    from torch._inductor import cpu_vec_isa

    facts = _probe_facts()
    if [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()] == facts["allowed"]:
        for path in _probe_records(directory):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            atomic_write_json(path, facts)


def _trust_recorded_probe(directory: str) -> None:
    """Skips the probe (``cpp.vec_isa_ok``) when it was recorded with the same facts."""
    recorded = []
    for path in _probe_records(directory):
        try:
            with open(path) as f:
                recorded.append(json.load(f))
        except (OSError, ValueError):
            continue
    if recorded and _probe_facts() in recorded:
        from torch._inductor import config

        config.cpp.vec_isa_ok = True
