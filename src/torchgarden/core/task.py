"""``Task``: what is trained -- model, data, losses, metrics and one train/validation step."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from torchgarden import optim
from torchgarden.checkpoint import load_model_weights
from torchgarden.core.serving import InferenceStepModule, Serving
from torchgarden.layers import model_losses
from torchgarden.utils.logs import Logs

if TYPE_CHECKING:
    from torchgarden.config import DataConfig, OptimizationConfig, RuntimeConfig, TaskConfig
    from torchgarden.data import InputContext

__all__ = ["Task", "Logs", "first_validation_data", "scale_loss"]

_logger = logging.getLogger("torchgarden")


class Task:
    """Base class of every task (Model Garden's ``base_task.Task``, REFERENCE §2).

    A Task is a single-replica view: it never touches checkpoints, summaries or the loop
    schedule. Subclass it, implement ``build_model`` and ``build_inputs``, usually
    ``build_losses`` and ``build_metrics``, and register it for its config class with
    ``@register_task(MyTaskConfig)``.

    Args:
        params: The task config (a ``TaskConfig`` subclass).
        logging_dir: Directory the task may write files to. Defaults to ``""`` (cwd).
        name: Optional name; defaults to the class name.

    Example:
        >>> import torch
        >>> from torchgarden import Task, TaskConfig
        >>> class Regression(Task):
        ...     def build_model(self):
        ...         return torch.nn.Linear(8, 1)
        ...     def build_inputs(self, params, input_context=None):
        ...         x = torch.randn(64, 8)
        ...         return [(b, b.sum(1, keepdim=True)) for b in x.split(16)]
        ...     def build_losses(self, labels, model_outputs, aux_losses=None):
        ...         loss = torch.nn.functional.mse_loss(model_outputs, labels)
        ...         return loss + sum(aux_losses or [])
    """

    #: The reserved key for the scalar loss in step logs.
    loss = "loss"
    #: Tokens in one training example (a language model's sequence length): the
    #: Controller then logs ``throughput/tokens_per_second``. None: not counted in tokens.
    tokens_per_example: int | None = None
    #: Training FLOPs (forward and backward) of one example, for ``throughput/mfu``. None:
    #: counted with ``torch.utils.flop_counter`` on the first batch when the model runs
    #: on ``meta`` tensors. Set either (a class attribute, or in ``__init__`` or
    #: ``build_model``) to declare them; see docs/observability.md.
    flops_per_example: float | None = None

    def __init__(self, params: TaskConfig, logging_dir: str | None = None,
                 name: str | None = None) -> None:
        self._task_config = params
        self._logging_dir = logging_dir or ""
        self.name = name or type(self).__name__

    @property
    def task_config(self) -> TaskConfig:
        return self._task_config

    @property
    def logging_dir(self) -> str:
        return self._logging_dir

    def build_model(self) -> nn.Module:
        """Returns a new model. Must be overridden by tasks that train a model."""
        raise NotImplementedError(f"{type(self).__name__} must implement build_model().")

    def build_inputs(self, params: DataConfig, input_context: InputContext | None = None) -> Any:
        """Returns an iterable of batches (usually a ``DataLoader``) for ``params``.

        For training the iterable is restarted at each epoch end by the Trainer, so it
        should not repeat forever itself. Batches are per replica: divide
        ``params.global_batch_size`` with ``input_context.get_per_replica_batch_size``
        (``torchgarden.data.build_dataloader`` does this for you).
        """
        raise NotImplementedError(f"{type(self).__name__} must implement build_inputs().")

    def build_losses(self, labels: Any, model_outputs: Any,
                     aux_losses: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
        """Returns the scalar loss. The default adds up ``aux_losses`` (0.0 if none)."""
        del labels, model_outputs
        if not aux_losses:
            return torch.zeros(())
        return torch.stack([torch.as_tensor(loss).float() for loss in aux_losses]).sum()

    def build_metrics(self, training: bool = True) -> list[Any]:
        """Returns streaming metrics (``torchgarden.metrics`` or torchmetrics objects)."""
        del training
        return []

    def create_optimizer(self, optimizer_config: OptimizationConfig, model: nn.Module,
                         runtime_config: RuntimeConfig | None = None) -> torch.optim.Optimizer:
        """Builds the optimizer from ``trainer.optimizer_config`` (REFERENCE §2, §9).

        With ``runtime.mixed_precision_dtype == "float16"`` the optimizer is wrapped in an
        ``optim.LossScaleOptimizer`` (dynamic unless ``runtime.loss_scale`` is a number),
        as Model Garden does. The learning rate is set every step by the Trainer from
        ``optim.build_learning_rate(optimizer_config)``.
        """
        optimizer = optim.build_optimizer(optimizer_config, model)
        if runtime_config is not None and runtime_config.mixed_precision_dtype == "float16":
            scale = runtime_config.loss_scale
            dynamic = scale is None or scale == "dynamic"
            device = next((p.device.type for p in model.parameters()), "cpu")
            optimizer = optim.LossScaleOptimizer(
                optimizer, dynamic=dynamic, initial_scale=2.0**15 if dynamic else float(scale),
                device=device)
        return optimizer

    def initialize(self, model: nn.Module) -> None:
        """Loads ``task_config.init_checkpoint`` into ``model`` (fresh ``model_dir`` only).

        A directory is resolved to its latest checkpoint. Only the model weights are
        read; ``task_config.init_checkpoint_modules`` (module-name prefixes such as
        ``"backbone"`` or ``["backbone"]``; ``"all"``: everything) restricts what is
        restored, ``init_checkpoint_prefix_map`` renames the file's keys first. Every
        requested weight must be present and of the same shape; one line reports what
        was loaded and skipped.
        """
        path = getattr(self._task_config, "init_checkpoint", "")
        if not path:
            return
        modules = getattr(self._task_config, "init_checkpoint_modules", None) or []
        prefixes = [modules] if isinstance(modules, str) else list(modules)
        try:
            load_model_weights(
                model, path, prefixes=prefixes, report=True,
                prefix_map=getattr(self._task_config, "init_checkpoint_prefix_map", None))
        except FileNotFoundError as e:
            raise FileNotFoundError(
                f"task.init_checkpoint: {e} Point it at a ckpt-<N> directory, a model_dir "
                "holding checkpoints, a .pt or .safetensors file or a Hugging Face model "
                "directory."
            ) from e
        _logger.info("initialized model from %s (modules: %s)", path, prefixes or "all")

    @staticmethod
    def split_inputs(inputs: Any) -> tuple[Any, Any]:
        """Splits a batch into ``(features, labels)``: a 2-tuple/list is split, else both."""
        if isinstance(inputs, (tuple, list)) and len(inputs) == 2:
            return inputs[0], inputs[1]
        return inputs, inputs

    def train_step(self, inputs: Any, model: nn.Module, optimizer: torch.optim.Optimizer,
                   metrics: Sequence[Any] | None = None) -> Logs:
        """One global step: clear gradients, ``forward_backward``, update the weights.

        Override it to change the update (several optimizers, a GAN's two phases);
        override :meth:`forward_backward` to change what is computed, which keeps
        gradient accumulation working.

        Args:
            inputs: One batch from ``build_inputs`` (already on the model's device).
            model: The model (wrapped for DDP/autocast when configured).
            optimizer: The optimizer; a ``LossScaleOptimizer`` under float16.
            metrics: Train metrics from ``build_metrics(training=True)``.

        Returns:
            Logs with the detached scalar loss under ``self.loss``. The Trainer averages
            it over the loop on device; nothing here reads a value back to the host.
        """
        optimizer.zero_grad(set_to_none=True)
        logs = self.forward_backward(inputs, model, optimizer, metrics)
        optimizer.step()
        return logs

    def forward_backward(self, inputs: Any, model: nn.Module, optimizer: torch.optim.Optimizer,
                         metrics: Sequence[Any] | None = None, *,
                         accumulation_steps: int = 1) -> Logs:
        """Forward pass, loss, metric updates, and the loss' gradients added to ``.grad``.

        It never updates the weights. With ``trainer.gradient_accumulation_steps = k``
        the Trainer calls it on k batches in a row, then ``optimizer.step()`` once.

        Args:
            inputs, model, metrics: As for :meth:`train_step`.
            optimizer: Its ``scale(loss)`` is applied under float16 loss scaling.
            accumulation_steps: The loss is divided by it before ``backward``, so that
                the gradients added up over that many calls are their mean.

        Returns:
            ``{self.loss: detached loss}`` (the loss before the division).
        """
        features, labels = self.split_inputs(inputs)
        outputs = model(features)
        loss = self.build_losses(labels, outputs, aux_losses=model_losses(model))
        scaled = loss / accumulation_steps if accumulation_steps != 1 else loss
        scale_loss(scaled, optimizer).backward()
        if metrics:
            self.process_metrics(metrics, labels, outputs)
        return {self.loss: loss.detach()}

    def validation_step(self, inputs: Any, model: nn.Module,
                        metrics: Sequence[Any] | None = None) -> Logs:
        """Forward pass, loss and metric updates; never changes weights."""
        features, labels = self.split_inputs(inputs)
        outputs = self.inference_step(features, model)
        loss = self.build_losses(labels, outputs, aux_losses=model_losses(model))
        if metrics:
            self.process_metrics(metrics, labels, outputs)
        return {self.loss: loss.detach()}

    def inference_step(self, inputs: Any, model: nn.Module) -> Any:
        """Runs the model for inference (the Trainer has put it in ``eval()`` mode)."""
        return model(inputs)

    def build_serving_module(self, model: nn.Module) -> Serving:
        """What an export of ``model`` computes (Model Garden's ``ExportModule``).

        Override it to put pre-processing (uint8 images -> normalized floats) and
        post-processing (softmax + top-k, NMS, argmax masks) inside the exported
        program. The default serves :meth:`inference_step` on the first two examples of
        ``task_config.validation_data`` (its first named set; built with
        :meth:`build_inputs`).

        Args:
            model: The trained model (the exporter puts it in ``eval()`` mode).

        Returns:
            A ``torchgarden.core.serving.Serving``: the module and example inputs.
        """
        batch = next(iter(self.build_inputs(first_validation_data(self.task_config))))
        features, _ = self.split_inputs(batch)
        features = features if isinstance(features, (tuple, list)) else (features,)
        example = tuple(x[:2] for x in features)
        names = ("inputs",) if len(example) == 1 else tuple(
            f"inputs_{i}" for i in range(len(example)))
        return Serving(module=InferenceStepModule(self, model), example_inputs=example,
                       input_names=names)

    def process_metrics(self, metrics: Sequence[Any], labels: Any, model_outputs: Any,
                        **kwargs: Any) -> None:
        """Calls ``update_state(labels, model_outputs)`` on every metric."""
        for metric in metrics:
            metric.update_state(labels, model_outputs, **kwargs)

    def aggregate_logs(self, state: Any = None, step_logs: Logs | None = None) -> Any:
        """Folds one eval step's logs into ``state`` on the host. Default: nothing.

        Called after every eval step with the previous state (``None`` first). Return a
        truthy state for ``reduce_aggregated_logs`` to run at the end of evaluation.
        """
        del state, step_logs
        return None

    def reduce_aggregated_logs(self, aggregated_logs: Any, global_step: int | None = None) -> Logs:
        """Turns the aggregated state into final eval logs (e.g. COCO AP). Default ``{}``."""
        del aggregated_logs, global_step
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(logging_dir={os.fspath(self._logging_dir)!r})"


def first_validation_data(task_config: Any) -> Any:
    """``task_config.validation_data``, or its first named validation set."""
    data = task_config.validation_data
    return next(iter(data.values())) if isinstance(data, Mapping) else data


def scale_loss(loss: torch.Tensor, optimizer: Any) -> torch.Tensor:
    """``optimizer.scale(loss)`` for a loss-scaling optimizer (float16), else ``loss``."""
    scale = getattr(optimizer, "scale", None)
    return scale(loss) if scale is not None else loss
