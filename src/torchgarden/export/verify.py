"""Reads an export back and measures it against the eager serving module.

Run right after writing: ``torch.export.load(model.pt2).module()`` and an
``onnxruntime`` session on ``model.onnx`` are called on the example inputs (and on a
batch of a different size, to exercise the dynamic dimension); the largest absolute
difference from eager per format goes into ``export.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from torchgarden.core.serving import Serving

__all__ = ["describe", "flatten_outputs", "max_abs_difference", "run_onnx", "run_pt2"]


def flatten_outputs(outputs: Any, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """``{name: tensor}`` of a module's outputs: a dict as is, a tensor or tuple by ``names``.

    Raises:
        TypeError: The outputs are not tensors, a tuple of them, or a flat dict of them.
    """
    if isinstance(outputs, Mapping):
        flat = dict(outputs)
    elif isinstance(outputs, torch.Tensor):
        flat = {names[0] if names else "outputs": outputs}
    elif isinstance(outputs, (tuple, list)):
        flat = {names[i] if i < len(names) else f"outputs_{i}": v for i, v in enumerate(outputs)}
    else:
        flat = {"outputs": outputs}
    bad = [k for k, v in flat.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise TypeError(f"the serving module must return tensors (a tensor, a tuple or a flat "
                        f"dict of them); outputs {bad} are not.")
    return flat


def describe(tensors: Mapping[str, torch.Tensor], dynamic_batch: bool) -> list[dict[str, Any]]:
    """``[{name, shape, dtype}]`` with the batch dimension named ``"batch"`` when dynamic."""
    described = []
    for name, tensor in tensors.items():
        shape: list[Any] = list(tensor.shape)
        if dynamic_batch and shape:
            shape[0] = "batch"
        described.append({"name": name, "shape": shape,
                          "dtype": str(tensor.dtype).removeprefix("torch.")})
    return described


def max_abs_difference(expected: Mapping[str, torch.Tensor], actual: Mapping[str, Any]) -> float:
    """The largest ``|expected - actual|`` over all outputs (in float64).

    Raises:
        ValueError: An output is missing or has another shape.
    """
    worst = 0.0
    for name, want in expected.items():
        if name not in actual:
            raise ValueError(f"output {name!r} is missing from the export (has {sorted(actual)}).")
        got = torch.as_tensor(np.asarray(actual[name]) if not isinstance(actual[name], torch.Tensor)
                              else actual[name])
        if tuple(got.shape) != tuple(want.shape):
            raise ValueError(f"output {name!r} has shape {tuple(got.shape)} in the export, "
                             f"{tuple(want.shape)} eagerly.")
        if want.numel():
            diff = (got.double() - want.detach().cpu().double()).abs().max()
            worst = max(worst, float(diff))
    return worst


def run_pt2(path: str, inputs: tuple[torch.Tensor, ...],
            names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """Loads ``model.pt2`` and calls its module on ``inputs``."""
    program = torch.export.load(path)
    with torch.no_grad():
        return flatten_outputs(program.module()(*inputs), names)


def run_onnx(path: str, inputs: tuple[torch.Tensor, ...],
             serving: Serving) -> dict[str, np.ndarray]:
    """Runs ``model.onnx`` in an onnxruntime CPU session on ``inputs``."""
    import onnxruntime  # the `export` extra; only called when it is installed

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {name: x.detach().cpu().numpy() for name, x in zip(serving.input_names, inputs)}
    values = session.run(None, feeds)
    return {out.name: value for out, value in zip(session.get_outputs(), values)}


def batch_of(inputs: tuple[torch.Tensor, ...], size: int) -> tuple[torch.Tensor, ...]:
    """The example inputs repeated (or cut) to a batch of ``size``."""
    return tuple(torch.cat([x] * (size // x.shape[0] + 1))[:size] for x in inputs)
