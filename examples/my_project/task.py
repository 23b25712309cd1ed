"""The project's task, registered for its config class (the starter's ``example_task.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import torchgarden as tg
from my_project.config import ProjectRegressionConfig
from torchgarden import data, metrics


@tg.register_task(ProjectRegressionConfig)
class ProjectRegressionTask(tg.Task):
    """MSE regression reporting the mean absolute error."""

    task_config: ProjectRegressionConfig

    def build_model(self) -> nn.Module:
        cfg = self.task_config
        return nn.Sequential(nn.Linear(cfg.in_features, cfg.hidden_size), nn.ReLU(),
                             nn.Linear(cfg.hidden_size, 1))

    def build_inputs(self, params: tg.DataConfig, input_context: Any = None) -> Any:
        cfg = self.task_config
        x, y = data.make_toy_regression(num_examples=2 * cfg.num_examples,
                                        in_features=cfg.in_features, seed=0)
        half = slice(0, cfg.num_examples) if params.is_training else slice(cfg.num_examples, None)
        return data.build_dataloader(data.ArrayDataset(x[half], y[half]), params,
                                     input_context=input_context)

    def build_losses(self, labels: torch.Tensor, model_outputs: torch.Tensor,
                     aux_losses: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
        return F.mse_loss(model_outputs, labels) + sum(aux_losses or [])

    def build_metrics(self, training: bool = True) -> list[Any]:
        return [metrics.MeanAbsoluteError()]
