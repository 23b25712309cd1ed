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
import json
import logging
import sys
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

#: Every format, in the order they are written.
FORMATS = ("safetensors", "pt2", "onnx")
#: What ONNX export and its check need (the ``export`` extra).
ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")
FILE_NAMES = {"safetensors": "model.safetensors", "pt2": "model.pt2", "onnx": "model.onnx"}
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
        raise ExportError(f"--format needs at least one of {', '.join(FORMATS)}.")
    for name in names:
        if name not in FORMATS:
            raise ExportError(f"--format {name!r} is unknown.{did_you_mean(name, FORMATS)} "
                              f"Formats: {', '.join(FORMATS)}.")
    return tuple(f for f in FORMATS if f in names)


def write_safetensors(path: str, weights: Mapping[str, torch.Tensor],
                      metadata: Mapping[str, Any]) -> None:
    """Writes the state dict with ``metadata`` (values JSON-encoded unless strings)."""
    # Own contiguous copies: safetensors refuses tensors that share storage.
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in weights.items()}
    header = {k: v if isinstance(v, str) else json.dumps(v, sort_keys=True)
              for k, v in metadata.items()}
    save_file(tensors, path, metadata=header)


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
    return found or f"<serving module> ({type(root).__name__})"


def _reason(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


@contextlib.contextmanager
def _traced(what: str, serving: Serving, written: tuple[str, ...]) -> Iterator[None]:
    """Turns a tracing failure into one ``UntraceableModelError`` line."""
    try:
        yield
    except ExportError:
        raise
    except Exception as error:
        module = _innermost_module(sys.exc_info()[2], serving.module)
        worked = ", ".join(written) or "none"
        raise UntraceableModelError(
            f"{what} cannot trace {module}: {_reason(error)} (formats that still worked: "
            f"{worked}; export only those with --format {','.join(written) or 'safetensors'})",
            module=module, succeeded=written) from error


def write_pt2(path: str, serving: Serving, written: tuple[str, ...] = ()) -> None:
    """``torch.export.export`` of the serving module (dynamic batch), saved to ``path``."""
    with _traced("torch.export", serving, written):
        program = torch.export.export(serving.module, serving.example_inputs,
                                      dynamic_shapes=_dynamic_shapes(serving))
    torch.export.save(program, path)


@contextlib.contextmanager
def _quiet_onnx() -> Iterator[None]:
    """Silences the ONNX exporter's notices (optional-package and deprecation warnings)."""
    onnx_logger = logging.getLogger("torch.onnx")
    level = onnx_logger.level
    onnx_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        onnx_logger.setLevel(level)


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
    with _traced("the ONNX exporter", serving, written), _quiet_onnx():
        program = torch.onnx.export(
            serving.module, serving.example_inputs, dynamo=True, verbose=False,
            dynamic_shapes=_dynamic_shapes(serving), input_names=list(serving.input_names),
            output_names=output_names)
        program.save(path)
