"""``Serving``: what an exported model computes, the answer of ``Task.build_serving_module``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

__all__ = ["InferenceStepModule", "Serving", "normalize_images"]


@dataclasses.dataclass
class Serving:
    """What an exported model computes (Model Garden's ``ExportModule``) and how to call it.

    An ``nn.Module`` that takes raw inputs (e.g. uint8 images) and returns answers (e.g.
    top-k classes), with its pre- and post-processing inside, plus example inputs to trace
    it with. ``torchgarden export`` turns it into a ``torch.export`` program and an ONNX
    graph, so a consumer needs neither torchgarden nor the task's code to run it.

    Args:
        module: Takes ``len(example_inputs)`` tensors; returns a tensor or a flat
            ``dict[str, Tensor]`` (its keys name the outputs). Put in ``eval()`` mode by
            the exporter.
        example_inputs: One call's inputs, batch first with a batch of at least 2 (a
            size-1 dimension cannot be exported as dynamic).
        input_names: One name per input.
        output_names: Names of a plain-tensor (or tuple) output; ignored when ``module``
            returns a dict.
        dynamic_batch: Export the first dimension of every input as dynamic.
        metadata: JSON-serialisable facts a consumer needs (class labels, the expected
            image size), copied into ``export.json`` under ``"serving"``.

    Example:
        >>> class MyTask(Task):
        ...     def build_serving_module(self, model):
        ...         return Serving(module=ClassifierServing(model), input_names=("images",),
        ...                        example_inputs=(torch.zeros(2, 32, 32, 3, dtype=torch.uint8),))
    """

    module: nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    input_names: tuple[str, ...] = ("inputs",)
    output_names: tuple[str, ...] = ("outputs",)
    dynamic_batch: bool = True
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.example_inputs = tuple(self.example_inputs)
        self.input_names = tuple(self.input_names)
        self.output_names = tuple(self.output_names)
        if not self.example_inputs or not all(
            isinstance(x, torch.Tensor) for x in self.example_inputs
        ):
            raise TypeError(
                "Serving.example_inputs must be a non-empty tuple of tensors, got "
                f"{[type(x).__name__ for x in self.example_inputs]}."
            )
        if len(self.input_names) != len(self.example_inputs):
            raise ValueError(
                f"Serving.input_names {list(self.input_names)} must name each of the "
                f"{len(self.example_inputs)} example inputs."
            )
        small = [n for n, x in zip(self.input_names, self.example_inputs)
                 if self.dynamic_batch and (x.ndim == 0 or x.shape[0] < 2)]
        if small:
            raise ValueError(
                f"Serving.example_inputs {small} need a batch dimension of at least 2 for a "
                "dynamic batch (torch.export specializes size-1 dimensions); use 2 examples."
            )


class InferenceStepModule(nn.Module):
    """The default serving module: ``task.inference_step(inputs, model)`` as ``forward``.

    With one input ``forward(x)`` passes ``x``; with several it passes the tuple.

    Args:
        task: The ``Task`` whose ``inference_step`` runs.
        model: The model, a submodule (its weights are the export's).
    """

    def __init__(self, task: Any, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self._task = task  # Not a submodule: only its inference_step is called.

    def forward(self, *inputs: torch.Tensor) -> Any:
        features = inputs[0] if len(inputs) == 1 else inputs
        return self._task.inference_step(features, self.model)


def normalize_images(
    images: torch.Tensor, mean: Sequence[float] | None = None, std: Sequence[float] | None = None
) -> torch.Tensor:
    """uint8 ``[B, H, W, C]`` images to float ``[B, C, H, W]``: ``(x / 255 - mean) / std``.

    Args:
        images: uint8 (or any integer/float 0..255) channels-last images.
        mean: Per-channel means of the [0, 1] pixels; None: no shift.
        std: Per-channel standard deviations; None: no scaling.

    Returns:
        float32 channels-first images, as the training pipeline feeds the model.
    """
    pixels = images.permute(0, 3, 1, 2).to(torch.float32) / 255.0
    if mean is not None:
        pixels = pixels - pixels.new_tensor(list(mean)).view(1, -1, 1, 1)
    if std is not None:
        pixels = pixels / pixels.new_tensor(list(std)).view(1, -1, 1, 1)
    return pixels
