"""The three export formats: safetensors weights, a ``torch.export`` program, ONNX.

Each writer takes a path inside the export's staging directory. ``torch.export`` and
the ONNX exporter trace the task's serving module with a dynamic batch dimension; a
failure is reported as :class:`UntraceableModelError` naming the innermost module that
was running and the first line of torch's reason.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import io
import json
import logging
import os
import stat
import warnings
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from torchgarden.core.serving import Serving
from torchgarden.export.errors import ExportError, UntraceableModelError
from torchgarden.utils.suggest import did_you_mean

__all__ = ["FORMATS", "ONNX_PACKAGES", "check_formats", "missing_onnx_packages",
           "write_onnx", "write_pt2", "write_safetensors"]

#: The default formats, in the order they are written.
FORMATS = ("safetensors", "pt2", "onnx")
#: Formats written only when named: ``hf`` (Hugging Face layout, transformers models).
OPTIONAL_FORMATS = ("hf",)
_ALL = (*FORMATS, *OPTIONAL_FORMATS)
#: What ONNX export and its check need (the ``export`` extra).
ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")
FILE_NAMES = {"safetensors": "model.safetensors", "pt2": "model.pt2", "onnx": "model.onnx",
              "hf": "hf"}
_MAX_BATCH = 4096


def missing_onnx_packages() -> list[str]:
    """The packages of :data:`ONNX_PACKAGES` that are not installed."""
    return [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]


def check_formats(formats: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Parses ``"safetensors,pt2"`` (or a list) into known formats, in writing order.

    Raises:
        ExportError: An unknown or empty format list; names the closest known one.
    """
    names = [f.strip() for f in formats.split(",")] if isinstance(formats, str) else list(formats)
    names = [n for n in names if n]
    if not names:
        raise ExportError(f"--format needs at least one of {', '.join(_ALL)}.")
    for name in names:
        if name not in _ALL:
            raise ExportError(f"--format {name!r} is unknown.{did_you_mean(name, _ALL)} "
                              f"Formats: {', '.join(_ALL)}.")
    return tuple(f for f in _ALL if f in names)


def write_safetensors(path: str, weights: Mapping[str, torch.Tensor],
                      metadata: Mapping[str, Any]) -> None:
    """Writes the state dict with ``metadata`` (values JSON-encoded unless strings)."""
    # Own contiguous copies: safetensors refuses tensors that share storage.
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in weights.items()}
    header = {k: v if isinstance(v, str) else json.dumps(v, sort_keys=True)
              for k, v in metadata.items()}
    save_file(tensors, path, metadata=header)
    # safetensors creates the file owner-only; give it the mode of the files beside it.
    os.chmod(path, stat.S_IMODE(os.stat(os.path.dirname(path) or ".").st_mode) & 0o666)


def _dynamic_shapes(serving: Serving) -> tuple[Any, ...] | None:
    """Dim 0 of every input is ``batch`` (grouped as one entry for ``forward(*inputs)``)."""
    if not serving.dynamic_batch:
        return None
    batch = torch.export.Dim("batch", min=1, max=_MAX_BATCH)
    shapes = tuple({0: batch} for _ in serving.example_inputs)
    parameters = list(inspect.signature(serving.module.forward).parameters.values())
    if parameters and parameters[0].kind is inspect.Parameter.VAR_POSITIONAL:
        return (shapes,)
    return shapes


def _innermost_module(tb: TracebackType | None, root: nn.Module) -> str:
    """The qualified name of the deepest module of ``root`` whose code is in ``tb``."""
    names = {id(m): (n or "<serving module>", type(m).__name__) for n, m in root.named_modules()}
    found = ""
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if id(owner) in names:
            name, cls = names[id(owner)]
            found = f"{name} ({cls})"
        tb = tb.tb_next
    return found or f"<serving module> ({type(root).__name__})"  # == _traced's root


def _reason(error: BaseException) -> str:
    """torch's first line of explanation, and the user's line it points at, if any."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    reason = f"{type(error).__name__}: {lines[0] if lines else ''}"
    marker = "The following call raised this error:"
    if marker in lines and lines.index(marker) + 1 < len(lines):
        reason += f" (at {lines[lines.index(marker) + 1]})"
    return reason


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and its causes, outermost first (the ONNX exporter wraps torch.export's)."""
    chain = [error]
    while chain[-1].__cause__ is not None and len(chain) < 10:
        chain.append(chain[-1].__cause__)
    return chain


@contextlib.contextmanager
def _traced(what: str, serving: Serving, written: tuple[str, ...]) -> Iterator[None]:
    """Turns a tracing failure into one ``UntraceableModelError`` line."""
    try:
        yield
    except ExportError:
        raise
    except Exception as error:
        chain = _chain(error)
        root = f"<serving module> ({type(serving.module).__name__})"
        found = [_innermost_module(e.__traceback__, serving.module) for e in chain]
        module = next((m for m in reversed(found) if m != root), root)
        if written:
            worked = (f"formats that still worked: {', '.join(written)}; export only those "
                      f"with --format {','.join(written)}")
        else:
            worked = "nothing was written; --format safetensors exports the weights alone"
        raise UntraceableModelError(
            f"{what} cannot trace {module}: {_reason(chain[-1])} ({worked})",
            module=module, succeeded=written) from error


def write_pt2(path: str, serving: Serving, written: tuple[str, ...] = ()) -> None:
    """``torch.export.export`` of the serving module (dynamic batch), saved to ``path``."""
    with _traced("torch.export", serving, written), _quiet_tracing():
        program = torch.export.export(serving.module, serving.example_inputs,
                                      dynamic_shapes=_dynamic_shapes(serving))
    torch.export.save(program, path)


@contextlib.contextmanager
def _quiet_tracing() -> Iterator[None]:
    """Silences torch's tracing notices (graph dumps of a failed trace, optional-package
    warnings) that would bury the one-line outcome; failures still raise."""
    loggers = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)
               if name == "torch" or name.startswith("torch.")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:  # torch.export also prints a failed graph to stderr itself
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def write_onnx(path: str, serving: Serving, output_names: list[str],
               written: tuple[str, ...] = ()) -> None:
    """torch's own ONNX exporter (``dynamo=True``) on the serving module, saved to ``path``.

    Raises:
        ExportError: onnx/onnxscript are not installed.
        UntraceableModelError: The module cannot be traced or translated.
    """
    missing = missing_onnx_packages()
    if missing:
        raise ExportError(f"ONNX export needs {', '.join(missing)}: pip install "
                          "'torchgarden[export]'.")
    with _traced("the ONNX exporter", serving, written), _quiet_tracing():
        program = torch.onnx.export(
            serving.module, serving.example_inputs, dynamo=True, verbose=False,
            dynamic_shapes=_dynamic_shapes(serving), input_names=list(serving.input_names),
            output_names=output_names)
        program.save(path)
