"""``MultiTaskBaseModel``: shared modules and one sub-model per task.

Model Garden's ``official/modeling/multitask/base_model.py``. Each task trains and
evaluates its own sub-model (``sub_tasks[name]``), called exactly as that task's
single-task model would be; sharing is plain PyTorch: the sub-models hold the same
module objects (a backbone), so their gradients add up in the shared parameters.

Example:
    >>> backbone = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU())
    >>> model = MultiTaskBaseModel({"digits": nn.Sequential(backbone, nn.Linear(32, 10)),
    ...                             "parity": nn.Sequential(backbone, nn.Linear(32, 2))})
    >>> model(torch.zeros(4, 1, 8, 8), task="parity").shape
    torch.Size([4, 2])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

__all__ = ["MultiTaskBaseModel", "sub_model"]


class MultiTaskBaseModel(nn.Module):
    """Holds ``sub_tasks``: task name -> the ``nn.Module`` that task trains.

    Either pass the sub-models, or subclass and return them from
    ``_instantiate_sub_tasks()`` (Model Garden's hook; it runs after
    ``nn.Module.__init__``, so it may also assign shared parts to ``self``).

    ``forward(inputs, task=name)`` runs one sub-model; ``forward({name: inputs, ...})``
    runs each (one call, as DDP wants it, for the joint trainer). Either way the
    sub-model gets the inputs it would get alone.

    Args:
        sub_tasks: The sub-models by task name. Default: ``_instantiate_sub_tasks()``.
    """

    def __init__(self, sub_tasks: Mapping[str, nn.Module] | None = None) -> None:
        super().__init__()
        built = self._instantiate_sub_tasks() if sub_tasks is None else sub_tasks
        if not built:
            raise ValueError(f"{type(self).__name__} has no sub-model; give one per task.")
        self.sub_tasks = nn.ModuleDict(dict(built))

    def _instantiate_sub_tasks(self) -> Mapping[str, nn.Module]:
        """Returns the sub-model of each task (override it, or pass ``sub_tasks``)."""
        raise NotImplementedError(
            f"{type(self).__name__}: pass sub_tasks={{name: module}} or override "
            "_instantiate_sub_tasks()."
        )

    def forward(self, inputs: Any, task: str | None = None) -> Any:
        """Runs ``sub_tasks[task]`` on ``inputs``, or each task on ``inputs[task]``.

        Args:
            inputs: One task's features, or (``task`` None) ``{task name: features}``.
            task: The task to run. Default None: every task named in ``inputs``.

        Returns:
            The sub-model's outputs, or ``{task name: outputs}``.
        """
        if task is not None:
            return self.sub_tasks[task](inputs)
        if not isinstance(inputs, Mapping):
            raise TypeError(
                f"{type(self).__name__}() needs task=<name>, or inputs as {{task name: "
                f"features}}; got {type(inputs).__name__} without a task."
            )
        return {name: self.sub_tasks[name](features) for name, features in inputs.items()}

    def initialize(self) -> None:
        """Model Garden's hook to load pretrained weights; torchgarden uses the tasks'
        ``init_checkpoint`` instead (``MultiTask.initialize``). Default: nothing."""


def sub_model(model: nn.Module, name: str) -> nn.Module:
    """The module task ``name`` runs: ``model.sub_tasks[name]`` of a multi-task model
    that has one, else ``model`` itself (one model evaluated by several tasks)."""
    sub_tasks = getattr(model, "sub_tasks", None)
    if isinstance(sub_tasks, Mapping | nn.ModuleDict) and name in sub_tasks:
        return sub_tasks[name]
    return model
